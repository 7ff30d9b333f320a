"""The alert contract for every consumer of ``alerts`` / ``alerts.fast``: a Kafka message → a
:class:`~aldebaran.model.Alert`, or a :class:`Rejected` with a reason, which a consumer that owns its
position sends to ``alerts.dlq`` (:class:`AlertDeadLetters`) before it moves past it (BRIEF §2: any
bytes are possible input; an undecodable alert is dead-lettered, its offset committed, nothing crashes).

The parse itself, with its bounds (``MAX_ALERT_BYTES``, ``MAX_ALERT_DEPTH``, checked before a parser sees
the bytes), is :meth:`Alert.from_json`: the model is the bottom of the product and cannot import this
module, and its own callers must be as safe. What this module adds is the consumer's side: the reason
code and the message's origin for the dead-letter record, and the writer that waits for the record's
acknowledgement (the dispatcher commits the offset only after it).

The kind is any non-empty string (BRIEF §2 names OVERFILL/ORPHAN for ``alerts``; MISMATCH and the pages share
the shape), so the fast topic's RETRACTION / REINSTATEMENT messages (aldebaran.delivery.retraction) decode
as alerts there: the fast dispatcher delivers them, the reconciler skips them.

Consumers: the dispatchers (exact and fast, :mod:`aldebaran.delivery.dispatcher`), the lane reconciler
(:mod:`aldebaran.lanes.reconciler`), and read-only tools (``aldebaran explain``), which skip a rejected
message with a logged reason and write no dead letter.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from aldebaran.delivery.exceptions import RetryableError
from aldebaran.exceptions import AldebaranError
from aldebaran.model import Alert, AlertError
from aldebaran.settings import KafkaSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Rejected:
    """One message of an alerts topic that is not an alert: why (``code``, ``reason``) and where it was read."""

    code: str  # too_large | too_deep | not_json | not_object | invalid (aldebaran.model.AlertError)
    reason: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # the message's Kafka timestamp, epoch ms (-1: none)

    def __str__(self) -> str:
        return self.reason  # what a delivery run keeps as the entry's reason

    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def dlq_record(self, consumer: str) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
        """(key, value, headers) for alerts.dlq: the original key and bytes, the reason and origin in headers."""
        from aldebaran.kafka.io import dlq_headers

        return (self.key, self.value if self.value is not None else b"",
                dlq_headers(self.code, self.reason, self.topic, self.partition, self.offset, self.timestamp, consumer))


def decode(msg) -> Alert | Rejected:
    """A polled Kafka message (without error) as an alert, or why it is none. Never raises for its bytes."""
    try:
        return Alert.from_json(msg.value())
    except AlertError as exc:
        return Rejected(exc.code, str(exc), msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                        msg.timestamp()[1])


class AlertDeadLetters:
    """The ``alerts.dlq`` writer, shared by a process's consumers (thread-safe). :meth:`send` returns once
    every record is acknowledged, so the caller may then commit past the rejected messages; RetryableError
    if one is not (the caller keeps its position and tries again). The topic is created on first use when it
    is missing, as the lane keeper creates the fast topic: a deployment need not know it in advance."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self.topic = kafka.alerts_dlq_topic
        self._sink = None
        self._lock = threading.Lock()

    def send(self, rejected: list[Rejected], consumer: str) -> int:
        """Dead-letter `rejected` as rejected by `consumer` (e.g. ``dispatcher:webhook``, ``reconciler:fast``)."""
        from confluent_kafka import KafkaException

        if not rejected:
            return 0
        try:
            n = self._ready().deliver([r.dlq_record(consumer) for r in rejected])
        except (AldebaranError, KafkaException) as exc:
            raise RetryableError(f"dead-lettering {len(rejected)} rejected alert(s) to {self.topic}: {exc}") from None
        for r in rejected:
            log.warning("%s: rejected alert at %s dead-lettered to %s: %s", consumer, r.where(), self.topic, r.reason)
        return n

    def _ready(self):
        from aldebaran.kafka.admin import ensure_topics
        from aldebaran.kafka.io import DlqSink

        with self._lock:
            if self._sink is None:
                ensure_topics(self.kafka, [self.topic])
                self._sink = DlqSink(self.kafka, topic=self.topic)
            return self._sink


__all__ = ["AlertDeadLetters", "Rejected", "decode"]
