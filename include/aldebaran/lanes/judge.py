"""Reconciliation of the low-latency lane against the exact lane. Pure: no Kafka, no store.

The exact (micro-batch) auditor is the source of truth. The fast lane writes its alerts to a topic of its
own (``ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC``); the delivery path reads only the exact lane's topic, so a
fast-lane alert reaches a channel only once the exact lane has raised the same alert id. **That topic
boundary is the hold**: an alert the exact lane never confirms is never delivered by the dispatchers.
Subscribers of the fast topic (the latency-critical consumers the lane exists for) see every fast alert
at once; an unconfirmed one is what this module reports, as a count and as a record an operator settles.

Per alert id, with ``ttl`` the time the exact lane gets to confirm:

- **confirmed** — both lanes raised it (either may come first);
- **unconfirmed** — the fast lane raised it and the exact lane had not, ``ttl`` after the fast copy, while
  the exact topic had been read that far (its *horizon*: a record at least that late, or its end
  reached at that wall-clock time). A confirmation arriving later still counts: ``confirmed_late``, and
  the alert leaves the unconfirmed set;
- **missed** — an exact-lane alert of a kind the fast lane raises (OVERFILL) with no fast copy ``ttl``
  after it, by the fast topic's horizon. Delivered as today (it is on the exact topic); counted, so a
  lane that stops keeping up shows.

Times are Kafka record timestamps in epoch ms. The horizons make it safe to replay both topics after a
restart: nothing is judged before the other topic has been read past the point that decides it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

#: The alert kinds the fast lane raises; an exact-lane alert of another kind (ORPHAN, MISMATCH) is not "missed".
FAST_KINDS = frozenset({"OVERFILL"})
#: Unconfirmed alert ids kept in the status for operators (the full set is in the store's records).
SHOWN = 50


@dataclass
class Counts:
    fast: int = 0  # distinct fast-lane alert ids seen
    exact: int = 0  # distinct exact-lane alert ids of the fast lane's kinds seen
    confirmed: int = 0
    confirmed_late: int = 0  # confirmed after they had been reported unconfirmed
    unconfirmed: int = 0  # reported unconfirmed and not (yet) confirmed: what health fails on
    missed: int = 0
    repeats: int = 0  # the same alert id again on the same topic (at-least-once sinks)


@dataclass
class Verdicts:
    """What one :meth:`Reconciliation.judge` (or an arrival) decided."""

    unconfirmed: list[str] = field(default_factory=list)  # newly unconfirmed ids
    confirmed_late: list[str] = field(default_factory=list)  # ids that leave the unconfirmed set
    missed: list[str] = field(default_factory=list)


class Reconciliation:
    """The state of one lane's reconciliation. Feed it both topics' alerts, call :meth:`judge` as time passes."""

    def __init__(self, ttl_ms: int, retain_ms: int | None = None) -> None:
        if ttl_ms <= 0:
            raise ValueError("ttl_ms must be positive")
        self.ttl_ms = int(ttl_ms)
        # How long a judged alert id is remembered (to recognise a repeat or the other lane's late copy).
        self.retain_ms = int(retain_ms if retain_ms is not None else 4 * ttl_ms)
        self.counts = Counts()
        self.pending_fast: dict[str, int] = {}  # fast, not confirmed, not yet judged: id → ts
        self.pending_exact: dict[str, int] = {}  # exact, no fast copy, not yet judged: id → ts
        self.unconfirmed: dict[str, int] = {}  # judged unconfirmed: id → fast ts
        self.done: dict[str, int] = {}  # confirmed or missed ids → when (for repeats and late copies)
        # The same ids in time order, so that judging costs what it decides, not what is remembered: each
        # step used to scan every pending and remembered id, 5 times a second, and `done` holds 4 × ttl of
        # alerts (1.2M at 1k alerts/s). Entries whose id has left its dict (or came back with another time)
        # are dropped when they reach the top. `aldebaran bench reconcile-cost` measures both.
        self._fast_order: list[tuple[int, str]] = []
        self._exact_order: list[tuple[int, str]] = []
        self._done_order: list[tuple[int, str]] = []
        self.fast_horizon = 0
        self.exact_horizon = 0

    # --- arrivals ------------------------------------------------------------------------------
    def fast(self, alert_id: str, ts: int) -> Verdicts:
        out = Verdicts()
        self.fast_horizon = max(self.fast_horizon, ts)
        if alert_id in self.pending_fast or alert_id in self.unconfirmed:
            self.counts.repeats += 1
        elif alert_id in self.pending_exact:
            self.pending_exact.pop(alert_id)
            self.counts.fast += 1
            self.counts.confirmed += 1
            self._remember(alert_id, ts)
        elif alert_id in self.done:
            self.counts.repeats += 1  # a repeat of a settled id, or the fast copy of an alert already missed
        else:
            self.counts.fast += 1
            self.pending_fast[alert_id] = ts
            heapq.heappush(self._fast_order, (ts, alert_id))
        return out

    def exact(self, alert_id: str, kind: str, ts: int) -> Verdicts:
        out = Verdicts()
        self.exact_horizon = max(self.exact_horizon, ts)
        if kind not in FAST_KINDS:
            return out
        if alert_id in self.pending_fast:
            self.pending_fast.pop(alert_id)
            self.counts.exact += 1
            self.counts.confirmed += 1
            self._remember(alert_id, ts)
        elif alert_id in self.unconfirmed:
            self.unconfirmed.pop(alert_id)
            self.counts.exact += 1
            self.counts.unconfirmed -= 1
            self.counts.confirmed += 1
            self.counts.confirmed_late += 1
            self._remember(alert_id, ts)
            out.confirmed_late.append(alert_id)
        elif alert_id in self.pending_exact or alert_id in self.done:
            self.counts.repeats += 1
        else:
            self.counts.exact += 1
            self.pending_exact[alert_id] = ts
            heapq.heappush(self._exact_order, (ts, alert_id))
        return out

    def _remember(self, alert_id: str, ts: int) -> None:
        self.done[alert_id] = ts
        heapq.heappush(self._done_order, (ts, alert_id))

    # --- time -----------------------------------------------------------------------------------
    def caught_up(self, fast_at: int | None = None, exact_at: int | None = None) -> None:
        """A topic's end was reached at wall-clock `*_at` (ms): nothing older is still to come from it."""
        if fast_at is not None:
            self.fast_horizon = max(self.fast_horizon, fast_at)
        if exact_at is not None:
            self.exact_horizon = max(self.exact_horizon, exact_at)

    def judge(self) -> Verdicts:
        """Decide what the horizons allow: unconfirmed fast alerts, missed exact ones; forget old ids."""
        out = Verdicts()
        for alert_id, ts in _due(self._fast_order, self.pending_fast, self.exact_horizon - self.ttl_ms):
            del self.pending_fast[alert_id]
            self.unconfirmed[alert_id] = ts
            self.counts.unconfirmed += 1
            out.unconfirmed.append(alert_id)
        for alert_id, ts in _due(self._exact_order, self.pending_exact, self.fast_horizon - self.ttl_ms):
            del self.pending_exact[alert_id]
            self.counts.missed += 1
            self._remember(alert_id, ts)
            out.missed.append(alert_id)
        oldest = min(self.fast_horizon, self.exact_horizon) - self.retain_ms
        for alert_id, _ in _due(self._done_order, self.done, oldest - 1):  # older than `oldest`
            del self.done[alert_id]
        return out

    # --- reporting --------------------------------------------------------------------------------
    def resume_ms(self) -> int | None:
        """Where a restarted reconciler must read the fast topic from so that no pending id is lost (the
        exact topic: ``ttl`` earlier, as its copy may come first). None: nothing read yet."""
        pending = [ts for ts in self.oldest_pending() if ts is not None]
        if pending:
            return min(pending)
        horizon = min(self.fast_horizon, self.exact_horizon)
        return horizon or None

    def oldest_pending(self) -> tuple[int | None, int | None]:
        """The times of the oldest pending fast and exact alerts (None: none pending)."""
        return _oldest(self._fast_order, self.pending_fast), _oldest(self._exact_order, self.pending_exact)

    def status(self) -> dict:
        oldest = self.oldest_pending()[0]
        return {
            # The oldest alert still unconfirmed (its fast copy's time): what `lanes status` shows as its age.
            "oldest_unconfirmed_ms": min(self.unconfirmed.values(), default=None),
            "counts": vars(self.counts).copy(),
            "pending_fast": len(self.pending_fast),
            "pending_exact": len(self.pending_exact),
            "oldest_pending_fast_ms": oldest,
            "unconfirmed_ids": sorted(self.unconfirmed, key=self.unconfirmed.get)[:SHOWN],
            "fast_horizon_ms": self.fast_horizon,
            "exact_horizon_ms": self.exact_horizon,
            "ttl_ms": self.ttl_ms,
            "resume_ms": self.resume_ms(),
        }


def _due(order: list[tuple[int, str]], live: dict[str, int], limit: int) -> list[tuple[int, str]]:
    """Take the ids of `live` whose time is at most `limit` off the front of `order` (their heap), oldest
    first; entries no longer current in `live` are dropped on the way."""
    out = []
    while order and order[0][0] <= limit:
        ts, alert_id = heapq.heappop(order)
        if live.get(alert_id) == ts:
            out.append((alert_id, ts))
    return out


def _oldest(order: list[tuple[int, str]], live: dict[str, int]) -> int | None:
    """The oldest time still current in `live` (its heap `order`, stale tops dropped), or None."""
    while order and live.get(order[0][1]) != order[0][0]:
        heapq.heappop(order)
    return order[0][0] if order else None
