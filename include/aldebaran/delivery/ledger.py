"""The delivery ledger: one record per (channel, alert), the only coordination delivery needs.

Key: ``deliveries/<channel>/<alert_id>.json`` (both segments validated: a hostile id cannot climb
out of its prefix). The record is created as the claim (If-None-Match: *) and every later transition
is a compare-and-swap on its ETag (If-Match), so exactly one worker wins each step:

    (create) CLAIMED(lease_until, attempt) ──send ok──▶ DELIVERED(receipt, delivered_at)
                 │  └─send failed, retryable──▶ RETRY(next_at = now + backoff·jitter) ──due──▶ CLAIMED(attempt+1)
                 │  └─permanent, or attempt = max──▶ DEAD
                 └─lease expired──▶ CLAIMED(attempt+1)  if the channel deduplicates (idempotency key)
                                 └▶ IN_DOUBT            if it cannot (SMS): never re-sent automatically

A lost race (AlreadyExists / PreconditionFailed) is normal: another worker owns that delivery.

Records that need attention later are also listed in a small index beside the records
(``<prefix>-index/<retry|dead|in_doubt>/<channel>/<alert_id>``): the sweeper finds due retries and
stranded claims there without listing every record ever written, and stats/UI count them cheaply.
A marker is written before the record leaves the index's state and removed after it, so a crash in
between leaves an extra marker (harmless: the sweeper re-checks the record), never a missing one.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from aldebaran.delivery.backends import Backend
from aldebaran.exceptions import AlreadyExists, NotFound, PreconditionFailed
from aldebaran.objectstore import safe_segment

log = logging.getLogger(__name__)

CLAIMED, DELIVERED, RETRY, DEAD, IN_DOUBT = "CLAIMED", "DELIVERED", "RETRY", "DEAD", "IN_DOUBT"
STATES = (CLAIMED, DELIVERED, RETRY, DEAD, IN_DOUBT)
FINAL = (DELIVERED, DEAD)
MAX_HISTORY = 20


@dataclass
class Record:
    alert_id: str
    channel: str
    state: str
    attempt: int
    alert: dict
    created_at: float
    updated_at: float
    lease_until: float | None = None
    next_at: float | None = None
    owner: str | None = None
    receipt: dict | None = None
    delivered_at: float | None = None
    error: str | None = None
    indexed: bool = False  # listed in the retry index (removed again once final)
    history: list = field(default_factory=list)

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, body: bytes) -> "Record":
        return cls(**json.loads(body))

    def note(self, now: float, text: str | None = None) -> None:
        self.history.append({"state": self.state, "attempt": self.attempt, "at": now, **({"note": text} if text else {})})
        del self.history[:-MAX_HISTORY]


@dataclass
class Claim:
    """A delivery this worker owns until `record.lease_until`."""

    record: Record
    etag: str
    key: str


class LostLease(Exception):
    """The record changed under us (our lease expired and someone rescued it)."""


class Ledger:
    def __init__(
        self,
        backend: Backend,
        prefix: str = "deliveries",
        lease_seconds: float = 60.0,
        max_attempts: int = 5,
        backoff_base: float = 2.0,
        backoff_max: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.prefix = prefix.strip("/")
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.clock = clock

    def key(self, channel: str, alert_id: str) -> str:
        return f"{self.prefix}/{safe_segment(channel, 'channel')}/{safe_segment(alert_id, 'alert id')}.json"

    def index_key(self, kind: str, channel: str, alert_id: str) -> str:
        return f"{self.prefix}-index/{kind}/{safe_segment(channel, 'channel')}/{safe_segment(alert_id, 'alert id')}"

    def _mark(self, kind: str, record: "Record") -> None:
        if kind == RETRY.lower():
            record.indexed = True
        self.backend.put(self.index_key(kind, record.channel, record.alert_id), b"")

    def _unmark(self, kind: str, record: "Record") -> None:
        self.backend.delete(self.index_key(kind, record.channel, record.alert_id))

    def indexed(self, kind: str, channel: str) -> list[str]:
        """Alert ids listed in one index (retry, dead, in_doubt) of a channel."""
        prefix = f"{self.prefix}-index/{kind}/{safe_segment(channel, 'channel')}/"
        return [k[len(prefix):] for k in self.backend.list(prefix)]

    # --- reads ---------------------------------------------------------------------------------
    def get(self, channel: str, alert_id: str) -> tuple[Record, str] | None:
        try:
            body, etag = self.backend.get(self.key(channel, alert_id))
        except NotFound:
            return None
        return Record.from_bytes(body), etag

    def records(self, channel: str) -> list[Record]:
        out = []
        for key in self.backend.list(f"{self.prefix}/{safe_segment(channel, 'channel')}/"):
            try:
                body, _ = self.backend.get(key)
            except NotFound:
                continue
            out.append(Record.from_bytes(body))
        return out

    def channels(self) -> list[str]:
        seen = []
        for key in self.backend.list(self.prefix + "/"):
            parts = key[len(self.prefix) + 1:].split("/")
            if len(parts) == 2 and parts[0] not in seen:
                seen.append(parts[0])
        return seen

    # --- transitions ---------------------------------------------------------------------------
    def claim(self, channel: str, alert: dict, owner: str) -> Claim | None:
        """Create the record as CLAIMED (attempt 1). None if it already exists (someone has it)."""
        now = self.clock()
        record = Record(
            alert_id=alert["alert_id"], channel=channel, state=CLAIMED, attempt=1, alert=alert,
            created_at=now, updated_at=now, lease_until=now + self.lease_seconds, owner=owner,
        )
        record.note(now, "claimed")
        key = self.key(channel, record.alert_id)
        try:
            etag = self.backend.create(key, record.to_bytes())
        except AlreadyExists:
            return None
        return Claim(record, etag, key)

    def reclaim(self, channel: str, alert_id: str, owner: str, can_dedupe: bool) -> Claim | None:
        """Take over a delivery that is due: RETRY past next_at, or CLAIMED past its lease.

        An expired lease on a channel that cannot deduplicate becomes IN_DOUBT instead (returns None).
        """
        got = self.get(channel, alert_id)
        if got is None:
            return None
        record, etag = got
        now = self.clock()
        if record.state == RETRY and (record.next_at or 0) <= now:
            note = "retry"
        elif record.state == CLAIMED and (record.lease_until or 0) <= now:
            if not can_dedupe:
                record.state = IN_DOUBT
                record.error = f"lease of {record.owner} expired at attempt {record.attempt}: a send may have happened"
                record.updated_at = now
                record.lease_until = None
                record.note(now, "lease expired on a channel that cannot deduplicate")
                self._mark(IN_DOUBT.lower(), record)
                if self._swap(record, etag, self.key(channel, alert_id), lost_ok=True):
                    self._unmark(RETRY.lower(), record)
                return None
            self._mark(RETRY.lower(), record)  # rescued work stays findable if this worker dies too
            note = f"rescued from {record.owner} (lease expired)"
        else:
            return None
        record.state = CLAIMED
        record.attempt += 1
        record.owner = owner
        record.lease_until = now + self.lease_seconds
        record.next_at = None
        record.updated_at = now
        record.note(now, note)
        key = self.key(channel, alert_id)
        new_etag = self._swap(record, etag, key, lost_ok=True)
        return Claim(record, new_etag, key) if new_etag else None

    def delivered(self, claim: Claim, receipt: dict) -> Record:
        r = claim.record
        now = self.clock()
        was_indexed, r.indexed = r.indexed, False
        r.state, r.receipt, r.delivered_at, r.updated_at = DELIVERED, receipt, now, now
        r.lease_until, r.error = None, None
        r.note(now, "delivered")
        claim.etag = self._swap(r, claim.etag, claim.key)
        if was_indexed:
            self._unmark(RETRY.lower(), r)
        return r

    def failed(self, claim: Claim, error: str, permanent: bool = False) -> Record:
        r = claim.record
        now = self.clock()
        r.error, r.updated_at, r.lease_until = error[:500], now, None
        if permanent or r.attempt >= self.max_attempts:
            r.state = DEAD
            r.note(now, "permanent failure" if permanent else f"gave up after {r.attempt} attempts")
            self._mark(DEAD.lower(), r)
            claim.etag = self._swap(r, claim.etag, claim.key)
            self._unmark(RETRY.lower(), r)
        else:
            r.state = RETRY
            delay = min(self.backoff_max, self.backoff_base * 2 ** (r.attempt - 1))
            r.next_at = now + delay * random.uniform(0.5, 1.0)  # jitter over the upper half of the backoff
            r.note(now, f"retry in {r.next_at - now:.1f}s")
            self._mark(RETRY.lower(), r)
            claim.etag = self._swap(r, claim.etag, claim.key)
        return r

    def in_doubt(self, claim: Claim, error: str) -> Record:
        """The send may or may not have reached a provider that cannot deduplicate: never resend."""
        r = claim.record
        now = self.clock()
        r.state, r.error, r.updated_at, r.lease_until = IN_DOUBT, error[:500], now, None
        r.note(now, "outcome unknown on a channel that cannot deduplicate")
        self._mark(IN_DOUBT.lower(), r)
        claim.etag = self._swap(r, claim.etag, claim.key)
        self._unmark(RETRY.lower(), r)
        return r

    def resolve(self, channel: str, alert_id: str, outcome: str, reason: str, who: str) -> Record:
        """An operator settles an IN_DOUBT or DEAD delivery by hand; the reason is recorded.

        DELIVERED: it did reach the recipient (checked with the provider). DEAD: give up.
        RETRY: send again, with a fresh set of attempts (only after making sure it did not arrive).
        """
        if outcome not in (DELIVERED, DEAD, RETRY):
            raise ValueError(f"outcome must be DELIVERED, DEAD or RETRY, not {outcome!r}")
        if not reason.strip():
            raise ValueError("a reason is required")
        got = self.get(channel, alert_id)
        if got is None:
            raise NotFound(f"no delivery record for {channel}/{alert_id}")
        record, etag = got
        if record.state not in (IN_DOUBT, DEAD):
            raise ValueError(f"{channel}/{alert_id} is {record.state}: only IN_DOUBT or DEAD can be resolved by hand")
        previous = record.state
        now = self.clock()
        record.state, record.updated_at, record.lease_until, record.owner = outcome, now, None, who
        if outcome == RETRY:
            record.next_at, record.attempt, record.error = now, 0, None
            self._mark(RETRY.lower(), record)
        elif outcome == DELIVERED:
            record.delivered_at = record.delivered_at or now
        record.note(now, f"resolved {previous} → {outcome} by {who}: {reason}")
        self._swap(record, etag, self.key(channel, alert_id))
        if outcome != previous:
            self._unmark(previous.lower(), record)
        if outcome == DEAD:
            self._mark(DEAD.lower(), record)
        return record

    def _swap(self, record: Record, etag: str, key: str, lost_ok: bool = False) -> str | None:
        try:
            return self.backend.replace(key, record.to_bytes(), etag)
        except PreconditionFailed:
            if lost_ok:
                return None
            raise LostLease(f"{key} changed under {record.owner}") from None

    # --- stats ----------------------------------------------------------------------------------
    def stats(self, channel: str, detail: bool = True) -> dict:
        """Per-channel figures. Counts come from key listings and the small index; only the
        records in the retry index are read (for in-flight vs waiting and the oldest age)."""
        now = self.clock()
        total = sum(1 for _ in self.backend.list(f"{self.prefix}/{safe_segment(channel, 'channel')}/"))
        retry_ids = self.indexed(RETRY.lower(), channel)
        dead = len(self.indexed(DEAD.lower(), channel))
        in_doubt = len(self.indexed(IN_DOUBT.lower(), channel))
        retrying = in_flight = 0
        oldest = None
        if detail:
            for alert_id in retry_ids:
                got = self.get(channel, alert_id)
                if got is None:
                    continue
                r = got[0]
                if r.state == RETRY:
                    retrying += 1
                elif r.state == CLAIMED and (r.lease_until or 0) > now:
                    in_flight += 1
                if r.state in (RETRY, CLAIMED):
                    age = now - r.created_at
                    oldest = age if oldest is None else max(oldest, age)
        else:
            retrying = len(retry_ids)
        return {
            "channel": channel,
            "records": total,
            "pending": retrying,
            "in_flight": in_flight,
            "delivered": max(0, total - len(retry_ids) - dead - in_doubt),
            "retrying": retrying,
            "dead": dead,
            "in_doubt": in_doubt,
            "oldest_pending_age_s": round(oldest, 1) if oldest is not None else None,
            "lease_seconds": self.lease_seconds,
            "rescue_interval_s": self.lease_seconds,
            "max_attempts": self.max_attempts,
        }
