"""The dispatcher: alerts from Kafka → the delivery ledger → a channel, exactly once per channel.

Each channel is its own work queue: its own consumer group on the alerts topic
(``<group>-<channel>``), so a slow SMS provider never holds back the webhook. Kafka's group
assignment gives each partition one dispatcher at a time; on assignment the dispatcher takes the
partition's owner **epoch** in the ledger (the fence a stale owner cannot write past).

Per partition, in this order (durable first, commit last):

- a channel that deduplicates (webhook, email, Kafka bus): the polled alerts are cut into **runs**
  (≤ the channel's max_run). A run is claimed with one conditional create whose key comes from its
  first offset; its alerts are sent together (``send_many``); every outcome is recorded in one write;
  then the offsets are committed. A run found already RECORDED (a replay after a crash) is skipped;
  one found CLAIMED by an older epoch is adopted and sent again with the same idempotency keys.
  Alert ids seen in recent runs (``dedupe_window_offsets``) are repeats and are not sent again.
- a channel that cannot deduplicate (SMS): one record per alert, created as the claim. A crash puts
  at most the alerts in flight into doubt; a repeated alert id is recognised forever by its key.

Failed sends keep their own record (RETRY → … → DEAD; IN_DOUBT where resending is unsafe). A
periodic sweep retries what is due and asks providers with a lookup about IN_DOUBT deliveries.
A streaming dispatcher (``aldebaran dispatch --follow``) writes a heartbeat that Airflow's
``dispatch_supervisor`` DAG watches; ``alert_dispatch`` runs the same code once for catch-up.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import DELIVERED, IN_DOUBT, RETRY, SETTLED
from aldebaran.delivery.runs import MALFORMED, PENDING, RECORDED, REPEAT, Run
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.exceptions import AlreadyExists, Fenced, LedgerCorrupt, ObjectStoreError
from aldebaran.model import Alert, AlertError
from aldebaran.settings import KafkaSettings, load
from aldebaran.storage import safe_segment

log = logging.getLogger(__name__)

GROUP = "aldebaran-dispatcher"  # the default of ALDEBARAN_DELIVERY_GROUP


@dataclass
class DispatchStats:
    alerts: int = 0
    malformed: int = 0
    runs: int = 0
    sent: dict = field(default_factory=dict)
    already: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    in_doubt: dict = field(default_factory=dict)
    retried: dict = field(default_factory=dict)
    latencies_ms: collections.deque = field(default_factory=lambda: collections.deque(maxlen=200_000))
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def bump(self, what: str, channel: str, n: int = 1) -> None:
        if n:
            with self.lock:
                d = getattr(self, what)
                d[channel] = d.get(channel, 0) + n

    def summary(self) -> dict:
        return {"alerts": self.alerts, "malformed": self.malformed, "runs": self.runs, "sent": self.sent,
                "already_recorded": self.already, "failed": self.failed, "in_doubt": self.in_doubt,
                "retried": self.retried, "seconds": round(self.seconds, 2)}


class DeadLetters:
    """Malformed alerts, kept once each in the object store under their topic position."""

    def __init__(self, store, prefix: str = "dead-letters/alerts") -> None:
        self.store = store
        self.prefix = prefix

    def add(self, topic: str, partition: int, offset: int, raw: bytes | None, reason: str) -> None:
        key = f"{self.prefix}/{safe_segment(topic, 'topic')}/{partition:05d}-{offset:020d}.json"
        body = json.dumps({"topic": topic, "partition": partition, "offset": offset, "reason": reason,
                           "value_base64": base64.b64encode(raw or b"").decode(), "at": time.time()}).encode()
        try:
            self.store.create(key, body)
        except AlreadyExists:
            pass  # another channel's dispatcher (or an earlier run) recorded it already


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


class ChannelDispatcher:
    """One channel's queue over the alerts topic."""

    def __init__(self, channel, ledger: Ledger, settings: DeliverySettings, kafka: KafkaSettings,
                 group: str, owner: str, stats: DispatchStats, dead_letters: DeadLetters) -> None:
        self.channel = channel
        self.ledger = ledger
        self.settings = settings
        self.kafka = kafka
        self.topic = kafka.alerts_topic
        self.group = f"{group}-{channel.name}"
        self.owner = owner
        self.stats = stats
        self.dead_letters = dead_letters
        self.max_run = min(settings.run_max, getattr(channel, "max_run", settings.run_max))
        self.partitions: dict[int, Partition] = {}

    # --- the loop ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event, idle_timeout: float | None, max_alerts: int | None = None,
            heartbeat=None) -> None:
        """Deliver until `stop`, or (idle_timeout not None) until nothing arrived for that long."""
        from confluent_kafka import TopicPartition

        from aldebaran.kafka_io import consumer

        c = consumer(self.kafka, self.group, **{
            "enable.partition.eof": False, "session.timeout.ms": self.settings.session_timeout_ms,
            "heartbeat.interval.ms": max(500, self.settings.session_timeout_ms // 5),
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024})
        last_data = time.monotonic()
        settled_upto: dict[int, int] = {}  # partition → the next offset to commit (all below it settled)

        def on_assign(_c, tps) -> None:
            nonlocal last_data
            last_data = time.monotonic()  # the idle clock starts once there is something to read
            for tp in tps:
                epoch = self._retrying(self.ledger.take_partition, self.channel.name, self.topic, tp.partition, self.owner)
                self.partitions[tp.partition] = Partition(tp.partition, epoch)
                log.info("%s: partition %d assigned (epoch %d)", self.channel.name, tp.partition, epoch)

        def on_revoke(_c, tps) -> None:
            for tp in tps:
                self.partitions.pop(tp.partition, None)
                settled_upto.pop(tp.partition, None)

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        seen = 0
        last_sweep = 0.0
        pool = ThreadPoolExecutor(8, thread_name_prefix=f"partitions-{self.channel.name}")
        try:
            while not stop.is_set() and (max_alerts is None or seen < max_alerts):
                now = time.monotonic()
                if now - last_sweep >= self.settings.sweep_seconds:
                    self._retrying(self.sweep)
                    last_sweep = time.monotonic()
                if heartbeat is not None:
                    heartbeat.progress(self, c, settled_upto)  # a report; its own thread writes the beat
                msgs = c.consume(num_messages=self.settings.poll_max, timeout=0.2)
                if not msgs and not any(p.buffer for p in self.partitions.values()):
                    if idle_timeout is not None and time.monotonic() - last_data > idle_timeout and c.assignment():
                        break
                    continue
                if msgs:
                    last_data = time.monotonic()
                for msg in msgs:
                    if msg.error():
                        log.warning("%s: consumer error %s (retrying)", self.channel.name, msg.error())
                        continue
                    part = self.partitions.get(msg.partition())
                    if part is None or part.broken:
                        continue
                    part.buffer.append(self._decode(msg))
                    seen += 1
                with self.stats.lock:
                    self.stats.alerts = max(self.stats.alerts, seen)
                # Partitions are independent (each has its own runs and owner epoch): settle them side by side.
                busy = [p for p in self.partitions.values() if p.buffer and not p.broken]
                if len(busy) > 1:
                    results = list(pool.map(lambda p: (p, self._settle_partition(p, stop)), busy))
                else:
                    results = [(p, self._settle_partition(p, stop)) for p in busy]
                commits = [TopicPartition(self.topic, p.number, nxt) for p, nxt in results if nxt is not None]
                if commits:
                    # Every alert below these offsets is settled on this channel and recorded: now they may move.
                    # Asynchronous: a lost commit only means a replay, which finds the runs RECORDED.
                    c.commit(offsets=commits, asynchronous=True)
                    for tp in commits:
                        settled_upto[tp.partition] = tp.offset
            self._retrying(self.sweep)
        finally:
            pool.shutdown(wait=True)
            # Only what was settled: never the consumer's position, which runs ahead of what is settled
            # (a poll's buffer cut short by a stop, a partition stopped broken, a run waiting for its range).
            final = [TopicPartition(self.topic, p, off) for p, off in settled_upto.items() if p in self.partitions]
            if final:
                try:
                    c.commit(offsets=final, asynchronous=False)
                except Exception as exc:  # noqa: BLE001 - the asynchronous commits before may have landed it
                    log.debug("%s: final commit: %s", self.channel.name, exc)
            c.close()

    def _decode(self, msg) -> tuple:
        try:
            return (msg.offset(), msg.value(), Alert.from_json(msg.value()), None)
        except AlertError as exc:
            return (msg.offset(), msg.value(), None, str(exc))

    def _settle_partition(self, part: Partition, stop: threading.Event) -> int | None:
        """Settle what is buffered for one partition; the next offset to commit, or None."""
        try:
            if not part.loaded:
                self._load_recent(part)
            if self.channel.can_dedupe:
                return self._settle_runs(part, stop)
            return self._settle_singly(part, stop)
        except (Fenced, LedgerCorrupt) as exc:
            part.broken = str(exc)
            part.buffer.clear()
            log.error("%s: partition %d stopped: %s", self.channel.name, part.number, exc)
            return None
        except ObjectStoreError as exc:
            log.warning("%s: object store unavailable (%s); partition %d retries", self.channel.name, exc, part.number)
            stop.wait(1.0)
            return None

    # --- channels that deduplicate: runs ----------------------------------------------------------
    def _load_recent(self, part: Partition) -> None:
        """Alert ids of the recent runs (the dedupe window), and a run that covers the first offset."""
        first = part.buffer[0][0]
        window = self.settings.dedupe_window_offsets
        if self.channel.can_dedupe and window:
            for run in self.ledger.runs(self.channel.name, self.topic, part.number, max(0, first - window)):
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

    def _settle_runs(self, part: Partition, stop: threading.Event) -> int | None:
        name, committed = self.channel.name, None
        while part.buffer:
            buf = [b for b in part.buffer if b[0] > part.skip_until]
            if len(buf) != len(part.buffer):
                part.buffer = buf
                committed = part.skip_until + 1
                continue
            chunk = part.buffer[: self.max_run]
            found = self.ledger.get_run(name, self.topic, part.number, chunk[0][0])
            if found is not None:
                run, etag = found
                if run.state == RECORDED:
                    self._remember(part, run.alert_ids())
                    self.stats.bump("already", name, len(run.alert_ids()))
                    part.skip_until = run.end
                    continue
                if run.end > part.buffer[-1][0]:
                    return committed  # adopt once the whole range is here (next poll)
                run.adopt(self.ledger.clock(), self.owner, part.epoch)
                etag = self.ledger.save_run(run, etag)
                by_offset = {b[0]: b for b in part.buffer if b[0] <= run.end}
                self.stats.bump("retried", name, sum(1 for e in run.entries if e[2] == PENDING))
            else:
                run, by_offset = self._new_run(part, chunk)
                etag = self.ledger.claim_run(run)
                if etag is None:
                    continue  # someone created it meanwhile: read it on the next turn
            self._send_run(part, run, etag, by_offset, stop)
            part.skip_until = run.end
            committed = run.end + 1
        return committed

    def _new_run(self, part: Partition, chunk: list) -> tuple[Run, dict]:
        entries, in_run = [], set()
        for offset, raw, alert, error in chunk:
            if alert is None:
                entries.append([offset, None, MALFORMED, {"reason": error}])
            elif alert.alert_id in part.seen or alert.alert_id in in_run:
                entries.append([offset, alert.alert_id, REPEAT, None])
            else:
                in_run.add(alert.alert_id)
                entries.append([offset, alert.alert_id, PENDING, None])
        run = Run.claim(self.channel.name, self.topic, part.number, entries, part.epoch, self.owner, self.ledger.clock())
        return run, {b[0]: b for b in chunk}

    def _send_run(self, part: Partition, run: Run, etag: str, by_offset: dict, stop: threading.Event) -> None:
        name = self.channel.name
        pending = [e for e in run.entries if e[2] == PENDING]
        for e in run.entries:
            if e[2] == MALFORMED:
                offset, raw = e[0], by_offset[e[0]][1]
                self.dead_letters.add(self.topic, part.number, offset, raw, (e[3] or {}).get("reason", "malformed"))
        alerts = [by_offset[e[0]][2] for e in pending]
        outcomes = self.channel.send_many(alerts) if alerts else []
        by = {e[0]: o for e, o in zip(pending, outcomes)}
        self._record(run, etag, by, {e[0]: by_offset[e[0]][2] for e in pending}, part, stop)
        self._remember(part, run.alert_ids())
        delivered = sum(1 for o in outcomes if o.status == "delivered")
        with self.stats.lock:
            self.stats.runs += 1
            self.stats.malformed += sum(1 for e in run.entries if e[2] == MALFORMED)
            now_ms = time.time() * 1000
            for alert, o in zip(alerts, outcomes):
                if o.status == "delivered" and isinstance(alert.detected_at, (int, float)):
                    self.stats.latencies_ms.append(now_ms - alert.detected_at)
        self.stats.bump("sent", name, delivered)
        self.stats.bump("failed", name, len(outcomes) - delivered)
        self.stats.bump("already", name, sum(1 for e in run.entries if e[2] == REPEAT))

    def _record(self, run: Run, etag: str, outcomes: dict, alerts: dict, part: Partition, stop: threading.Event) -> None:
        """Record the run's outcomes. The sends happened: while the object store is unreachable, keep the
        outcomes in memory and retry only this write (no resend), until it lands or the dispatcher stops."""
        backoff, failed_once = 0.5, False
        while True:
            try:
                self.ledger.record_run(run, etag, outcomes, alerts)
                return
            except Fenced:
                if failed_once:  # the earlier attempt may have landed with its answer lost: is it ours?
                    found = self.ledger.get_run(run.channel, run.topic, run.partition, run.start)
                    if found and found[0].state == RECORDED and (found[0].owner, found[0].epoch) == (self.owner, part.epoch):
                        return
                raise
            except ObjectStoreError as exc:
                if stop.is_set():
                    raise
                failed_once = True
                log.warning("%s: recording run %d@%d failed (%s); the sends stand, retrying the record in %.1fs",
                            self.channel.name, run.partition, run.start, exc, backoff)
                stop.wait(backoff)
                backoff = min(10.0, backoff * 2)

    # --- channels that cannot deduplicate: one record per alert -----------------------------------
    def _settle_singly(self, part: Partition, stop: threading.Event) -> int | None:
        """Per-alert claims, made a window at a time (the channel's concurrency) right before that window
        is sent: a crash leaves at most one window's alerts in doubt, never the whole poll."""
        name = self.channel.name
        window = max(1, int(getattr(self.channel, "concurrency", 1)))
        claims, waiting, in_poll = [], False, set()

        def send_window() -> None:
            if claims:
                outcomes = self.channel.send_many([a for a, _, _ in claims])
                for (alert, record, etag), outcome in zip(claims, outcomes):
                    self._report(record, etag, outcome)
                claims.clear()

        for offset, raw, alert, error in part.buffer:
            if stop.is_set():
                send_window()
                return None  # the buffer stays; what settled is found settled next time
            if alert is None:
                self.dead_letters.add(self.topic, part.number, offset, raw, error)
                with self.stats.lock:
                    self.stats.malformed += 1
                continue
            if alert.alert_id in in_poll:
                self.stats.bump("already", name)  # a repeat within this poll: its first copy settles it
                continue
            in_poll.add(alert.alert_id)
            got = self.ledger.claim(name, alert.to_dict(), self.owner)
            if got is None:
                found = self.ledger.get(name, alert.alert_id)
                if found is None:
                    waiting = True
                    continue
                record, etag = found
                if record.state in SETTLED:
                    self.stats.bump("already", name)
                    continue
                if not record.due(self.ledger.clock()):
                    waiting = True  # another worker holds it under a live lease
                    continue
                got = self.ledger.take_over(record, etag, self.owner, self.channel.can_dedupe)
                if got is None:
                    self.stats.bump("in_doubt", name)
                    continue
            claims.append((alert, *got))
            if len(claims) >= window:
                send_window()
        send_window()
        if waiting:
            stop.wait(min(5.0, self.ledger.lease_seconds / 4))
            return None  # the buffer stays; settled ones are found settled next time
        last = part.buffer[-1][0]
        part.buffer.clear()
        return last + 1

    def _report(self, record, etag, outcome) -> None:
        name = self.channel.name
        settled = self.ledger.settle(record, etag, outcome, self.channel.can_dedupe)
        if settled is None:
            log.warning("%s/%s: record changed under us after the send (rescued by another worker)", name, record.alert_id)
            return
        what = {DELIVERED: "sent", IN_DOUBT: "in_doubt"}.get(settled.state, "failed")
        self.stats.bump(what, name)
        detected = record.alert.get("detected_at")
        if settled.state == DELIVERED and isinstance(detected, (int, float)):
            with self.stats.lock:
                self.stats.latencies_ms.append(time.time() * 1000 - detected)

    # --- the sweep --------------------------------------------------------------------------------
    def sweep(self) -> int:
        """Retry what is due in the retry index; ask providers about IN_DOUBT deliveries (with a lookup)."""
        name, now, done = self.channel.name, self.ledger.clock(), 0
        claims = []
        for alert_id in self.ledger.indexed("retry", name):
            got = self.ledger.get(name, alert_id)
            if got is None:
                self.ledger.unmark("retry", name, alert_id)
                continue
            record, etag = got
            if record.state not in (RETRY, "CLAIMED"):
                self.ledger.unmark("retry", name, alert_id)
            elif record.due(now):
                taken = self.ledger.take_over(record, etag, self.owner, self.channel.can_dedupe)
                if taken is not None:
                    claims.append(taken)
        if claims:
            self.stats.bump("retried", name, len(claims))
            outcomes = self.channel.send_many([Alert.from_dict(r.alert) for r, _ in claims])
            for (record, etag), outcome in zip(claims, outcomes):
                self._report(record, etag, outcome)
                done += 1
        if getattr(self.channel, "has_lookup", False):
            done += self._settle_doubts(now)
        return done

    def _settle_doubts(self, now: float) -> int:
        name, done = self.channel.name, 0
        for alert_id in self.ledger.indexed("in_doubt", name):
            got = self.ledger.get(name, alert_id)
            if got is None or got[0].state != IN_DOUBT:
                self.ledger.unmark("in_doubt", name, alert_id)
                continue
            record, etag = got
            if (record.doubted_at or record.updated_at) + self.settings.lookup_grace_seconds > now:
                continue
            found = self.channel.lookup(alert_id)  # RetryableError: ask again at the next sweep
            if self.ledger.settle_by_lookup(record, etag, found) is not None:
                done += 1
                log.info("%s/%s: IN_DOUBT settled by the provider's lookup: %s", name, alert_id,
                         "delivered" if found else "no such message, sending")
        return done

    def _retrying(self, fn, *args):
        """Object-store calls outside a partition's settle loop: back off while the store is down."""
        from aldebaran.delivery.channels import RetryableError

        backoff = 1.0
        for _ in range(8):
            try:
                return fn(*args)
            except (ObjectStoreError, RetryableError) as exc:
                log.warning("%s: %s; backing off %.0fs", self.channel.name, exc, backoff)
                time.sleep(backoff)
                backoff = min(30.0, backoff * 2)
        return fn(*args)


class Dispatcher:
    """Every configured channel's ChannelDispatcher, one thread each."""

    def __init__(self, ledger: Ledger, channels: list, kafka: KafkaSettings | None = None, group: str | None = None,
                 owner: str | None = None, settings: DeliverySettings | None = None) -> None:
        self.ledger = ledger
        self.channels = channels
        self.kafka = kafka or load(KafkaSettings)
        self.settings = settings or load(DeliverySettings)
        self.group = group or self.settings.group
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.dead_letters = DeadLetters(ledger.store)

    def run(self, stop: threading.Event | None = None, idle_timeout: float | None = None,
            max_alerts: int | None = None, heartbeat=None, stats: DispatchStats | None = None) -> DispatchStats:
        """Deliver every channel's alerts: until `stop` (streaming), or until idle for idle_timeout."""
        stats = stats if stats is not None else DispatchStats()
        stop = stop or threading.Event()
        t0 = time.monotonic()
        workers = [ChannelDispatcher(ch, self.ledger, self.settings, self.kafka, self.group, self.owner, stats,
                                     self.dead_letters) for ch in self.channels]
        errors: list[BaseException] = []

        def run(w: ChannelDispatcher) -> None:
            try:
                w.run(stop, idle_timeout, max_alerts, heartbeat)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller below
                errors.append(exc)
                stop.set()

        threads = [threading.Thread(target=run, args=(w,), name=f"dispatch-{w.channel.name}") for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for ch in self.channels:
            ch.close()
        stats.seconds = time.monotonic() - t0
        if errors:
            raise errors[0]
        return stats

    def run_once(self, max_alerts: int | None = None, idle_timeout: float | None = None,
                 stop: threading.Event | None = None) -> DispatchStats:
        """Drain what is waiting on the alerts topic for every channel, then return."""
        idle = self.settings.idle_seconds if idle_timeout is None else idle_timeout
        return self.run(stop, idle, max_alerts)


def deliver_direct(ledger: Ledger, channel, alert: dict, owner: str, stats: DispatchStats) -> str:
    """Deliver one alert that does not come from the alerts topic (the supervisor's page) through its own
    record, exactly once per channel: "sent", "already", "failed", "in_doubt" or "busy" (another
    worker holds it under a live lease)."""
    name = channel.name
    got = ledger.claim(name, alert, owner)
    if got is None:
        found = ledger.get(name, alert["alert_id"])
        if found is None or found[0].state in SETTLED:
            stats.bump("already", name)
            return "already"
        if not found[0].due(ledger.clock()):
            return "busy"
        got = ledger.take_over(*found, owner, channel.can_dedupe)
        if got is None:
            stats.bump("in_doubt", name)
            return "in_doubt"
    record, etag = got
    outcome = channel.send_many([Alert.from_dict(alert)])[0]
    settled = ledger.settle(record, etag, outcome, channel.can_dedupe)
    state = settled.state if settled else "busy"
    what = {DELIVERED: "sent", IN_DOUBT: "in_doubt"}.get(state, "failed")
    stats.bump(what, name)
    return what


def default_ledger(store=None) -> Ledger:
    return Ledger.from_settings(load(DeliverySettings), store)


def run_once(channels: list[str] | None = None, max_alerts: int | None = None,
             idle_timeout: float | None = None) -> DispatchStats:
    from aldebaran.delivery.channels import configured_channels

    d = Dispatcher(default_ledger(), configured_channels(channels))
    return d.run_once(max_alerts=max_alerts, idle_timeout=idle_timeout)
