"""The dispatcher: alerts from Kafka → a delivery record per channel → the channel.

Commit order, per polled batch of alerts (durable first, commit second):
  1. for every alert × channel, the delivery record is claimed (conditional create) or found;
  2. claimed deliveries are sent and their outcome recorded (DELIVERED / RETRY / DEAD);
  3. only then are the consumed Kafka offsets committed.
A crash anywhere before 3 re-reads the same alerts: their records already exist, so nothing is sent
twice; a crash between a send and its record leaves a CLAIMED record whose lease expires (rescued
on idempotent channels, IN_DOUBT on the others).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field

from aldebaran.delivery.backends import Backend, S3Backend
from aldebaran.delivery.channels import Channel, PermanentError, RetryableError, configured_channels
from aldebaran.delivery.ledger import Ledger, LostLease
from aldebaran.settings import KafkaSettings, load

log = logging.getLogger(__name__)

GROUP = "aldebaran-dispatcher"


@dataclass
class DispatchStats:
    alerts: int = 0
    malformed: int = 0
    sent: dict = field(default_factory=dict)
    already: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> str:
        return json.dumps({"alerts": self.alerts, "malformed": self.malformed, "sent": self.sent,
                           "already_recorded": self.already, "failed": self.failed,
                           "seconds": round(self.seconds, 2)})


def _bump(d: dict, key: str) -> None:
    d[key] = d.get(key, 0) + 1


class Dispatcher:
    def __init__(self, ledger: Ledger, channels: list[Channel], kafka: KafkaSettings | None = None,
                 group: str = GROUP, owner: str | None = None) -> None:
        self.ledger = ledger
        self.channels = channels
        self.kafka = kafka or load(KafkaSettings)
        self.group = group
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"

    def deliver(self, alert: dict, stats: DispatchStats) -> None:
        for channel in self.channels:
            claim = self.ledger.claim(channel.name, alert, self.owner)
            if claim is None:
                _bump(stats.already, channel.name)
                continue
            try:
                receipt = channel.send(alert, alert["alert_id"])
            except PermanentError as exc:
                self.ledger.failed(claim, f"permanent: {exc}", permanent=True)
                _bump(stats.failed, channel.name)
                continue
            except RetryableError as exc:
                self.ledger.failed(claim, f"retryable: {exc}")
                _bump(stats.failed, channel.name)
                continue
            try:
                self.ledger.delivered(claim, receipt)
            except LostLease:
                log.warning("%s/%s: lease lost after a successful send", channel.name, alert["alert_id"])
            _bump(stats.sent, channel.name)

    def run_once(self, max_alerts: int | None = None, idle_timeout: float = 5.0, batch: int = 500) -> DispatchStats:
        """Drain what is waiting on the alerts topic, then return (an Airflow task, or the CLI)."""
        from aldebaran.kafka_io import consumer

        stats = DispatchStats()
        t0 = time.monotonic()
        c = consumer(self.kafka, self.group, **{"enable.partition.eof": False})
        c.subscribe([self.kafka.alerts_topic])
        last_seen = time.monotonic()
        try:
            while max_alerts is None or stats.alerts < max_alerts:
                msgs = c.consume(num_messages=batch, timeout=0.5)
                if not msgs:
                    if time.monotonic() - last_seen > idle_timeout:
                        break
                    continue
                last_seen = time.monotonic()
                for msg in msgs:
                    if msg.error():
                        raise RuntimeError(f"consuming {self.kafka.alerts_topic}: {msg.error()}")
                    alert = self._decode(msg, stats)
                    if alert is not None:
                        stats.alerts += 1
                        self.deliver(alert, stats)
                # Every record for every alert of this batch exists: now the offsets may move.
                c.commit(asynchronous=False)
        finally:
            c.close()
        stats.seconds = time.monotonic() - t0
        return stats

    def _decode(self, msg, stats: DispatchStats) -> dict | None:
        from aldebaran.objectstore import safe_segment

        try:
            alert = json.loads(msg.value())
            if not isinstance(alert, dict):
                raise ValueError("not an object")
            safe_segment(str(alert.get("alert_id")), "alert id")
            return alert
        except (ValueError, TypeError) as exc:
            stats.malformed += 1
            log.error("malformed alert at %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), exc)
            return None


def default_ledger(backend: Backend | None = None) -> Ledger:
    return Ledger(backend or S3Backend())


def run_once(channels: list[str] | None = None, max_alerts: int | None = None, idle_timeout: float = 5.0) -> DispatchStats:
    d = Dispatcher(default_ledger(), configured_channels(channels))
    return d.run_once(max_alerts=max_alerts, idle_timeout=idle_timeout)
