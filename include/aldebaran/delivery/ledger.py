"""The delivery ledger: the repository of runs, per-alert records and partition owners (BRIEF §2).

Layout under ``<prefix>`` (default ``deliveries``) in one :class:`aldebaran.storage.store.Store`:

    <prefix>/<channel>/runs/<topic>/<partition:05d>/<start:020d>.json    a run (aldebaran.delivery.runs)
    <prefix>/<channel>/owners/<topic>/<partition:05d>.json                the partition's owner epoch
    <prefix>/<channel>/alerts/<alert_id>.json                             a per-alert record (records.py)
    <prefix>/<channel>/sent/<alert_id>                                    the run that sent it (sent markers)
    <prefix>-index/<retry|dead|in_doubt>/<channel>/<alert_id>             records needing attention

Costs on every channel: two writes per run (claim + record), whatever the run's size, plus one owner
write per partition assignment; per-alert records only for failures and doubts. A channel that can
neither deduplicate nor remember what it sent (SMS) also gets one sent marker per alert, so a repeat
of its alert id is recognised forever (it is provider-bound: a write per message costs nothing there). The index lets
the retry sweep, stats and the UI find the records that need attention without listing every object:
a marker is written before a record enters an indexed state and removed after it leaves, so a crash
in between leaves an extra marker (the sweep re-checks the record), never a missing one. A reader that
finds a marker ahead of its record may be looking between another writer's mark and write: so a writer
marks again once its write is stored, and whoever removes a marker reads the record once more and puts
the marker back if the record is (again) in that state. Whichever removal comes last, its read follows
the write it raced with.

The ledger is a repository: its claim sequences (:meth:`Ledger.attempt`, :meth:`Ledger.retry`,
:meth:`Ledger.doubted`, :meth:`Ledger.open_run`) hand out handles (aldebaran.delivery.handles) whose
``report`` is the only write of a delivery's outcome. The aggregates own their transitions (Run.apply,
Record.apply, ...); the ledger stores them with the right condition and translates a lost
compare-and-swap into :class:`~aldebaran.exceptions.Fenced` (a run) or ``None`` (a record someone else
moved on). This module holds the keys, the claim sequences and the conditional writes; the reads are in
reads.py, the partition owners in owners.py and the listings for reports in reports.py (its mixins).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

from aldebaran.delivery import handles
from aldebaran.delivery.handles import Attempt, RunHandle
from aldebaran.delivery.owners import LedgerOwners
from aldebaran.delivery.reads import LedgerReads
from aldebaran.delivery.records import CLAIMED, DEAD, IN_DOUBT, RETRY, SETTLED, Record, RetryPolicy
from aldebaran.delivery.reports import LedgerReports
from aldebaran.delivery.runs import MALFORMED, PENDING, RECORDED, REPEAT, Run
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.exceptions import AlreadyExists, Fenced, NotFound, PreconditionFailed
from aldebaran.model import Alert
from aldebaran.storage.quarantine import quarantine
from aldebaran.storage.store import Store, safe_segment

INDEXED = {RETRY: "retry", DEAD: "dead", IN_DOUBT: "in_doubt"}
# The states whose records keep each marker: a retried delivery keeps its retry marker while CLAIMED.
MARKED_STATES = {"retry": (RETRY, CLAIMED), "dead": (DEAD,), "in_doubt": (IN_DOUBT,)}


class Ledger(LedgerReads, LedgerOwners, LedgerReports):
    def __init__(self, store: Store, prefix: str = "deliveries", lease_seconds: float = 60.0,
                 policy: RetryPolicy | None = None, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.lease_seconds = lease_seconds
        self.policy = policy or RetryPolicy()
        self.clock = clock
        self.writes = 0  # object write requests made through this ledger (benchmarks: writes per delivery)
        self.quarantined: dict[str, int] = {}  # channel → corrupt objects moved to the quarantine
        self._count = threading.Lock()

    @classmethod
    def from_settings(cls, settings: DeliverySettings, store: Store | None = None) -> "Ledger":
        from aldebaran.storage.store import open_store

        return cls(store or open_store(settings.store), prefix=settings.prefix, lease_seconds=settings.lease_seconds,
                   policy=RetryPolicy(settings.max_attempts, settings.backoff_base_seconds, settings.backoff_max_seconds))

    @property
    def max_attempts(self) -> int:
        return self.policy.max_attempts

    # --- keys -----------------------------------------------------------------------------------
    def _channel(self, channel: str) -> str:
        return f"{self.prefix}/{safe_segment(channel, 'channel')}"

    def run_prefix(self, channel: str, topic: str, partition: int) -> str:
        return f"{self._channel(channel)}/runs/{safe_segment(topic, 'topic')}/{partition:05d}/"

    def run_key(self, channel: str, topic: str, partition: int, start: int) -> str:
        return f"{self.run_prefix(channel, topic, partition)}{start:020d}.json"

    def owner_key(self, channel: str, topic: str, partition: int) -> str:
        return f"{self._channel(channel)}/owners/{safe_segment(topic, 'topic')}/{partition:05d}.json"

    def key(self, channel: str, alert_id: str) -> str:
        return f"{self._channel(channel)}/alerts/{safe_segment(alert_id, 'alert id')}.json"

    def sent_key(self, channel: str, alert_id: str) -> str:
        return f"{self._channel(channel)}/sent/{safe_segment(alert_id, 'alert id')}"

    def index_key(self, kind: str, channel: str, alert_id: str) -> str:
        return f"{self.prefix}-index/{kind}/{safe_segment(channel, 'channel')}/{safe_segment(alert_id, 'alert id')}"

    def quarantine(self, key: str, reason: str, reader: str, channel: str, body: bytes | None = None,
                   remove: bool = True) -> str | None:
        """Move a corrupt ledger object (or an odd index key) to ``<prefix>-quarantine/<key>`` with its
        reason (aldebaran.storage.quarantine), counted per channel in `quarantined`."""
        where = quarantine(self.store, key, reason, reader, body, self.quarantine_prefix(), remove)
        with self._count:
            self.quarantined[channel] = self.quarantined.get(channel, 0) + 1
        return where

    def quarantine_prefix(self) -> str:
        return f"{self.prefix}-quarantine/"

    # --- the claim sequences: each hands out a handle ---------------------------------------------
    def open_run(self, channel, topic: str, partition: int, epoch: int, owner: str, buffer: list, max_run: int,
                 seen=(), look: bool = True, unsent=()) -> RunHandle:
        """The run that starts at `buffer`'s first offset (buffer: ``[(offset, raw, Alert | None, error)]``
        polled, in order). A run found RECORDED is skipped; one CLAIMED by another owner (or by this one,
        interrupted after its send began: its start is not in `unsent`) is adopted, If-Match fencing the
        old owner; none: a new run over the next ≤ max_run offsets is claimed (If-None-Match: *), its
        alerts already in `seen` (or earlier in the run) entered as repeats. `look` False claims without
        reading first (one round trip less; a run that exists makes the create fail: CONTESTED)."""
        name, start = channel.name, buffer[0][0]
        found = self.get_run(name, topic, partition, start) if look else None
        if found is None:
            entries, alerts, in_run = [], {}, set()
            for offset, _raw, alert, error in buffer[:max_run]:
                if alert is None:
                    entries.append([offset, None, MALFORMED, {"reason": str(error)}])  # error: a Rejected
                    continue
                alerts[offset] = alert
                if alert.alert_id in seen or alert.alert_id in in_run:
                    entries.append([offset, alert.alert_id, REPEAT, None])
                else:
                    in_run.add(alert.alert_id)
                    entries.append([offset, alert.alert_id, PENDING, None])
            run = Run.claim(name, topic, partition, entries, epoch, owner, self.clock(), alerts)
            etag = self._create_run(run)
            return RunHandle(self, channel, handles.NEW if etag else handles.CONTESTED, run, etag)
        run, etag = found
        if run.state == RECORDED:
            return RunHandle(self, channel, handles.RECORDED_RUN, run, etag)
        if run.end > buffer[-1][0]:
            return RunHandle(self, channel, handles.WAIT, run, etag)
        run.alerts = {b[0]: b[2] for b in buffer if b[0] <= run.end and b[2] is not None}
        if (run.owner, run.epoch) == (owner, epoch) and run.start in unsent:
            return RunHandle(self, channel, handles.OURS, run, etag)  # failed before any send: no doubt
        previous = f"{run.owner} (epoch {run.epoch})"
        run.adopt(self.clock(), owner, epoch)
        return RunHandle(self, channel, handles.ADOPTED, run, self.save_run(run, etag), previous)

    def attempt(self, channel, alert: Alert, owner: str) -> Attempt:
        """One alert's delivery through its own record (alerts that do not come from the alerts topic):
        claimed now (If-None-Match: *), or taken over if its record is due (an expired lease, a retry)."""
        record = Record.claimed(channel.name, alert, owner, self.clock(), self.lease_seconds)
        etag = self.create(record)
        if etag is not None:
            return Attempt(self, channel, handles.SEND, record, etag)
        return self._take(channel, self.get(channel.name, alert.alert_id), owner)

    def retry(self, channel, alert_id: str, owner: str) -> Attempt | None:
        """The sweep's claim of a record in the retry index; None if it left that state (marker removed)."""
        got = self.get(channel.name, self._indexed_id("retry", channel.name, alert_id))
        if got is None or got[0].state not in MARKED_STATES["retry"]:
            self.unmark("retry", channel.name, alert_id)
            return None
        return self._take(channel, got, owner)

    def _take(self, channel, got: tuple[Record, str] | None, owner: str) -> Attempt:
        if got is None:  # only an operator deletes records: nothing to do
            return Attempt(self, channel, handles.ALREADY)
        record, etag = got
        now = self.clock()
        if not record.due(now):
            return Attempt(self, channel, handles.ALREADY if record.state in SETTLED else handles.BUSY, record, etag)
        previous = record.state
        send = record.take_over(now, owner, self.lease_seconds, channel.can_dedupe)
        etag = self.save(record, etag, previous)
        if etag is None:
            return Attempt(self, channel, handles.BUSY, record)
        return Attempt(self, channel, handles.SEND if send else handles.DOUBT, record, etag)

    def doubted(self, channel, alert_id: str) -> Attempt | None:
        """A record in the in_doubt index, for the provider's lookup; None if it left IN_DOUBT (marker removed)."""
        got = self.get(channel.name, self._indexed_id("in_doubt", channel.name, alert_id))
        if got is None or got[0].state not in MARKED_STATES["in_doubt"]:
            self.unmark("in_doubt", channel.name, alert_id)
            return None
        return Attempt(self, channel, handles.DOUBT, *got)

    def resolve(self, channel: str, alert_id: str, outcome: str, reason: str, who: str) -> Record:
        """An operator settles an IN_DOUBT or DEAD delivery (Record.resolved)."""
        got = self.get(channel, alert_id)
        if got is None:
            raise NotFound(f"no delivery record for {channel}/{alert_id}")
        record, etag = got
        previous = record.resolved(self.clock(), outcome, reason, who)
        if self.save(record, etag, previous) is None:
            raise PreconditionFailed(f"{channel}/{alert_id} changed while it was being resolved; try again")
        return record

    # --- conditional writes: what the claim sequences and the handles store -----------------------
    def unmark(self, kind: str, channel: str, alert_id: str) -> None:
        """Remove a marker its record has left; put it back if the record is in its state after all (a
        writer marked, then stored the record, between this caller's read and the removal)."""
        key = self.index_key(kind, channel, alert_id)
        self.store.delete(key)
        got = self.get(channel, alert_id)
        if got is not None and got[0].state in MARKED_STATES[kind]:
            self._write(self.store.put, key, b"")

    def _create_run(self, run: Run) -> str | None:
        """Create the run (If-None-Match: *). Its ETag, or None if a run already starts there."""
        try:
            return self._write(self.store.create, self.run_key(run.channel, run.topic, run.partition, run.start),
                               run.to_bytes())
        except AlreadyExists:
            return None

    def save_run(self, run: Run, etag: str, token: str | None = None) -> str:
        """Store the run's new state (adopted, recorded) if nobody changed it since `etag`; else Fenced.
        `token`: the writer token of a write that may be repeated (aldebaran.storage.store)."""
        key = self.run_key(run.channel, run.topic, run.partition, run.start)
        try:
            if token is not None:
                return self._write(self.store.replace, key, run.to_bytes(), etag, "application/json", token)
            return self._write(self.store.replace, key, run.to_bytes(), etag)
        except PreconditionFailed:
            raise Fenced(f"{key} changed under {run.owner} (epoch {run.epoch}): another owner took this run") from None

    def create(self, record: Record) -> str | None:
        """Store a new record (If-None-Match: *): its ETag, or None if the alert already has one."""
        self._mark(record.state, record)
        try:
            etag = self._write(self.store.create, self.key(record.channel, record.alert_id), record.to_bytes())
        except AlreadyExists:
            return None
        self._mark(record.state, record)  # again: a sweep may have removed it before the record existed
        return etag

    def save(self, record: Record, etag: str, previous_state: str) -> str | None:
        """Store a record's transition if nobody moved it since `etag`; None if someone did."""
        self._mark(record.state, record)
        try:
            new = self._write(self.store.replace, self.key(record.channel, record.alert_id), record.to_bytes(), etag)
        except PreconditionFailed:
            return None
        if previous_state != record.state:
            self._mark(record.state, record)  # again: a sweep may have removed it before this write
            # A retried delivery keeps its retry marker while CLAIMED, so it stays findable if this
            # worker dies mid-send; the marker goes once the record leaves for any other state.
            if previous_state != CLAIMED:
                if record.state != CLAIMED:
                    self._unmark(previous_state, record)
            elif record.state != RETRY:
                self._unmark(RETRY, record)
        return new

    def claim_sent(self, channel: str, alert_id: str, run_key: str) -> str | None:
        """An alert's sent marker naming the run (If-None-Match: *), before its first send on a channel that
        needs one (aldebaran.delivery.settle): None if `run_key` holds it (created now, or by this run before
        an adoption), else the holder's run key (it names the topic, so the lane, that delivered the alert)."""
        key = self.sent_key(channel, alert_id)
        try:
            self._write(self.store.create, key, run_key.encode())
            return None
        except AlreadyExists:
            pass
        try:
            holder = self.store.get(key).body.decode()
        except NotFound:  # only an operator deletes markers: treat as never sent
            return self.claim_sent(channel, alert_id, run_key)
        return None if holder == run_key else holder

    def _mark(self, state: str, record: Record) -> None:
        if state in INDEXED:
            self._write(self.store.put, self.index_key(INDEXED[state], record.channel, record.alert_id), b"")

    def _unmark(self, state: str, record: Record) -> None:
        if state in INDEXED:
            self.unmark(INDEXED[state], record.channel, record.alert_id)

    def _write(self, fn, *args) -> str:
        with self._count:
            self.writes += 1
        return fn(*args)
