"""Producing and consuming with confluent-kafka (librdkafka): the load generator, the auditor's
alert sink, the dispatcher and the tests all go through here. Every client is configured from the
platform's failover settings (:mod:`aldebaran.kafka.failover`), then its Kafka connection
(:mod:`aldebaran.kafka.conn`: brokers, TLS, SASL), then this module's defaults, then the caller's own keys."""

from __future__ import annotations

import logging
import time
from typing import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from aldebaran.exceptions import AldebaranError
from aldebaran.kafka import failover
from aldebaran.kafka.conn import resolve
from aldebaran.settings import KafkaSettings

log = logging.getLogger(__name__)


def producer(settings: KafkaSettings, **extra) -> Producer:
    conf = {
        # Idempotence (acks=all) and the message timeout come with the failover keys (aldebaran.kafka.failover).
        # librdkafka's default partitioner (consistent_random: CRC32 of the key), as a user's plain
        # confluent-kafka Producer has it: the auditor detects whichever standard partitioner the
        # trades' producers use (aldebaran.audit.partitioning), so the platform's own tools need none.
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 1_000_000,
        "compression.type": "lz4",
        "message.max.bytes": settings.max_message_bytes,
        "log_level": 3,
    }
    # The connection's tuning (linger.ms, compression, ...) wins over these defaults; the caller's keys win over both.
    return Producer({**failover.librdkafka("producer"), **conf, **resolve(settings).client_config(),
                     **extra})


def produce_all(p: Producer, topic: str, records: Iterable[tuple], headers=None, timeout: float = 60.0) -> int:
    """Produce (key, value) or (key, value, headers) records and flush (up to `timeout` s); raise if any
    delivery failed or is still queued. `headers`: for the records that carry none of their own."""
    errors: list = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    n = 0
    for record in records:
        key, value = record[0], record[1]
        own = record[2] if len(record) > 2 else headers
        while True:
            try:
                p.produce(topic, value=value, key=key, headers=own, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
        if n % 10000 == 0:
            p.poll(0)
    remaining = p.flush(timeout)
    if remaining or errors:
        raise AldebaranError(f"producing to {topic}: {remaining} undelivered, errors: {errors[:3]}")
    return n


class AlertSink:
    """The auditor's alert writer: key = alert_id, idempotent producer, flushed per batch."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._producer: Producer | None = None

    def send(self, alerts: list[tuple]) -> None:
        """(alert id, alert JSON[, headers]) each."""
        if self._producer is None:
            self._producer = producer(self.settings, **{"linger.ms": 1})
        produce_all(self._producer, self.settings.alerts_topic, alerts)


def dlq_headers(reason_code: str, reason: str, topic: str, partition: int, offset: int, kafka_ts: int,
                consumer: str | None = None) -> list[tuple[str, bytes]]:
    """A dead-letter record's headers: why it was rejected, where it was read and (alerts.dlq) who rejected it.
    The same names on trades.dlq and alerts.dlq, so one tool reads both."""
    headers = [
        ("aldebaran.reason_code", reason_code.encode()),
        ("aldebaran.reason", reason.encode()),
        ("aldebaran.source.topic", topic.encode()),
        ("aldebaran.source.partition", str(partition).encode()),
        ("aldebaran.source.offset", str(offset).encode()),
        ("aldebaran.source.timestamp", str(kafka_ts).encode()),
    ]
    if consumer is not None:
        headers.append(("aldebaran.consumer", consumer.encode()))
    return headers


class DlqSink:
    """The auditor's dead-letter writer: each rejected message's original key and bytes, its reason and
    origin in headers; idempotent producer. Records up to the largest message the topics take plus those
    headers (settings.dlq_record_bytes). `add` hands records to the producer as they come (librdkafka
    buffers and batches them), `flush` waits for every one and raises if any failed."""

    def __init__(self, settings: KafkaSettings, topic: str | None = None) -> None:
        self.settings = settings
        self.topic = topic or settings.dlq_topic
        self._producer: Producer | None = None
        self._errors: list = []
        self.added = 0

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self._errors.append(err)

    def add(self, records: Iterable[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]) -> int:
        return self.add_to(-1, records)

    def add_to(self, partition: int, records: Iterable[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]) -> int:
        """`add`, to one partition of the topic (-1: the partitioner's choice)."""
        n = self._produce(partition, records, self._on_delivery)
        self.added += n
        return n

    def deliver(self, records: Iterable[tuple[bytes | None, bytes, list[tuple[str, bytes]]]],
                timeout: float = 60) -> int:
        """Produce `records` and wait until each is acknowledged; raise if any was not. Unlike add/flush, the
        acknowledgements are counted per call: threads sharing the sink never take each other's failures."""
        errors, acked = [], []

        def on_delivery(err, _msg) -> None:
            (errors if err is not None else acked).append(err)

        n = self._produce(-1, records, on_delivery)
        remaining = self._producer.flush(timeout)
        if errors or len(acked) < n:
            raise AldebaranError(f"producing to {self.topic}: {n - len(acked)} of {n} not acknowledged "
                                 f"({remaining} still queued), errors: {errors[:3]}")
        return n

    def _produce(self, partition: int, records, on_delivery) -> int:
        if self._producer is None:
            self._producer = producer(self.settings, **{"linger.ms": 1,
                                                        "message.max.bytes": self.settings.dlq_record_bytes})
        n = 0
        for key, value, headers in records:
            while True:
                try:
                    self._producer.produce(self.topic, value=value, key=key, headers=headers, partition=partition,
                                           on_delivery=on_delivery)
                    break
                except BufferError:
                    self._producer.poll(0.05)
            n += 1
        self._producer.poll(0)
        return n

    def flush(self, timeout: float = 60) -> int:
        """Wait for every record added so far; return how many; raise if any was not delivered."""
        remaining = self._producer.flush(timeout) if self._producer is not None else 0
        errors, self._errors = self._errors, []
        added, self.added = self.added, 0
        if remaining or errors:
            raise AldebaranError(f"producing to {self.topic}: {remaining} undelivered, "
                                 f"errors: {errors[:3]}")
        return added

    def reset(self) -> None:
        """Start a new unit of work (a retried task reuses the worker's sink): forget the previous one's
        failures and count. Records it left in the producer's queue are still delivered (duplicates on
        the DLQ at worst, which is at-least-once like the alerts topic)."""
        self._errors, self.added = [], 0


def consumer(settings: KafkaSettings, group: str, **extra) -> Consumer:
    conf = {
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "log_level": 3,
    }
    # The failover keys, the connection, then what this consumer needs (its group, no auto commit), then the
    # caller's keys.
    return Consumer({**failover.librdkafka("consumer"), **resolve(settings).client_config(), **conf,
                     **extra})


def read_topic(settings: KafkaSettings, topic: str, timeout: float = 10.0, idle: float = 2.0) -> list:
    """Read a whole topic from the beginning (no group commit): tests and reports."""
    c = consumer(settings, group=f"aldebaran-reader-{time.time_ns()}")
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
    except KafkaException as exc:
        c.close()
        raise resolve(settings).failure(f"reading {topic}", exc) from None
    if meta is None or meta.error is not None:
        c.close()
        raise AldebaranError(f"topic {topic} not found")
    parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
    ends = {}
    for tp in parts:
        lo, hi = c.get_watermark_offsets(tp, timeout=10)
        ends[tp.partition] = hi
    c.assign([TopicPartition(topic, p, 0) for p, hi in ends.items() if hi > 0])
    out, done = [], {p for p, hi in ends.items() if hi == 0}
    deadline = time.monotonic() + timeout
    while len(done) < len(ends) and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                done.add(msg.partition())
                continue
            raise KafkaException(msg.error())
        out.append(msg)
        if msg.offset() + 1 >= ends[msg.partition()]:
            done.add(msg.partition())
    c.close()
    return out


def end_offsets(settings: KafkaSettings, topic: str) -> dict[int, int]:
    c = consumer(settings, group="aldebaran-offsets")
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions}
    finally:
        c.close()
