"""Settling one partition's alerts on one channel, a ledger run at a time: poll → handle → send → report.

Every channel, whether it deduplicates or not, goes through the same steps (durable first):

    open the run starting at the first unsettled offset (Ledger.open_run, the one claim sequence):
      RECORDED            → skip its range (a replay after a crash, or another worker's)
      CLAIMED, older owner → adopted (If-Match fences the old owner): settle its pending alerts (below)
      none                → a new run over the next ≤ max_run offsets is claimed (If-None-Match: *)
    send the pending alerts (``send_many``), report every outcome (the handle's one write), then the
    caller commits the offsets.

What adoption means is the channel's to say (:mod:`aldebaran.delivery.channels.base`): a channel that
deduplicates is sent the pending alerts again (same idempotency keys); one whose lookup answers at once
(the log file) is asked per alert, found ones are recorded delivered and only the others are sent; any
other channel records them IN_DOUBT, each with its own record (the sweep then asks a lagging provider
lookup after its grace, or an operator settles them). A crash therefore puts at most one run per
partition in doubt, and only on a channel without an immediate lookup.

Repeats of an alert id (the alerts topic is at-least-once; replays re-emit old ids): the ids of the
runs in the last ``ALDEBARAN_DELIVERY_DEDUPE_WINDOW_OFFSETS`` offsets are recognised and recorded
``S`` without a send, on every channel. Beyond that window: a deduplicating channel's recipient drops
the repeat by its key; a channel that remembers what it sent (the log file) refuses it itself; any
other channel (SMS) gets a sent marker per alert in the ledger before the send, so a repeat is
recognised however old it is.

A channel that opted in to the fast lane (``fast``) keeps sent markers in both lanes, whatever it can
do otherwise: the fast lane's copy and the exact lane's (same alert id, other topic, other runs) meet at
the marker, and the second is recorded ``S`` with the holder run's key in its receipt. Where the holder
run is not recorded (with the claim log: not recorded within a lease, as it is sending right now or its dead
dispatcher's successor adopts and sends it; with markers, which two runs may split between them, at once) and
a resend harmless (the channel deduplicates or remembers what it sent), the second copy is sent: an
alert whose fast dispatcher never comes back is still delivered by the exact lane. A run's markers are
created side by side (one round trip before the send, not one per alert). With
``ALDEBARAN_DELIVERY_CROSS_LANE=log`` a fast channel where a resend is harmless claims the run's ids in its
partition's claim log instead (aldebaran.delivery.claimlog: one conditional write per run, same holder rules).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import tenacity

from aldebaran.delivery import handles
from aldebaran.delivery.channels.base import Outcome
from aldebaran.delivery.claimlog import ClaimLog
from aldebaran.delivery.handles import RunHandle
from aldebaran.delivery.runs import MALFORMED, RECORDED, REPEAT, Run
from aldebaran.exceptions import ObjectStoreError

log = logging.getLogger(__name__)

MARKER_THREADS = 32  # sent markers of one run created at once
# Runs read at once when a partition is taken over: the dedupe window is hundreds of small run objects,
# one round trip each (read one by one, ~13 s of a dispatcher's 19.8 s failover in `chaos ha`).
WINDOW_READERS = 16


@dataclass
class Partition:
    """What a dispatcher keeps for one partition it owns."""

    number: int
    epoch: int
    seen: collections.OrderedDict = field(default_factory=collections.OrderedDict)  # recent alert ids
    buffer: list = field(default_factory=list)  # polled, not yet settled: [(offset, raw, alert|None, error)]
    skip_until: int = -1  # offsets ≤ this belong to a run already recorded
    loaded: bool = False
    broken: str | None = None  # why this partition's dispatch stopped (fenced, unreadable ledger object)
    unsent: set = field(default_factory=set)  # starts of runs this owner claimed and has not begun to send
    contested: int = -1  # a start offset whose create failed: read that run before claiming there again


class RunSettler:
    """One channel's runs over the partitions a dispatcher owns (`settle` is called per partition, from
    several threads at once; each partition's state lives in its :class:`Partition`)."""

    def __init__(self, channel, ledger, settings, topic: str, owner: str, stats, dead_letters,
                 claim_first: bool = False) -> None:
        self.channel = channel
        self.ledger = ledger
        self.settings = settings
        self.topic = topic
        self.owner = owner
        self.stats = stats
        self.dead_letters = dead_letters
        self.max_run = min(settings.run_max, getattr(channel, "max_run", settings.run_max))
        self.can_dedupe = bool(getattr(channel, "can_dedupe", False))
        # Where neither the recipient nor the channel can tell a repeat, the ledger must: one marker per alert.
        # A fast channel too: the markers are where the two lanes' copies of an alert meet.
        self.resend_safe = self.can_dedupe or bool(getattr(channel, "remembers_sent", False))
        self.markers = not self.resend_safe or bool(getattr(channel, "fast", False))
        # A fast channel's lanes meet in a claim log per partition (one write per run) where the mode says so;
        # a channel where a resend is not harmless keeps its markers (they never expire).
        self.claim_log = (self.markers and self.resend_safe and getattr(settings, "cross_lane", "markers") == "log")
        self._logs: dict[int, ClaimLog] = {}
        # Create a new run without looking for one first (one round trip less before the send; a run that
        # exists makes the create fail, and it is read then). The fast lane's latency wants it.
        self.claim_first = claim_first
        self._marker_pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._recorded_runs: collections.OrderedDict = collections.OrderedDict()  # holder run keys seen RECORDED
        self.asks_at_once = getattr(channel, "has_lookup", False) and not getattr(channel, "lookup_lags", True)

    # --- poll → handle → send → report, a run at a time --------------------------------------------
    def settle(self, part: Partition, stop: threading.Event) -> int | None:
        """Settle what is buffered for one partition; the next offset to commit, or None."""
        if not part.loaded:
            self._load_recent(part)
        committed = None
        while part.buffer and not stop.is_set():  # a stop lands between runs: what is recorded commits
            buf = [b for b in part.buffer if b[0] > part.skip_until]
            if len(buf) != len(part.buffer):
                part.buffer = buf
                committed = part.skip_until + 1
                continue
            first = part.buffer[0][0]
            handle = self.ledger.open_run(self.channel, self.topic, part.number, part.epoch, self.owner, part.buffer,
                                          self.max_run, seen=part.seen,
                                          look=not self.claim_first or part.contested == first, unsent=part.unsent)
            if handle.status == handles.RECORDED_RUN:
                self._remember(part, handle.run.alert_ids())
                self.stats.bump("already", self.channel.name, len(handle.run.alert_ids()))
                part.skip_until = handle.run.end
                continue
            if handle.status == handles.WAIT:
                return committed  # adopt once the whole range is here (next poll)
            if handle.status == handles.CONTESTED:
                part.contested = first
                continue  # someone created it meanwhile (or before: claim_first): read it on the next turn
            if handle.status == handles.NEW:
                part.unsent.add(first)
            known = self._after_crash(handle) if handle.status == handles.ADOPTED else {}
            self._send_run(part, handle, {b[0]: b for b in part.buffer if b[0] <= handle.run.end}, known, stop)
            part.skip_until = handle.run.end
            committed = handle.run.end + 1
        return committed

    def _after_crash(self, handle: RunHandle) -> dict:
        """Outcomes of an adopted run's pending alerts known without a send: offset → Outcome."""
        run, pending = handle.run, handle.run.pending()
        self.stats.bump("retried", self.channel.name, len(pending))
        if self.can_dedupe:
            return {}  # sent again with the same idempotency keys: the recipient drops what it has
        if self.asks_at_once:
            # RetryableError (the channel cannot tell now) propagates: the run stays ours, asked again next turn.
            found = {}
            for offset, alert_id, _status, _receipt in pending:
                receipt = self.channel.lookup(alert_id)
                if receipt is not None:
                    found[offset] = Outcome.delivered(alert_id, receipt)
            log.info("%s: run %d@%d adopted from %s: %d of %d pending alerts found sent by lookup, the rest is sent",
                     self.channel.name, run.partition, run.start, handle.previous, len(found), len(pending))
            return found
        log.warning("%s: run %d@%d adopted from %s: its %d pending alerts may have been sent; IN_DOUBT",
                    self.channel.name, run.partition, run.start, handle.previous, len(pending))
        why = f"run adopted from {handle.previous}: its owner stopped between send and record, a send may have happened"
        return {e[0]: Outcome.unknown(e[1], why) for e in pending}

    def _send_run(self, part: Partition, handle: RunHandle, by_offset: dict, known: dict,
                  stop: threading.Event) -> None:
        run = handle.run
        # Rejected messages go to alerts.dlq, acknowledged, before the run is recorded and its offsets committed
        # (RetryableError: the run stays ours and unsent, and the next turn dead-letters them again).
        # An adopted run's entry of a message this version reads as an alert has no rejection: nothing to send.
        polled = [by_offset.get(e[0]) for e in run.entries if e[2] == MALFORMED]
        self.dead_letters.send([p[3] for p in polled if p is not None and p[3] is not None],
                               f"dispatcher:{self.channel.name}")
        to_send = [e for e in run.pending() if e[0] not in known]
        if self.markers and to_send:
            repeats = self._mark(handle, to_send, stop)
            run.settle(repeats)
            to_send = [e for e in to_send if e[0] not in repeats]
        alerts = [run.alerts[e[0]] for e in to_send]
        part.unsent.discard(run.start)  # from here on a failure may leave sends behind
        outcomes = self.channel.send_many(alerts) if alerts else []
        self._report(handle, {**known, **{e[0]: o for e, o in zip(to_send, outcomes)}}, stop)
        self._remember(part, run.alert_ids())
        self._count(run, alerts, outcomes, known)

    # --- sent markers -------------------------------------------------------------------------------
    def _mark(self, handle: RunHandle, to_send: list, stop: threading.Event) -> dict:
        """Create the sent markers of a run's alerts, side by side. offset → (REPEAT, receipt) for each alert
        another run holds and this one must not send."""
        if self.claim_log:
            held = self._log(handle.run.partition).claim([e[1] for e in to_send], handle.key)
            holders = [held.get(e[1]) for e in to_send]
        elif len(to_send) == 1:
            holders = [handle.claim_sent(to_send[0][1])]
        else:
            holders = list(self._markers_pool().map(lambda e: handle.claim_sent(e[1]), to_send))
        unrecorded = self._still_unrecorded({h for h in holders if h is not None}, stop) if self.resend_safe else set()
        repeats = {}
        for e, holder in zip(to_send, holders):
            if holder is None:
                continue
            if holder in unrecorded:
                # Its run may never be recorded (a dispatcher gone between marker and send): send it here too,
                # the recipient (or the channel's sent-log) drops the second copy if both go out.
                log.info("%s: %s is held by the unrecorded run %s: sent by this run too (a resend is harmless)",
                         self.channel.name, e[1], holder)
                continue
            repeats[e[0]] = (REPEAT, {"note": "sent by an earlier run (its sent marker)", "sent_by": holder})
        return repeats

    def _log(self, partition: int) -> ClaimLog:
        with self._pool_lock:
            if partition not in self._logs:
                self._logs[partition] = ClaimLog(self.ledger, self.channel.name, partition,
                                                 self.settings.claim_log_window)
            return self._logs[partition]

    def _still_unrecorded(self, holders: set, stop: threading.Event) -> set:
        """The holder runs not recorded within a lease (``ALDEBARAN_DELIVERY_LEASE_SECONDS``; claim log only). A holder is the
        other lane's run sending right now (both lanes' copies in flight at once), or a dead dispatcher's, which
        its successor adopts, sends and records within a lease: waiting for the record lets exactly one lane
        send. One still unrecorded after it is taken for a lane gone for good (this run sends it; a stop ends
        the wait early, and then too)."""
        # Only a claim log orders the runs (a run waits only on runs that claimed before it: no cycle). Markers
        # are created one by one, so two runs may each hold some of the other's alerts: no wait there.
        grace = self.settings.lease_seconds if self.claim_log else 0.0
        deadline, pause = time.monotonic() + grace, 0.02
        pending = {h for h in holders if not self._holder_recorded(h)}
        while pending and time.monotonic() < deadline and not stop.is_set():
            stop.wait(pause)
            pause = min(0.5, pause * 2)
            pending = {h for h in pending if not self._holder_recorded(h)}
        return pending

    def _holder_recorded(self, key: str) -> bool:
        if key in self._recorded_runs:
            return True
        run = self.ledger.run_at(key)
        if run is None or run.state != RECORDED:
            return False
        self._recorded_runs[key] = None  # a recorded run stays recorded: remember a few
        if len(self._recorded_runs) > 4096:
            self._recorded_runs.popitem(last=False)
        return True

    def _markers_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._marker_pool is None:
                self._marker_pool = ThreadPoolExecutor(MARKER_THREADS, thread_name_prefix=f"markers-{self.channel.name}")
            return self._marker_pool

    def close(self) -> None:
        with self._pool_lock:
            pool, self._marker_pool = self._marker_pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _report(self, handle: RunHandle, outcomes: dict, stop: threading.Event) -> None:
        """Report the run's outcomes. The sends happened: while the object store is unreachable, keep the
        outcomes in memory and retry only this write (no resend; 0.5 s doubling to 10 s), until it lands or
        the dispatcher stops (then the store's error is raised)."""
        def log_retry(state: tenacity.RetryCallState) -> None:
            log.warning("%s: recording run %d@%d failed (%s); the sends stand, retrying the record in %.1fs",
                        self.channel.name, handle.run.partition, handle.run.start, state.outcome.exception(),
                        state.upcoming_sleep)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, ObjectStoreError) and not stop.is_set()),
            wait=tenacity.wait_exponential(multiplier=0.5, max=10.0), sleep=stop.wait, before_sleep=log_retry)
        retrying(handle.report, outcomes)

    def _count(self, run: Run, alerts: list, outcomes: list, known: dict) -> None:
        name, stats = self.channel.name, self.stats
        # A key the channel already held (its sent-log) was not sent again: it counts with the repeats.
        fresh = [o.status == "delivered" and "found_by" not in (o.receipt or {}) for o in outcomes]
        tally = collections.Counter()
        for o in [*outcomes, *known.values()]:
            if o.status == "delivered":
                tally["already"] += 1
            elif o.status == "unknown" and not self.can_dedupe:
                tally["in_doubt"] += 1
            else:
                tally["failed"] += 1
        with stats.lock:
            stats.runs += 1
            stats.malformed += sum(1 for e in run.entries if e[2] == MALFORMED)
            now_ms = time.time() * 1000
            for alert, new in zip(alerts, fresh):
                if new and isinstance(alert.detected_at, (int, float)):
                    stats.latencies_ms.append(now_ms - alert.detected_at)
        stats.bump("sent", name, sum(fresh))
        stats.bump("already", name, tally["already"] - sum(fresh) + sum(1 for e in run.entries if e[2] == REPEAT))
        stats.bump("in_doubt", name, tally["in_doubt"])
        stats.bump("failed", name, tally["failed"])

    # --- the dedupe window ------------------------------------------------------------------------
    def _load_recent(self, part: Partition) -> None:
        """Alert ids of the recent runs (the dedupe window), and a run that covers the first offset."""
        first = part.buffer[0][0]
        window = self.settings.dedupe_window_offsets
        if window:
            for run in self.ledger.runs(self.channel.name, self.topic, part.number, max(0, first - window), until=first,
                                        readers=WINDOW_READERS):
                if run.start > first:
                    break
                if run.state == RECORDED:
                    self._remember(part, run.alert_ids())
                if run.start < first <= run.end and run.state == RECORDED:
                    part.skip_until = run.end
        part.loaded = True

    def _remember(self, part: Partition, ids) -> None:
        seen = part.seen
        for alert_id in ids:
            seen[alert_id] = None
        excess = len(seen) - max(self.settings.dedupe_window_offsets, self.max_run)
        for _ in range(max(0, excess)):
            seen.popitem(last=False)
