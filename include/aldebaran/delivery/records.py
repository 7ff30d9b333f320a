"""Per-alert delivery records: the exceptions of the group-commit ledger, and single deliveries.

Most alerts are settled inside a run (aldebaran.delivery.runs) and never get a record of their own.
A record is kept where one alert needs its own state:

- RETRY / DEAD: a send failed (retry with backoff until DEAD after N attempts);
- IN_DOUBT: a send may have reached a provider that cannot deduplicate; never re-sent automatically,
  settled by asking the provider (a channel with a lookup) or by an operator;
- IN_DOUBT also for the pending alerts of a run adopted after its owner died, on a channel that
  cannot deduplicate and has no lookup exact at once (at most one run per partition and crash);
- out-of-band deliveries (the supervisor's pages).

Key ``<prefix>/<channel>/alerts/<alert_id>.json``. Created with If-None-Match: * (the claim), every
later transition is a compare-and-swap on its ETag (If-Match), so exactly one worker wins each step:

    CLAIMED(lease_until, attempt) ──ok──▶ DELIVERED
       │  └─retryable──▶ RETRY(next_at) ──due──▶ CLAIMED(attempt+1)      └─attempt = max, or permanent──▶ DEAD
       └─lease expired──▶ CLAIMED(attempt+1) if the channel deduplicates, else IN_DOUBT
    IN_DOUBT ──provider lookup: sent──▶ DELIVERED        ──lookup: provider has no such message──▶ RETRY
    IN_DOUBT / DEAD ──operator──▶ DELIVERED | DEAD | RETRY (with a reason)

The record owns these transitions (its methods; :meth:`Record.apply` maps a send's outcome onto them);
the ledger stores it (aldebaran.delivery.handles).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, fields

from aldebaran.exceptions import LedgerCorrupt
from aldebaran.model import Alert

CLAIMED, DELIVERED, RETRY, DEAD, IN_DOUBT = "CLAIMED", "DELIVERED", "RETRY", "DEAD", "IN_DOUBT"
STATES = (CLAIMED, DELIVERED, RETRY, DEAD, IN_DOUBT)
SETTLED = (DELIVERED, DEAD, IN_DOUBT, RETRY)  # nothing more to do now for the alert's Kafka offset
MAX_HISTORY = 20


class InvalidTransition(ValueError):
    """A transition the record's state does not allow (a caller's bug or an operator's mistake)."""


@dataclass
class Record:
    alert_id: str
    channel: str
    state: str
    attempt: int
    alert: Alert
    created_at: float
    updated_at: float
    lease_until: float | None = None
    next_at: float | None = None
    owner: str | None = None
    receipt: dict | None = None
    delivered_at: float | None = None
    error: str | None = None
    doubted_at: float | None = None
    run: str | None = None  # the run key this alert came from, when it was an exception of a run
    history: list = field(default_factory=list)

    # --- codec ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The record as stored (and shown: CLI, pages, explain), its alert as the contract's fields."""
        out = {f: getattr(self, f) for f in _FIELDS}
        out["alert"] = self.alert.to_dict()
        return out

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, body: bytes, key: str = "?") -> "Record":
        try:
            data = json.loads(body)
            if not isinstance(data, dict):
                raise TypeError(f"JSON {type(data).__name__}, not an object")
            data.pop("indexed", None)  # written by older ledgers
            data["alert"] = Alert.from_dict(data.get("alert"))
            record = cls(**data)
            record._check()
            return record
        # AlertError is a ValueError; RecursionError: JSON nested deeper than the parser recurses (a stored
        # body has no depth bound before the parser, unlike an alert off Kafka), found by `chaos fuzz`.
        except (ValueError, TypeError, RecursionError) as exc:
            raise LedgerCorrupt(f"delivery record {key} cannot be read: {exc}", key, str(exc)) from None

    def _check(self) -> None:
        """Every field of the type its transitions compare and add (a wrong one would fail later, mid-sweep)."""
        for name, kinds in _TYPES.items():
            value = getattr(self, name)
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise TypeError(f"field {name!r} is {type(value).__name__}")
        if self.state not in STATES:
            raise ValueError(f"unknown state {self.state!r}")

    def _note(self, now: float, text: str | None = None) -> None:
        self.updated_at = now
        self.history.append({"state": self.state, "attempt": self.attempt, "at": now, **({"note": text} if text else {})})
        del self.history[:-MAX_HISTORY]

    # --- creation -------------------------------------------------------------------------------
    @classmethod
    def claimed(cls, channel: str, alert: Alert, owner: str, now: float, lease_seconds: float | None,
                run: str | None = None) -> "Record":
        """A delivery claimed for its first attempt: under a lease (its own record), or as the exception
        record of a run whose send already happened (`run`: the run's key, no lease)."""
        record = cls(alert_id=alert.alert_id, channel=channel, state=CLAIMED, attempt=1, alert=alert,
                     created_at=now, updated_at=now, owner=owner, run=run,
                     lease_until=None if lease_seconds is None else now + lease_seconds)
        record._note(now, f"sent in run {run}" if run else "claimed")
        return record

    # --- transitions ----------------------------------------------------------------------------
    def apply(self, outcome, now: float, policy: "RetryPolicy", can_dedupe: bool) -> None:
        """One send's outcome (aldebaran.delivery.channels.base.Outcome): DELIVERED; an unknown outcome
        IN_DOUBT where a resend is unsafe, else a retry with the same idempotency key; a failure RETRY
        (DEAD when permanent or out of attempts)."""
        error = outcome.error or outcome.status
        if outcome.status == "delivered":
            self.delivered(now, outcome.receipt)
        elif outcome.status == "unknown" and not can_dedupe:
            self.doubted(now, f"outcome unknown: {error}")
        elif outcome.status == "unknown":
            self.failed(now, f"outcome unknown, will resend with the same key: {error}", False, policy)
        else:
            self.failed(now, error, outcome.status == "permanent", policy)

    def delivered(self, now: float, receipt: dict | None, note: str = "delivered") -> None:
        if self.state not in (CLAIMED, IN_DOUBT):
            raise InvalidTransition(f"{self.channel}/{self.alert_id}: {self.state} cannot become DELIVERED")
        self.state, self.receipt, self.delivered_at = DELIVERED, receipt, now
        self.lease_until, self.error, self.next_at = None, None, None
        self._note(now, note)

    def failed(self, now: float, error: str, permanent: bool, policy: "RetryPolicy") -> None:
        if self.state != CLAIMED:
            raise InvalidTransition(f"{self.channel}/{self.alert_id}: {self.state} cannot fail")
        self.error, self.lease_until = error[:500], None
        if permanent or self.attempt >= policy.max_attempts:
            self.state = DEAD
            self._note(now, "permanent failure" if permanent else f"gave up after {self.attempt} attempts")
        else:
            self.state = RETRY
            self.next_at = now + policy.delay(self.attempt)
            self._note(now, f"retry in {self.next_at - now:.1f}s")

    def doubted(self, now: float, error: str) -> None:
        """The send may or may not have reached a provider that cannot deduplicate: never resend blindly."""
        if self.state != CLAIMED:
            raise InvalidTransition(f"{self.channel}/{self.alert_id}: {self.state} cannot become IN_DOUBT")
        self.state, self.error, self.lease_until, self.doubted_at = IN_DOUBT, error[:500], None, now
        self._note(now, "outcome unknown on a channel that cannot deduplicate")

    def due(self, now: float) -> bool:
        return (self.state == RETRY and (self.next_at or 0) <= now) or \
            (self.state == CLAIMED and (self.lease_until or 0) <= now)

    def take_over(self, now: float, owner: str, lease_seconds: float, can_dedupe: bool) -> bool:
        """Claim a due delivery for another attempt. An expired lease on a channel that cannot
        deduplicate becomes IN_DOUBT instead (returns False: nothing to send)."""
        if not self.due(now):
            raise InvalidTransition(f"{self.channel}/{self.alert_id}: {self.state} is not due")
        if self.state == CLAIMED:
            if not can_dedupe:
                self.doubted(now, f"lease of {self.owner} expired at attempt {self.attempt}: a send may have happened")
                return False
            note = f"rescued from {self.owner} (lease expired)"
        else:
            note = "retry"
        self.state, self.attempt, self.owner = CLAIMED, self.attempt + 1, owner
        self.lease_until, self.next_at = now + lease_seconds, None
        self._note(now, note)
        return True

    def settled_by_lookup(self, now: float, found: dict | None) -> None:
        """The provider answered "did you send reference <alert_id>?": yes → DELIVERED with its receipt;
        no → RETRY now (the provider never had it, so the next send is the first one)."""
        if self.state != IN_DOUBT:
            raise InvalidTransition(f"{self.channel}/{self.alert_id}: {self.state} is not IN_DOUBT")
        if found is not None:
            self.state, self.receipt, self.delivered_at, self.error = DELIVERED, found, now, None
            self._note(now, "settled by the provider's lookup: it has the message")
        else:
            self.state, self.next_at = RETRY, now
            self._note(now, "settled by the provider's lookup: no such message; sending it")

    def resolved(self, now: float, outcome: str, reason: str, who: str) -> str:
        """An operator settles an IN_DOUBT or DEAD delivery by hand; returns the previous state.

        DELIVERED: it did reach the recipient (checked with the provider). DEAD: give up.
        RETRY: send again, with a fresh set of attempts (only after making sure it did not arrive).
        """
        if outcome not in (DELIVERED, DEAD, RETRY):
            raise ValueError(f"outcome must be DELIVERED, DEAD or RETRY, not {outcome!r}")
        if not reason.strip():
            raise ValueError("a reason is required")
        if self.state not in (IN_DOUBT, DEAD):
            raise ValueError(f"{self.channel}/{self.alert_id} is {self.state}: only IN_DOUBT or DEAD can be resolved by hand")
        previous = self.state
        self.state, self.lease_until, self.owner = outcome, None, who
        if outcome == RETRY:
            self.next_at, self.attempt, self.error = now, 0, None
        elif outcome == DELIVERED:
            self.delivered_at = self.delivered_at or now
        self._note(now, f"resolved {previous} → {outcome} by {who}: {reason}")
        return previous


_FIELDS = tuple(f.name for f in fields(Record))
_NUM, _OPT_NUM = (int, float), (int, float, type(None))
_TYPES = {"alert_id": str, "channel": str, "state": str, "attempt": int, "created_at": _NUM, "updated_at": _NUM,
          "lease_until": _OPT_NUM, "next_at": _OPT_NUM, "owner": (str, type(None)), "receipt": (dict, type(None)),
          "delivered_at": _OPT_NUM, "error": (str, type(None)), "doubted_at": _OPT_NUM, "run": (str, type(None)),
          "history": list}


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    backoff_base: float = 2.0
    backoff_max: float = 300.0

    def delay(self, attempt: int) -> float:
        base = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return base * random.uniform(0.5, 1.0)  # jitter over the upper half of the backoff
