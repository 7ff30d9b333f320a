"""The dispatcher: alerts from Kafka → one delivery record per channel → the channel, exactly once.

Each channel is its own work queue: its own consumer group on the alerts topic (a slow SMS provider
never holds back the webhook), its own bounded pool of concurrent sends, its own retry sweep.

Per polled batch of alerts, in this order (durable first, commit second):
  1. each alert's delivery record is claimed (conditional create) — or found, when this alert was
     seen before (the topic is at-least-once; another dispatcher may be on it);
  2. claimed deliveries are sent and the outcome recorded: DELIVERED, RETRY (listed in the retry
     index), DEAD, or IN_DOUBT (outcome unknown on a channel that cannot deduplicate);
  3. only when every alert of the batch is settled are the Kafka offsets committed. An alert whose
     record another worker holds under a live lease blocks the commit until it settles or its lease
     expires (then it is rescued, or marked IN_DOUBT where resending is unsafe).
A crash before 3 re-reads the batch; every record already exists, so nothing is sent twice. If the
object store fails after a send, the receipt is kept in memory and only the record write is retried.
Due retries and stranded claims are found through the ledger's retry index by a periodic sweep.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from aldebaran.delivery.backends import Backend, S3Backend
from aldebaran.delivery.channels import Channel, OutcomeUnknown, PermanentError, RetryableError, configured_channels
from aldebaran.delivery.ledger import CLAIMED, DEAD, DELIVERED, IN_DOUBT, RETRY, Claim, Ledger, LostLease
from aldebaran.exceptions import AlreadyExists, ObjectStoreError
from aldebaran.objectstore import safe_segment
from aldebaran.settings import KafkaSettings, load

log = logging.getLogger(__name__)

GROUP = "aldebaran-dispatcher"
SETTLED = (DELIVERED, DEAD, IN_DOUBT, RETRY)


@dataclass
class DispatchStats:
    alerts: int = 0
    malformed: int = 0
    sent: dict = field(default_factory=dict)
    already: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    in_doubt: dict = field(default_factory=dict)
    retried: dict = field(default_factory=dict)
    latencies_ms: list = field(default_factory=list)  # alert detected_at → delivered, for benchmarks
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def bump(self, what: str, channel: str, n: int = 1) -> None:
        with self.lock:
            d = getattr(self, what)
            d[channel] = d.get(channel, 0) + n

    def summary(self) -> str:
        return json.dumps({"alerts": self.alerts, "malformed": self.malformed, "sent": self.sent,
                           "already_recorded": self.already, "failed": self.failed, "in_doubt": self.in_doubt,
                           "retried": self.retried, "seconds": round(self.seconds, 2)})


class AlertError(ValueError):
    """An alert on the topic that does not follow the contract."""


def decode_alert(raw: bytes | None) -> dict:
    try:
        alert = json.loads(raw or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise AlertError(f"not JSON: {exc}") from None
    if not isinstance(alert, dict):
        raise AlertError("not a JSON object")
    for name in ("alert_id", "kind", "order_id"):
        if not isinstance(alert.get(name), str) or not alert[name]:
            raise AlertError(f"field {name!r} missing or not a string")
    try:
        safe_segment(alert["alert_id"], "alert id")
    except ValueError as exc:
        raise AlertError(str(exc)) from None
    return alert


class DeadLetters:
    """Malformed alerts, kept once each in the object store under their topic position."""

    def __init__(self, backend: Backend, prefix: str = "dead-letters/alerts") -> None:
        self.backend = backend
        self.prefix = prefix

    def add(self, topic: str, partition: int, offset: int, raw: bytes | None, reason: str) -> None:
        key = f"{self.prefix}/{safe_segment(topic, 'topic')}/{partition:05d}-{offset:020d}.json"
        body = json.dumps({"topic": topic, "partition": partition, "offset": offset, "reason": reason,
                           "value_base64": base64.b64encode(raw or b"").decode(), "at": time.time()}).encode()
        try:
            self.backend.create(key, body)
        except AlreadyExists:
            pass  # another channel's worker (or an earlier run) recorded it already


class ChannelWorker:
    """One channel's queue over the alerts topic."""

    def __init__(self, channel: Channel, ledger: Ledger, kafka: KafkaSettings, group: str, owner: str,
                 stats: DispatchStats, dead_letters: DeadLetters, concurrency: int = 16, batch: int = 500,
                 sweep_every: float = 10.0) -> None:
        self.channel = channel
        self.ledger = ledger
        self.kafka = kafka
        self.group = f"{group}-{channel.name}"
        self.owner = owner
        self.stats = stats
        self.dead_letters = dead_letters
        self.concurrency = concurrency
        self.batch = batch
        self.sweep_every = sweep_every
        self.unrecorded: dict[str, tuple[Claim, dict]] = {}  # sent, but the record write failed
        self._lock = threading.Lock()

    # --- one delivery ---------------------------------------------------------------------------
    def deliver(self, alert: dict) -> bool:
        """Try to settle this alert on this channel. False: another worker holds it under a live lease."""
        name, alert_id = self.channel.name, alert["alert_id"]
        with self._lock:
            pending = self.unrecorded.pop(alert_id, None)
        if pending is not None:  # sent before; only the record is missing
            self._record_delivered(*pending)
            return True
        claim = self.ledger.claim(name, alert, self.owner)
        if claim is None:
            got = self.ledger.get(name, alert_id)
            if got is None:
                return False
            record = got[0]
            if record.state in SETTLED:
                self.stats.bump("already", name)
                return True
            if (record.lease_until or 0) > self.ledger.clock():
                return False  # someone is on it right now
            claim = self.ledger.reclaim(name, alert_id, self.owner, self.channel.can_dedupe)
            if claim is None:
                got = self.ledger.get(name, alert_id)
                return got is not None and got[0].state in SETTLED
            self.stats.bump("retried", name)
        self.send(claim)
        return True

    def send(self, claim: Claim) -> None:
        name, alert = self.channel.name, claim.record.alert
        try:
            receipt = self.channel.send(alert, alert["alert_id"])
        except OutcomeUnknown as exc:
            if self.channel.can_dedupe:
                self.ledger.failed(claim, f"outcome unknown, will resend with the same key: {exc}")
                self.stats.bump("failed", name)
            else:
                self.ledger.in_doubt(claim, f"outcome unknown: {exc}")
                self.stats.bump("in_doubt", name)
            return
        except PermanentError as exc:
            self.ledger.failed(claim, f"permanent: {exc}", permanent=True)
            self.stats.bump("failed", name)
            return
        except RetryableError as exc:
            self.ledger.failed(claim, f"retryable: {exc}")
            self.stats.bump("failed", name)
            return
        self._record_delivered(claim, receipt)

    def _record_delivered(self, claim: Claim, receipt: dict) -> None:
        name = self.channel.name
        try:
            self.ledger.delivered(claim, receipt)
        except LostLease:
            log.warning("%s/%s: lease lost after a successful send (rescued by another worker)",
                        name, claim.record.alert_id)
        except ObjectStoreError:
            with self._lock:
                self.unrecorded[claim.record.alert_id] = (claim, receipt)
            raise
        self.stats.bump("sent", name)
        detected = claim.record.alert.get("detected_at")
        if isinstance(detected, (int, float)):
            with self.stats.lock:
                self.stats.latencies_ms.append(time.time() * 1000 - detected)

    # --- the loop ---------------------------------------------------------------------------------
    def settle(self, pool: ThreadPoolExecutor, alerts: list[dict], stop: threading.Event) -> None:
        """Deliver a batch; returns when every alert is settled (blocked ones wait for their lease)."""
        waiting = alerts
        backoff = 1.0
        while waiting and not stop.is_set():
            try:
                results = list(pool.map(self.deliver, waiting))
            except ObjectStoreError as exc:
                log.warning("%s: object store unavailable (%s); backing off %.0fs", self.channel.name, exc, backoff)
                stop.wait(backoff)
                backoff = min(30.0, backoff * 2)
                continue
            backoff = 1.0
            waiting = [a for a, ok in zip(waiting, results) if not ok]
            if waiting:
                stop.wait(min(5.0, self.ledger.lease_seconds / 4))

    def sweep(self, pool: ThreadPoolExecutor) -> int:
        """Retry what is due in the retry index (RETRY past next_at, CLAIMED past its lease)."""
        name = self.channel.name
        done = 0
        for alert_id in self.ledger.indexed(RETRY.lower(), name):
            got = self.ledger.get(name, alert_id)
            if got is None:
                continue
            record = got[0]
            if record.state in (DELIVERED, DEAD, IN_DOUBT):
                self.ledger.backend.delete(self.ledger.index_key(RETRY.lower(), name, alert_id))
                continue
            claim = self.ledger.reclaim(name, alert_id, self.owner, self.channel.can_dedupe)
            if claim is not None:
                self.stats.bump("retried", name)
                pool.submit(self.send, claim).result()
                done += 1
        return done

    def run(self, stop: threading.Event, idle_timeout: float, max_alerts: int | None) -> None:
        from aldebaran.kafka_io import consumer

        # A short session: when a dispatcher dies, its partitions move to a live one within ~10 s.
        c = consumer(self.kafka, self.group, **{"enable.partition.eof": False, "session.timeout.ms": 10000,
                                                "heartbeat.interval.ms": 2000})
        last_data = time.monotonic()

        def on_assign(consumer_, partitions) -> None:
            nonlocal last_data
            last_data = time.monotonic()  # the idle clock starts once there is something to read

        c.subscribe([self.kafka.alerts_topic], on_assign=on_assign)
        seen = 0
        last_sweep = 0.0
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"send-{self.channel.name}") as pool:
                while not stop.is_set() and (max_alerts is None or seen < max_alerts):
                    if time.monotonic() - last_sweep >= self.sweep_every:
                        self._safely(self.sweep, pool)
                        last_sweep = time.monotonic()
                    msgs = c.consume(num_messages=self.batch, timeout=0.5)
                    if not msgs:
                        if time.monotonic() - last_data > idle_timeout and c.assignment():
                            break
                        continue
                    last_data = time.monotonic()
                    alerts = []
                    for msg in msgs:
                        if msg.error():
                            log.warning("%s: consumer error %s (retrying)", self.channel.name, msg.error())
                            continue
                        try:
                            alerts.append(decode_alert(msg.value()))
                        except AlertError as exc:
                            with self.stats.lock:
                                self.stats.malformed += 1
                            log.error("malformed alert at %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), exc)
                            self._safely(self.dead_letters.add, msg.topic(), msg.partition(), msg.offset(), msg.value(), str(exc))
                    seen += len(alerts)
                    with self.stats.lock:
                        self.stats.alerts = max(self.stats.alerts, seen)
                    self.settle(pool, alerts, stop)
                    if stop.is_set():
                        break
                    # Every alert of this batch is settled on this channel: now the offsets may move.
                    c.commit(asynchronous=False)
                self._safely(self.sweep, pool)
        finally:
            c.close()

    def _safely(self, fn, *args):
        backoff = 1.0
        for _ in range(6):
            try:
                return fn(*args)
            except ObjectStoreError as exc:
                log.warning("%s: object store unavailable (%s); backing off %.0fs", self.channel.name, exc, backoff)
                time.sleep(backoff)
                backoff = min(30.0, backoff * 2)
        return None


class Dispatcher:
    def __init__(self, ledger: Ledger, channels: list[Channel], kafka: KafkaSettings | None = None,
                 group: str = GROUP, owner: str | None = None, concurrency: int = 16) -> None:
        self.ledger = ledger
        self.channels = channels
        self.kafka = kafka or load(KafkaSettings)
        self.group = group
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.concurrency = concurrency
        self.dead_letters = DeadLetters(ledger.backend)

    def run_once(self, max_alerts: int | None = None, idle_timeout: float = 5.0,
                 stop: threading.Event | None = None) -> DispatchStats:
        """Drain what is waiting on the alerts topic for every channel, then return."""
        stats = DispatchStats()
        stop = stop or threading.Event()
        t0 = time.monotonic()
        workers = [
            ChannelWorker(ch, self.ledger, self.kafka, self.group, self.owner, stats, self.dead_letters,
                          concurrency=self.concurrency)
            for ch in self.channels
        ]
        errors: list[BaseException] = []

        def run(w: ChannelWorker) -> None:
            try:
                w.run(stop, idle_timeout, max_alerts)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller below
                errors.append(exc)
                stop.set()

        threads = [threading.Thread(target=run, args=(w,), name=f"dispatch-{w.channel.name}") for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats.seconds = time.monotonic() - t0
        if errors:
            raise errors[0]
        return stats


def default_ledger(backend: Backend | None = None) -> Ledger:
    return Ledger(
        backend or S3Backend(),
        prefix=os.environ.get("ALDEBARAN_DELIVERY_PREFIX", "deliveries"),
        lease_seconds=float(os.environ.get("ALDEBARAN_DELIVERY_LEASE_SECONDS", "60")),
        max_attempts=int(os.environ.get("ALDEBARAN_DELIVERY_MAX_ATTEMPTS", "5")),
    )


def run_once(channels: list[str] | None = None, max_alerts: int | None = None, idle_timeout: float = 5.0) -> DispatchStats:
    d = Dispatcher(default_ledger(), configured_channels(channels))
    return d.run_once(max_alerts=max_alerts, idle_timeout=idle_timeout)
