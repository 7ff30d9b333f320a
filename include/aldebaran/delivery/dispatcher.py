"""The dispatcher: alerts from Kafka → the delivery ledger → a channel, exactly once per channel.

Each channel is its own work queue: its own consumer group on the alerts topic
(``<group>-<channel>``), so a slow SMS provider never holds back the webhook. Kafka's group
assignment gives each partition one dispatcher at a time; on assignment the dispatcher takes the
partition's owner **epoch** in the ledger (the fence a stale owner cannot write past).

Per partition, in this order (durable first, commit last; :mod:`aldebaran.delivery.settle`): the
polled alerts are cut into **runs** (≤ the channel's max_run), on every channel. A run is claimed with
one conditional create whose key comes from its first offset; its alerts are sent together
(``send_many``); every outcome is recorded in one write; then the offsets are committed. A run found
already RECORDED (a replay after a crash) is skipped; one found CLAIMED by an older epoch is adopted
and settled as the channel allows: resent with the same idempotency keys (a channel that
deduplicates), looked up per alert (the log file), or recorded IN_DOUBT (SMS). Alert ids seen in
recent runs (``dedupe_window_offsets``) are repeats and are not sent again; older repeats are refused
by the recipient's deduplication, the channel's own sent-log, or a sent marker in the ledger.

Failed sends keep their own record (RETRY → … → DEAD; IN_DOUBT where resending is unsafe). A
periodic sweep retries what is due and asks providers with a lookup about IN_DOUBT deliveries.
A streaming dispatcher (``aldebaran dispatch --follow``) writes a heartbeat that Airflow's
``dispatch_supervisor`` DAG watches; ``alert_dispatch`` runs the same code once for catch-up.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import tenacity

from aldebaran.runtime import logs
from aldebaran.delivery import claimlog
from aldebaran.delivery.corrupt import set_aside
from aldebaran.delivery.decode import AlertDeadLetters, decode
from aldebaran.delivery.exceptions import ConsumerFatal, RetryableError
from aldebaran.delivery.handles import ALREADY, BUSY, DOUBT, SEND
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.delivery.settle import Partition, RunSettler
from aldebaran.delivery.stats import DispatchStats
from aldebaran.exceptions import Fenced, LedgerCorrupt, ObjectStoreError
from aldebaran.model import Alert
from aldebaran.settings import KafkaSettings, load

log = logging.getLogger(__name__)

GROUP = "aldebaran-dispatcher"  # the default of ALDEBARAN_DELIVERY_GROUP
SWEEP_BACKOFF_MAX = 30.0  # seconds between tries of a failing sweep, or of taking a partition


class ChannelDispatcher:
    """One channel's queue over the alerts topic (a subclass reads another: aldebaran.delivery.fast)."""

    group_suffix = ""  # after <group>-<channel>: a queue of its own per topic
    claim_first = False  # RunSettler: create a new run without looking for one first

    def __init__(self, channel, ledger: Ledger, settings: DeliverySettings, kafka: KafkaSettings,
                 group: str, owner: str, stats: DispatchStats, dead_letters: AlertDeadLetters) -> None:
        self.channel = channel
        self.ledger = ledger
        self.settings = settings
        self.kafka = kafka
        self.topic = self.topic_of(kafka)
        self.group = f"{group}-{channel.name}{self.group_suffix}"
        self.owner = owner
        self.stats = stats
        self.dead_letters = dead_letters
        self.runs = RunSettler(channel, ledger, settings, self.topic, owner, stats, dead_letters, self.claim_first)
        self.partitions: dict[int, Partition] = {}
        self._sweep_backoff = 0.0

    @staticmethod
    def topic_of(kafka: KafkaSettings) -> str:
        return kafka.alerts_topic

    def fetch(self, c) -> list:
        """One poll: up to poll_max alerts, gathered for at most 0.2 s (librdkafka waits that long to fill it)."""
        return c.consume(num_messages=self.settings.poll_max, timeout=0.2)

    # --- the loop ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event, idle_timeout: float | None, max_alerts: int | None = None,
            heartbeat=None) -> None:
        """Deliver until `stop`, or (idle_timeout not None) until nothing arrived for that long. A consumer
        that hits a fatal error is replaced by a new one, which rejoins the group: a static member can be
        fenced for good while the group's coordinator moves (a broker lost), and would otherwise poll
        nothing but that error while its partitions stay assigned to it."""
        while True:
            try:
                return self._consume(stop, idle_timeout, max_alerts, heartbeat)
            except ConsumerFatal as exc:
                if stop.is_set():
                    return None
                log.warning("%s: %s; a new consumer rejoins the group", self.channel.name, exc,
                            extra=logs.fields(channel=self.channel.name))
                self.partitions.clear()

    def _consume(self, stop: threading.Event, idle_timeout: float | None, max_alerts: int | None,
                 heartbeat) -> None:
        from confluent_kafka import TopicPartition

        from aldebaran.kafka.failover import dispatcher_group
        from aldebaran.kafka.io import consumer

        c = consumer(self.kafka, self.group, **{
            # Session, heartbeat, assignment strategy, poll interval: how a dead member's partitions move on.
            **dispatcher_group(session_timeout_ms=self.settings.session_timeout_ms,
                               assignment_strategy=self.settings.assignment_strategy,
                               max_poll_interval_ms=self.settings.max_poll_interval_ms),
            "enable.partition.eof": False,
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
            # A streaming dispatcher is a static member: its restart takes its partitions back at once
            # (ALDEBARAN_DELIVERY_STATIC_MEMBERSHIP); a one-pass run stays dynamic beside it.
            **({"group.instance.id": f"{self.group}@{socket.gethostname()}/{heartbeat.name}"}
               if heartbeat is not None and self.settings.static_membership else {})})
        last_data = time.monotonic()
        settled_upto: dict[int, int] = {}  # partition → the next offset to commit (all below it settled)

        def on_assign(_c, tps) -> None:
            nonlocal last_data
            for tp in tps:
                epoch = self._retrying(stop, self.ledger.take_partition, self.channel.name, self.topic, tp.partition,
                                       self.owner)
                if epoch is None:
                    return  # stopping: a partition not taken is neither read nor committed
                self.partitions[tp.partition] = Partition(tp.partition, epoch)
                log.info("%s: partition %d assigned (epoch %d)", self.channel.name, tp.partition, epoch,
                         extra=logs.fields(channel=self.channel.name, partition=tp.partition))
            # The idle clock starts once there is something to read: after the partitions are taken, which
            # waits out an object-store outage (a one-pass run must not end idle before its first fetch).
            last_data = time.monotonic()

        def on_revoke(_c, tps) -> None:
            for tp in tps:
                self.partitions.pop(tp.partition, None)
                settled_upto.pop(tp.partition, None)

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        seen = 0
        next_sweep = 0.0
        pool = ThreadPoolExecutor(8, thread_name_prefix=f"partitions-{self.channel.name}")
        try:
            while not stop.is_set() and (max_alerts is None or seen < max_alerts):
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self._sweep_once()
                if heartbeat is not None:
                    heartbeat.progress(self, c, settled_upto)  # a report; its own thread writes the beat
                msgs = self.fetch(c)
                if not msgs and not any(p.buffer for p in self.partitions.values()):
                    if idle_timeout is not None and time.monotonic() - last_data > idle_timeout and c.assignment():
                        break
                    continue
                if msgs:
                    last_data = time.monotonic()
                for msg in msgs:
                    if msg.error():
                        if msg.error().fatal():
                            raise ConsumerFatal(f"consumer error {msg.error()}")
                        log.warning("%s: consumer error %s (retrying)", self.channel.name, msg.error(),
                                    extra=logs.fields(channel=self.channel.name))
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
            self._sweep_once()
        finally:
            pool.shutdown(wait=True)
            self.runs.close()
            # Only what was settled: never the consumer's position, which runs ahead of what is settled
            # (a poll's buffer cut short by a stop, a partition stopped broken, a run waiting for its range).
            final = [TopicPartition(self.topic, p, off) for p, off in settled_upto.items() if p in self.partitions]
            if final:
                try:
                    c.commit(offsets=final, asynchronous=False)
                except Exception as exc:  # noqa: BLE001 - the asynchronous commits before may have landed it
                    log.debug("%s: final commit: %s", self.channel.name, exc)
            c.close()

    @staticmethod
    def _decode(msg) -> tuple:
        """(offset, raw, Alert, None), or (offset, raw, None, Rejected): a rejected message takes its place in
        a run (MALFORMED) and is dead-lettered before its offset is committed (aldebaran.delivery.settle)."""
        got = decode(msg)
        if isinstance(got, Alert):
            return (msg.offset(), msg.value(), got, None)
        return (msg.offset(), msg.value(), None, got)

    def _settle_partition(self, part: Partition, stop: threading.Event) -> int | None:
        """Settle what is buffered for one partition; the next offset to commit, or None."""
        try:
            return self.runs.settle(part, stop)
        except (Fenced, LedgerCorrupt) as exc:  # a corrupt run is marked in the quarantine (corrupt.set_aside)
            part.broken, part.buffer = set_aside(self.ledger, exc, self.owner, self.channel.name), []
            log.error("%s: partition %d stopped: %s", self.channel.name, part.number, exc,
                      extra=logs.fields(channel=self.channel.name, partition=part.number))
            return None
        except (ObjectStoreError, RetryableError) as exc:
            # Nothing is lost: the buffer stays, and an adopted run stays ours (asked again next turn).
            log.warning("%s: %s; partition %d retries", self.channel.name, exc, part.number,
                        extra=logs.fields(channel=self.channel.name, partition=part.number))
            stop.wait(1.0)
            return None

    # --- the sweep: per-alert records --------------------------------------------------------------
    def _sweep_once(self) -> float:
        """One sweep; the seconds until the next. A transient failure (store or provider down) is logged and
        the sweep tried again after a capped backoff, for as long as the dispatcher runs: the loop goes on
        delivering new alerts meanwhile, on every partition."""
        try:
            self.sweep()
        except (ObjectStoreError, RetryableError) as exc:
            self._sweep_backoff = min(SWEEP_BACKOFF_MAX, max(1.0, 2 * self._sweep_backoff))
            log.warning("%s: sweep failed (%s); again in %.0fs", self.channel.name, exc, self._sweep_backoff,
                        extra=logs.fields(channel=self.channel.name))
            return self._sweep_backoff
        self._sweep_backoff = 0.0
        return self.settings.sweep_seconds

    def _readable(self, claim, *args):
        """One index entry's record through `claim` (Ledger.retry / doubted); a corrupt record or an odd
        index key is quarantined and skipped (None): one bad object must not stop the sweep, nor the next
        process that meets it (the ledger logs the key and the reason; the dispatcher counts it)."""
        try:
            return claim(self.channel, *args)
        except LedgerCorrupt as exc:
            self.ledger.quarantine(exc.key, exc.reason, self.owner, self.channel.name)
            return None

    def sweep(self) -> int:
        """Retry what is due in the retry index; ask providers about IN_DOUBT deliveries (with a lookup)."""
        name, done = self.channel.name, 0
        due = [a for alert_id in self.ledger.indexed("retry", name)
               if (a := self._readable(self.ledger.retry, alert_id, self.owner)) is not None and a.status == SEND]
        if due:
            self.stats.bump("retried", name, len(due))
            done += len(deliver(self.channel, due, self.stats))
        if getattr(self.channel, "has_lookup", False):
            done += self._settle_doubts(self.ledger.clock())
        return done

    def _settle_doubts(self, now: float) -> int:
        name, done = self.channel.name, 0
        for alert_id in self.ledger.indexed("in_doubt", name):
            attempt = self._readable(self.ledger.doubted, alert_id)
            if attempt is None or (attempt.record.doubted_at or attempt.record.updated_at) \
                    + self.settings.lookup_grace_seconds > now:
                continue
            found = self.channel.lookup(alert_id)  # RetryableError: ask again at the next sweep
            if attempt.report_lookup(found):
                done += 1
                log.info("%s/%s: IN_DOUBT settled by the provider's lookup: %s", name, alert_id,
                         "delivered" if found else "no such message, sending",
                         extra=logs.fields(channel=name, alert_id=alert_id))
        return done

    def _retrying(self, stop: threading.Event, fn, *args):
        """An object-store call outside a partition's settle loop (taking a partition): back off while the
        store is down (1 s doubling to SWEEP_BACKOFF_MAX), for as long as it takes; None once `stop` is set."""
        def log_backoff(state: tenacity.RetryCallState) -> None:
            log.warning("%s: %s; backing off %.0fs", self.channel.name, state.outcome.exception(), state.upcoming_sleep,
                        extra=logs.fields(channel=self.channel.name))

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((ObjectStoreError, RetryableError)),
            wait=tenacity.wait_exponential(min=1.0, max=SWEEP_BACKOFF_MAX), sleep=stop.wait, before_sleep=log_backoff)
        # A stop set during the back-off ends the loop before the next call (no stop strategy: never give up).
        return retrying(lambda: None if stop.is_set() else fn(*args))


class Dispatcher:
    """Every configured channel's ChannelDispatcher, one thread each."""

    def __init__(self, ledger: Ledger, channels: list, kafka: KafkaSettings | None = None, group: str | None = None,
                 owner: str | None = None, settings: DeliverySettings | None = None,
                 worker: type[ChannelDispatcher] = ChannelDispatcher) -> None:
        self.ledger = ledger
        self.channels = channels
        self.kafka = kafka or load(KafkaSettings)
        self.settings = settings or load(DeliverySettings)
        self.group = group or self.settings.group
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.dead_letters = AlertDeadLetters(self.kafka)  # alerts.dlq: connects at the first rejected alert
        self.worker = worker  # ChannelDispatcher, or FastChannelDispatcher (the fast lane's topic)

    def run(self, stop: threading.Event | None = None, idle_timeout: float | None = None,
            max_alerts: int | None = None, heartbeat=None, stats: DispatchStats | None = None) -> DispatchStats:
        """Deliver every channel's alerts: until `stop` (streaming), or until idle for idle_timeout."""
        stats = stats if stats is not None else DispatchStats()
        stop = stop or threading.Event()
        t0 = time.monotonic()
        if self.settings.cross_lane == "log" and any(getattr(ch, "fast", False) for ch in self.channels):
            claimlog.check_aligned(self.kafka)  # both lanes' copies must meet in one partition's log
        workers = [self.worker(ch, self.ledger, self.settings, self.kafka, self.group, self.owner, stats,
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


def deliver(channel, attempts: list, stats: DispatchStats) -> list[str]:
    """Send what the claimed attempts hold, together, and report each outcome: what became of each."""
    outcomes = channel.send_many([a.alert for a in attempts])
    results = [a.report(o) for a, o in zip(attempts, outcomes)]
    now_ms = time.time() * 1000
    for attempt, what in zip(attempts, results):
        if what == BUSY:
            log.warning("%s/%s: record changed under us after the send (rescued by another worker)",
                        channel.name, attempt.record.alert_id,
                        extra=logs.fields(channel=channel.name, alert_id=attempt.record.alert_id))
            continue
        stats.bump(what, channel.name)
        if what == "sent" and isinstance(attempt.alert.detected_at, int):
            with stats.lock:
                stats.latencies_ms.append(now_ms - attempt.alert.detected_at)
    return results


def deliver_direct(ledger: Ledger, channel, alert: Alert, owner: str, stats: DispatchStats) -> str:
    """Deliver one alert that does not come from the alerts topic (the supervisor's page)
    through its own record, exactly once per channel: "sent", "already", "failed", "in_doubt" or "busy"
    (another worker holds it under a live lease)."""
    attempt = ledger.attempt(channel, alert, owner)
    if attempt.status != SEND:
        if attempt.status in (ALREADY, DOUBT):
            stats.bump(attempt.status, channel.name)
        return attempt.status
    return deliver(channel, [attempt], stats)[0]


def default_ledger(store=None) -> Ledger:
    return Ledger.from_settings(load(DeliverySettings), store)


def run_once(channels: list[str] | None = None, max_alerts: int | None = None,
             idle_timeout: float | None = None) -> DispatchStats:
    from aldebaran.delivery.channels import configured_channels

    d = Dispatcher(default_ledger(), configured_channels(channels))
    return d.run_once(max_alerts=max_alerts, idle_timeout=idle_timeout)
