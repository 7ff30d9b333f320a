"""The delivery ledger: the repository of runs, per-alert records and partition owners (BRIEF §2).

Layout under ``<prefix>`` (default ``deliveries``) in one :class:`aldebaran.storage.Store`:

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
in between leaves an extra marker (the sweep re-checks the record), never a missing one.

The aggregates own their transitions (Run.adopt/record, Record.delivered/failed/...); the ledger
loads and stores them with the right condition and translates a lost compare-and-swap into
:class:`~aldebaran.exceptions.Fenced` (a run) or ``None`` (a record someone else moved on).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Iterator

from aldebaran.delivery.records import CLAIMED, DEAD, IN_DOUBT, RETRY, Record, RetryPolicy
from aldebaran.delivery.runs import DEAD as RUN_DEAD
from aldebaran.delivery.runs import DELIVERED as RUN_DELIVERED
from aldebaran.delivery.runs import IN_DOUBT as RUN_IN_DOUBT
from aldebaran.delivery.runs import PENDING, RETRYING, Run
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.exceptions import AlreadyExists, Fenced, LedgerCorrupt, NotFound, PreconditionFailed
from aldebaran.storage import Store, safe_segment

INDEXED = {RETRY: "retry", DEAD: "dead", IN_DOUBT: "in_doubt"}


class Ledger:
    def __init__(self, store: Store, prefix: str = "deliveries", lease_seconds: float = 60.0,
                 policy: RetryPolicy | None = None, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.lease_seconds = lease_seconds
        self.policy = policy or RetryPolicy()
        self.clock = clock
        self.writes = 0  # object write requests made through this ledger (benchmarks: writes per delivery)
        self._count = threading.Lock()

    @classmethod
    def from_settings(cls, settings: DeliverySettings, store: Store | None = None) -> "Ledger":
        from aldebaran.storage import open_store

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

    # --- partition owners -----------------------------------------------------------------------
    def take_partition(self, channel: str, topic: str, partition: int, owner: str) -> int:
        """Become the owner of (channel, topic, partition): returns the new epoch (previous + 1)."""
        key = self.owner_key(channel, topic, partition)
        while True:
            try:
                obj = self.store.get(key)
            except NotFound:
                body = {"epoch": 1, "owner": owner, "since": self.clock()}
                try:
                    self._write(self.store.create, key, json.dumps(body).encode())
                    return 1
                except AlreadyExists:
                    continue
            try:
                epoch = int(json.loads(obj.body)["epoch"]) + 1
            except (ValueError, KeyError, TypeError) as exc:
                raise LedgerCorrupt(f"partition owner {key} cannot be read: {exc}") from None
            body = {"epoch": epoch, "owner": owner, "since": self.clock()}
            try:
                self._write(self.store.replace, key, json.dumps(body).encode(), obj.etag)
                return epoch
            except PreconditionFailed:
                continue  # someone else took it meanwhile: read again and go one higher

    def owner_epoch(self, channel: str, topic: str, partition: int) -> int:
        try:
            return int(json.loads(self.store.get(self.owner_key(channel, topic, partition)).body)["epoch"])
        except NotFound:
            return 0

    # --- runs -----------------------------------------------------------------------------------
    def claim_run(self, run: Run) -> str | None:
        """Create the run (If-None-Match: *). Its ETag, or None if a run already starts there."""
        try:
            return self._write(self.store.create, self.run_key(run.channel, run.topic, run.partition, run.start),
                               run.to_bytes())
        except AlreadyExists:
            return None

    def get_run(self, channel: str, topic: str, partition: int, start: int) -> tuple[Run, str] | None:
        key = self.run_key(channel, topic, partition, start)
        try:
            obj = self.store.get(key)
        except NotFound:
            return None
        return Run.from_bytes(obj.body, key), obj.etag

    def save_run(self, run: Run, etag: str) -> str:
        """Store the run's new state (after adopt/record) if nobody changed it since `etag`; else Fenced."""
        key = self.run_key(run.channel, run.topic, run.partition, run.start)
        try:
            return self._write(self.store.replace, key, run.to_bytes(), etag)
        except PreconditionFailed:
            raise Fenced(f"{key} changed under {run.owner} (epoch {run.epoch}): another owner took this run") from None

    def runs(self, channel: str, topic: str, partition: int, from_offset: int = 0) -> Iterator[Run]:
        """The partition's runs whose start is ≥ from_offset, in offset order (StartAfter: no full listing)."""
        prefix = self.run_prefix(channel, topic, partition)
        after = f"{prefix}{from_offset - 1:020d}.json" if from_offset > 0 else None
        for obj in self.store.list(prefix, start_after=after):
            try:
                body = self.store.get(obj["Key"]).body
            except NotFound:
                continue
            yield Run.from_bytes(body, obj["Key"])

    def run_covering(self, channel: str, topic: str, partition: int, offset: int, max_run: int) -> Run | None:
        """The run whose range holds `offset` (runs are at most max_run offsets long... unless malformed
        alerts or gaps stretched one; then a longer look back is needed: see `runs`)."""
        for run in self.runs(channel, topic, partition, max(0, offset - max_run)):
            if run.start > offset:
                return None
            if run.start <= offset <= run.end:
                return run
        return None

    # --- per-alert records ----------------------------------------------------------------------
    def get(self, channel: str, alert_id: str) -> tuple[Record, str] | None:
        key = self.key(channel, alert_id)
        try:
            obj = self.store.get(key)
        except NotFound:
            return None
        return Record.from_bytes(obj.body, key), obj.etag

    def create(self, record: Record) -> str | None:
        """Store a new record (If-None-Match: *): its ETag, or None if the alert already has one."""
        self._mark(record.state, record)
        try:
            return self._write(self.store.create, self.key(record.channel, record.alert_id), record.to_bytes())
        except AlreadyExists:
            return None

    def save(self, record: Record, etag: str, previous_state: str) -> str | None:
        """Store a record's transition if nobody moved it since `etag`; None if someone did."""
        self._mark(record.state, record)
        try:
            new = self._write(self.store.replace, self.key(record.channel, record.alert_id), record.to_bytes(), etag)
        except PreconditionFailed:
            return None
        if previous_state != record.state:
            # A retried delivery keeps its retry marker while CLAIMED, so it stays findable if this
            # worker dies mid-send; the marker goes once the record leaves for any other state.
            if previous_state != CLAIMED:
                if record.state != CLAIMED:
                    self._unmark(previous_state, record)
            elif record.state != RETRY:
                self._unmark(RETRY, record)
        return new

    def claim(self, channel: str, alert: dict, owner: str) -> tuple[Record, str] | None:
        """Claim one alert's delivery with its own record (channels that cannot deduplicate, pages)."""
        record = Record.claimed(channel, alert, owner, self.clock(), self.lease_seconds)
        etag = self.create(record)
        return (record, etag) if etag else None

    def resolve(self, channel: str, alert_id: str, outcome: str, reason: str, who: str) -> Record:
        got = self.get(channel, alert_id)
        if got is None:
            raise NotFound(f"no delivery record for {channel}/{alert_id}")
        record, etag = got
        previous = record.resolved(self.clock(), outcome, reason, who)
        if self.save(record, etag, previous) is None:
            raise PreconditionFailed(f"{channel}/{alert_id} changed while it was being resolved; try again")
        return record

    def indexed(self, kind: str, channel: str) -> list[str]:
        """Alert ids listed in one index (retry, dead, in_doubt) of a channel."""
        prefix = f"{self.prefix}-index/{kind}/{safe_segment(channel, 'channel')}/"
        return [o["Key"][len(prefix):] for o in self.store.list(prefix)]

    def _mark(self, state: str, record: Record) -> None:
        if state in INDEXED:
            self._write(self.store.put, self.index_key(INDEXED[state], record.channel, record.alert_id), b"")

    def _unmark(self, state: str, record: Record) -> None:
        if state in INDEXED:
            self.store.delete(self.index_key(INDEXED[state], record.channel, record.alert_id))

    def unmark(self, kind: str, channel: str, alert_id: str) -> None:
        self.store.delete(self.index_key(kind, channel, alert_id))

    # --- outcomes: the dispatcher reports, the aggregates transition, the ledger stores ------------
    def record_run(self, run: Run, etag: str, outcomes: dict, alerts: dict, can_dedupe: bool = True) -> str:
        """Record every outcome of a run in one write. `outcomes`: offset → Outcome for the pending
        entries; `alerts`: offset → the Alert (or its dict). A failed alert gets its own record first
        (RETRY, or DEAD when permanent; IN_DOUBT when the outcome is unknown on a channel that cannot
        deduplicate), so a crash between the two writes loses nothing. Fenced if a newer owner adopted
        the run meanwhile. Idempotent: entries settled by an earlier attempt of this write are kept."""
        now = self.clock()
        key = self.run_key(run.channel, run.topic, run.partition, run.start)
        results = {}
        for entry in run.pending():
            outcome = outcomes[entry[0]]
            if outcome.status == "delivered":
                results[entry[0]] = (RUN_DELIVERED, outcome.receipt)
                continue
            error = outcome.error or outcome.status
            failed = alerts[entry[0]]
            failed = failed if isinstance(failed, dict) else failed.to_dict()
            if outcome.status == "unknown" and not can_dedupe:
                record = Record.doubted_in_run(run.channel, failed, run.owner, now, key, f"outcome unknown: {error}")
            else:
                if outcome.status == "unknown":  # the channel deduplicates: a resend is safe
                    error = f"outcome unknown, will resend with the same key: {error}"
                record = Record.failed_in_run(run.channel, failed, run.owner, now, key, error,
                                              outcome.status == "permanent", self.policy)
            self.create(record)  # None: the alert already has a record (an earlier run); that one carries on
            status = {DEAD: RUN_DEAD, IN_DOUBT: RUN_IN_DOUBT}.get(record.state, RETRYING)
            results[entry[0]] = (status, {"error": error[:200]})
        run.settle(results)
        run.record(now)
        return self.save_run(run, etag)

    # --- sent markers: repeats on a channel that can neither deduplicate nor remember ----------
    def mark_sent(self, channel: str, alert_id: str, run_key: str) -> bool:
        """Before an alert's first send on such a channel: create its marker naming the run (If-None-Match).
        True if the alert is this run's to send (created now, or by this run before an adoption);
        False if another run holds it: a repeat, never sent twice, however old."""
        return self.claim_sent(channel, alert_id, run_key) is None

    def claim_sent(self, channel: str, alert_id: str, run_key: str) -> str | None:
        """:meth:`mark_sent` telling who holds the marker: None if this run does, else the holder's run key
        (it names the topic, so the lane, that delivered the alert: the fast lane's copy and the exact
        lane's meet here, aldebaran.delivery.fast)."""
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

    def sent_by(self, channel: str, alert_id: str) -> str | None:
        """The run key an alert's sent marker names, or None (no marker: never marked on this channel)."""
        try:
            return self.store.get(self.sent_key(channel, alert_id)).body.decode()
        except NotFound:
            return None

    def run_at(self, key: str) -> Run | None:
        """The run stored under `key` (a sent marker's body), or None."""
        try:
            return Run.from_bytes(self.store.get(key).body, key)
        except NotFound:
            return None

    def settle(self, record: Record, etag: str, outcome, can_dedupe: bool) -> Record | None:
        """Apply one send's outcome to a per-alert record and store it; None if someone moved it."""
        previous, now = record.state, self.clock()
        error = outcome.error or outcome.status
        if outcome.status == "delivered":
            record.delivered(now, outcome.receipt)
        elif outcome.status == "unknown" and not can_dedupe:
            record.doubted(now, f"outcome unknown: {error}")
        elif outcome.status == "unknown":
            record.failed(now, f"outcome unknown, will resend with the same key: {error}", False, self.policy)
        else:
            record.failed(now, error, outcome.status == "permanent", self.policy)
        return record if self.save(record, etag, previous) else None

    def take_over(self, record: Record, etag: str, owner: str, can_dedupe: bool) -> tuple[Record, str] | None:
        """Claim a due record for another attempt (or mark it IN_DOUBT): (record, etag) to send, or None."""
        previous = record.state
        send = record.take_over(self.clock(), owner, self.lease_seconds, can_dedupe)
        new = self.save(record, etag, previous)
        return (record, new) if send and new else None

    def settle_by_lookup(self, record: Record, etag: str, found: dict | None) -> Record | None:
        previous = record.state
        record.settled_by_lookup(self.clock(), found)
        return record if self.save(record, etag, previous) else None

    # --- channels and figures -------------------------------------------------------------------
    def channels(self) -> list[str]:
        """Channels with anything in the ledger (one delimiter listing per channel would be cheaper on
        S3; the store contract has no delimiter, so this lists the owners and records it finds)."""
        seen: list[str] = []
        for obj in self.store.list(self.prefix + "/"):
            name = obj["Key"][len(self.prefix) + 1:].split("/", 1)[0]
            if name not in seen:
                seen.append(name)
        return seen

    def states(self, channel: str) -> dict[str, str]:
        """alert id → its delivery state on this channel (DELIVERED from a run's entry; a per-alert
        record's state wins). Lists the channel's whole ledger: for checks and campaigns that verify a
        finished run, never on the delivery path."""
        base = f"{self._channel(channel)}/"
        out: dict[str, str] = {}
        records: dict[str, str] = {}
        for obj in self.store.list(base):
            key = obj["Key"]
            if "/runs/" in key:
                run = Run.from_bytes(self.store.get(key).body, key)
                for e in run.entries:
                    if e[2] == RUN_DELIVERED:
                        out.setdefault(e[1], "DELIVERED")
                    elif e[2] == PENDING:
                        out.setdefault(e[1], "CLAIMED")
            elif "/alerts/" in key and key.endswith(".json"):
                got = self.get(channel, key.rsplit("/", 1)[1][: -len(".json")])
                if got is not None:
                    records[got[0].alert_id] = got[0].state
        out.update(records)
        return out

    def known_alert_ids(self, channel: str) -> set[str]:
        """Every alert id this channel has a run entry or a record for. Lists the channel's whole ledger:
        for batch reports (a replay's "which alerts are new"), never on the delivery path."""
        base = f"{self._channel(channel)}/"
        ids: set[str] = set()
        for obj in self.store.list(base):
            key = obj["Key"]
            if "/runs/" in key:
                ids.update(Run.from_bytes(self.store.get(key).body, key).alert_ids())
            elif "/alerts/" in key and key.endswith(".json"):
                ids.add(key.rsplit("/", 1)[1][: -len(".json")])
        return ids

    def stats(self, channel: str) -> dict:
        """Per-channel figures from the small index (delivered counts come from the consumer group's
        committed offsets: see aldebaran.delivery.tools)."""
        return {
            "channel": channel,
            "retrying": len(self.indexed("retry", channel)),
            "dead": len(self.indexed("dead", channel)),
            "in_doubt": len(self.indexed("in_doubt", channel)),
            "lease_seconds": self.lease_seconds,
            "max_attempts": self.max_attempts,
        }

    def _write(self, fn, *args) -> str:
        with self._count:
            self.writes += 1
        return fn(*args)
