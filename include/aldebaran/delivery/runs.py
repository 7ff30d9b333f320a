"""Runs: the group commit of the delivery ledger (BRIEF §2).

A run is a contiguous range of one alerts-topic partition's offsets, delivered to one channel by the
partition's owner:

    claim (one conditional create, key from channel/topic/partition/start offset)
      → send every alert of the range
      → record every outcome (one If-Match write)
      → commit the Kafka offsets

Key ``<prefix>/<channel>/runs/<topic>/<partition:05d>/<start:020d>.json``. The key is a function of
the range's first offset alone, so two workers reading the same partition from the same committed
offset meet at the same key and only one create succeeds (Kafka Connect's S3 sink keys its objects the
same way). The body holds the range's end, so whoever finds the run uses the same range.

Fencing: each owner of a (channel, partition) holds an **epoch** (:mod:`aldebaran.delivery.ledger`
bumps it with a compare-and-swap when a dispatcher is assigned the partition). A run carries the epoch
of its claimer. A newer owner that finds a run CLAIMED but never RECORDED adopts it (If-Match: the
stale owner's record write then fails, so it can never record past the new owner) and sends the run
again. What "again" means depends on the channel (the adopter decides, :mod:`aldebaran.delivery.settle`):
a channel that deduplicates by the alert id is sent the pending alerts again (harmless repeats); one
with a sent-log or provider lookup is asked per pending alert, and only what it does not have is sent;
one with neither records the pending alerts IN_DOUBT (each its own record) and sends nothing. A run of
a newer epoch tells an older owner that it is stale.

Entries: ``[offset, alert_id, status, receipt]``; status is one of

    D delivered · S a repeat of an alert id already settled (same run or an earlier one) ·
    R / X failed: the alert's own record (RETRY / DEAD) carries on · U in doubt: its own IN_DOUBT
    record carries on (a channel that cannot deduplicate) · M malformed alert (dead-lettered) ·
    ? pending (claimed, no outcome yet)

The run owns its transitions: :meth:`Run.apply` turns the send's outcomes into entries, and into the
exception records (aldebaran.delivery.records) that failed alerts carry on with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import msgspec

from aldebaran.delivery.records import DEAD as RECORD_DEAD
from aldebaran.delivery.records import IN_DOUBT as RECORD_IN_DOUBT
from aldebaran.delivery.records import Record, RetryPolicy
from aldebaran.exceptions import Fenced, LedgerCorrupt
from aldebaran.model import Alert

CLAIMED, RECORDED = "CLAIMED", "RECORDED"
DELIVERED, REPEAT, RETRYING, DEAD, MALFORMED, PENDING = "D", "S", "R", "X", "M", "?"
IN_DOUBT = "U"
FINAL = (DELIVERED, REPEAT, RETRYING, DEAD, IN_DOUBT, MALFORMED)


@dataclass
class Run:
    channel: str
    topic: str
    partition: int
    start: int
    end: int
    epoch: int
    owner: str
    state: str
    claimed_at: float
    entries: list  # [[offset, alert_id | None, status, receipt | None], ...]
    recorded_at: float | None = None
    history: list = field(default_factory=list)
    # The typed alerts of the range by offset, as polled (not stored: the alerts topic holds them).
    alerts: dict[int, Alert] = field(default_factory=dict, repr=False, compare=False)

    # --- codec ----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        # msgspec, not json.dumps: the stdlib encoder was a large share of a dispatcher's CPU per run
        # (docs/benchmarks.md, "Where a dispatcher's time goes"). Not dataclasses.asdict: it deep-copies.
        return _ENCODE({f: getattr(self, f) for f in _FIELDS})

    @classmethod
    def from_bytes(cls, body: bytes, key: str = "?") -> "Run":
        try:
            data = _DECODE(body)
            if not isinstance(data, dict):
                raise TypeError(f"JSON {type(data).__name__}, not an object")
            run = cls(**data)
            run._check()
            return run
        # msgspec.DecodeError is a ValueError; RecursionError: nesting deeper than the decoder recurses.
        except (ValueError, TypeError, RecursionError) as exc:
            raise LedgerCorrupt(f"delivery run {key} cannot be read: {exc}", key, str(exc)) from None

    def _check(self) -> None:
        """The fields the settle step does arithmetic and comparisons on (a wrong type fails there, later)."""
        for name in ("partition", "start", "end", "epoch"):
            if type(getattr(self, name)) is not int:
                raise TypeError(f"field {name!r} is {type(getattr(self, name)).__name__}")
        if self.state not in (CLAIMED, RECORDED) or not isinstance(self.owner, str):
            raise ValueError(f"state {self.state!r} / owner {self.owner!r}")
        if not isinstance(self.entries, list) or not all(isinstance(e, list) and len(e) == 4 and type(e[0]) is int
                                                         for e in self.entries):
            raise TypeError("entries are not [offset, alert_id, status, receipt] lists")

    # --- creation -------------------------------------------------------------------------------
    @classmethod
    def claim(cls, channel: str, topic: str, partition: int, entries: list, epoch: int, owner: str,
              now: float, alerts: dict[int, Alert] | None = None) -> "Run":
        """A new run over `entries` ([offset, alert_id | None, status, receipt]; offsets ascending)."""
        if not entries:
            raise ValueError("a run holds at least one offset")
        run = cls(channel=channel, topic=topic, partition=partition, start=entries[0][0], end=entries[-1][0],
                  epoch=epoch, owner=owner, state=CLAIMED, claimed_at=now, entries=entries, alerts=alerts or {})
        run.history.append({"at": now, "owner": owner, "epoch": epoch, "note": "claimed"})
        return run

    # --- transitions ----------------------------------------------------------------------------
    def adopt(self, now: float, owner: str, epoch: int) -> None:
        """A newer owner takes over a run its claimer never recorded."""
        if self.state != CLAIMED:
            raise ValueError(f"run {self.channel}/{self.partition}@{self.start} is {self.state}: nothing to adopt")
        if epoch <= self.epoch and owner != self.owner:
            raise Fenced(f"run {self.channel}/{self.topic}[{self.partition}]@{self.start} belongs to epoch "
                         f"{self.epoch} ({self.owner}); this dispatcher holds epoch {epoch}")
        self.history.append({"at": now, "owner": owner, "epoch": epoch, "note": f"adopted from {self.owner} (epoch {self.epoch})"})
        self.owner, self.epoch = owner, epoch
        for entry in self.entries:  # everything not settled elsewhere is open again; the adopter settles it
            if entry[2] not in (MALFORMED, REPEAT):
                entry[2], entry[3] = PENDING, None

    def settle(self, results: dict) -> None:
        """Give pending entries their outcome: `results` maps offset → (status, detail), status one of
        D (detail: the receipt), R / X / U (detail: the error; the alert's own record carries on) or S
        (a repeat found settled elsewhere). One pass, so a run of thousands costs one walk."""
        for entry in self.entries:
            got = results.get(entry[0])
            if got is None:
                continue
            if entry[2] != PENDING or got[0] not in FINAL:
                raise ValueError(f"run {self.channel}/{self.partition}@{self.start}: offset {entry[0]} "
                                 f"is {entry[2]}, cannot become {got[0]}")
            entry[2], entry[3] = got

    def apply(self, outcomes: dict, now: float, key: str, policy: RetryPolicy, can_dedupe: bool) -> list[Record]:
        """The send's outcomes (offset → Outcome, for the pending entries) become the run's entries, and
        the run is recorded. Returns the exception records of the alerts that were not delivered (RETRY,
        DEAD, IN_DOUBT: each carries on in its own record, which must be stored before the run is)."""
        results, records = {}, []
        for entry in self.pending():
            outcome = outcomes[entry[0]]
            if outcome.status == "delivered":
                results[entry[0]] = (DELIVERED, outcome.receipt)
                continue
            record = Record.claimed(self.channel, self.alerts[entry[0]], self.owner, now, None, run=key)
            record.apply(outcome, now, policy, can_dedupe)
            records.append(record)
            status = {RECORD_DEAD: DEAD, RECORD_IN_DOUBT: IN_DOUBT}.get(record.state, RETRYING)
            results[entry[0]] = (status, {"error": (record.error or "")[:200]})
        self.settle(results)
        self.record(now)
        return records

    def record(self, now: float) -> None:
        """Every entry has its outcome: the run is settled (the one write that records them follows).
        Idempotent: a record write retried after an object-store error notes it once."""
        if self.state == RECORDED:
            return
        open_ = [e[0] for e in self.entries if e[2] not in FINAL]
        if open_:
            raise ValueError(f"run {self.channel}/{self.partition}@{self.start}: offsets {open_[:5]} have no outcome")
        self.state, self.recorded_at = RECORDED, now
        self.history.append({"at": now, "owner": self.owner, "epoch": self.epoch, "note": "recorded"})

    # --- reading --------------------------------------------------------------------------------
    def pending(self) -> list[list]:
        """The entries without an outcome yet (a new run's alerts to send, or an adopted run's open ones)."""
        return [e for e in self.entries if e[2] == PENDING]

    def alert_ids(self) -> list[str]:
        return [e[1] for e in self.entries if e[1] is not None and e[2] != MALFORMED]

    def entry(self, alert_id: str) -> list | None:
        for e in self.entries:
            if e[1] == alert_id and e[2] != REPEAT:
                return e
        return None

    def counts(self) -> dict:
        out: dict[str, int] = {}
        for e in self.entries:
            out[e[2]] = out.get(e[2], 0) + 1
        return out


_FIELDS = tuple(f.name for f in fields(Run) if f.name != "alerts")


def _plain(value):
    """What the stdlib encoder accepted and msgspec does not: subclasses of str/int/float (e.g. email headers)."""
    for kind in (str, int, float):
        if isinstance(value, kind):
            return kind(value)
    raise TypeError(f"a run entry holds a {type(value).__name__}, which JSON cannot carry")


_ENCODE = msgspec.json.Encoder(enc_hook=_plain).encode
_DECODE = msgspec.json.Decoder().decode
