"""Kafka bus channel: forward alerts to a topic (another cluster, or the same one).

Key = the alert id (a consumer that deduplicates by it sees each alert once), value = the alert JSON
(:func:`~.text.alert_body`), header ``aldebaran.alert_id``; an idempotent producer (acks=all), so
librdkafka's own retries never duplicate (a resend after a crash does: at least once, same key). ``send_many`` produces a whole run, polling the producer as it goes so that delivery
reports are served and its queue never fills, then flushes once: each alert's delivery report is its
Outcome; none within ``flush_timeout`` → unknown (it may yet be written); a full local queue → retry
for the alerts it could not take.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from aldebaran.delivery.channels.base import Channel, Outcome, Promise, register
from aldebaran.delivery.channels.connection import Connection, scrub
from aldebaran.delivery.channels.text import alert_body
from aldebaran.delivery.exceptions import OutcomeUnknown, PermanentError, RetryableError
from aldebaran.exceptions import ConfigError
from aldebaran.model import Alert

POLL_EVERY = 500  # messages produced between two polls of the delivery reports


def _failover_keys() -> dict[str, object]:
    from aldebaran.kafka.failover import librdkafka

    return librdkafka("producer")


@register("kafka")
class KafkaChannel(Channel):
    """Forward to a topic: key = alert id, value = alert JSON, idempotent producer (module docstring)."""

    can_dedupe: ClassVar[bool] = True
    dedupe_key: ClassVar[str | None] = ("message key = alert id (if the consumer dedupes by key; "
                                        "the idempotent producer only within a session)")
    in_doubt_policy: ClassVar[str] = "re-sent with the same key"
    # The idempotent producer dedupes within one producer session only: a resend after a crash is a second record.
    delivery_promise: ClassVar[Promise] = Promise.AT_LEAST_ONCE_STABLE_KEY
    OWN_KEYS: ClassVar[tuple[str, ...]] = ("topic", "flush_timeout")

    def __init__(self, name: str, topic: str, config: Mapping[str, Any], flush_timeout: float = 10.0,
                 secrets: list[str] | None = None, source: str | None = None, *, max_run: int | None = None) -> None:
        super().__init__(name, max_run=max_run)
        self.source = source or f"kafka channel {name}"
        self.topic = topic
        if str(config.get("enable.idempotence", True)).lower() in ("false", "0"):
            raise ValueError(f"kafka {name}: enable.idempotence must stay true")
        # The platform's failover keys (aldebaran.kafka.failover) under the connection's own configuration.
        self.config = {"log_level": 3, **_failover_keys(), **config, "enable.idempotence": True, "acks": "all"}
        if not self.config.get("bootstrap.servers"):
            raise ValueError(f"kafka {name}: bootstrap.servers is required")
        self.flush_timeout = flush_timeout
        self._secrets = list(secrets or [])
        self._producer = None
        self._lock = threading.Lock()

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "KafkaChannel":
        """Extras: ``topic`` and ``flush_timeout``; every other extra is librdkafka configuration, as in
        Airflow's Kafka connection. bootstrap.servers: extra, else host[:port], else ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS."""
        from aldebaran.settings import KafkaSettings, load

        topic = conn.extra_str("topic", required="the topic alerts are forwarded to")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic):
            raise conn.error("field extra.topic", "must be a valid topic name (letters, digits, . _ -)")
        config = {k: v for k, v in conn.extra.items() if k not in cls.OWN_KEYS}
        if str(config.get("enable.idempotence", True)).lower() in ("false", "0"):
            raise conn.error("field extra.enable.idempotence", "must stay true (the channel relies on the idempotent producer)")
        if not config.get("bootstrap.servers"):
            if conn.host:
                config["bootstrap.servers"] = conn.host + (f":{conn.port}" if conn.port else "")
            else:
                config["bootstrap.servers"] = load(KafkaSettings).bootstrap_servers
        return cls(name, topic, config, flush_timeout=conn.extra_seconds("flush_timeout", 10.0),
                   secrets=conn.secrets(), source=conn.source)

    def __repr__(self) -> str:
        return f"KafkaChannel(name={self.name!r}, topic={self.topic!r}, bootstrap={self.config['bootstrap.servers']!r})"

    def _get_producer(self):
        from confluent_kafka import KafkaException, Producer

        with self._lock:
            if self._producer is None:
                try:
                    self._producer = Producer(self.config)
                except (KafkaException, ValueError, TypeError) as exc:
                    raise ConfigError(f"{self.source}: field extra holds an invalid producer configuration: "
                                      f"{scrub(str(exc), self._secrets)}") from None
            return self._producer

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        return self._produce([(alert, idempotency_key)])[0].result()

    def send_many(self, alerts: Sequence[Alert]) -> list[Outcome]:
        return self._produce([(a, a.alert_id) for a in alerts]) if alerts else []

    def _produce(self, items: list[tuple[Alert, str]]) -> list[Outcome]:
        """Produce every (alert, key), flush once, and map each delivery report to an Outcome."""
        from confluent_kafka import KafkaException

        producer = self._get_producer()
        where = f"kafka {self.name} (topic {self.topic})"
        outcomes: list[Outcome | None] = [None] * len(items)
        waiting: dict[bytes, list[int]] = {}  # key → the indexes produced with it, oldest first
        topic, delivered, translate = self.topic, Outcome.delivered, self._translate

        def on_delivery(err, msg) -> None:  # served by poll()/flush() in this thread; one callback for the run
            queue = waiting[msg.key()]  # one key's messages share a partition, so they are reported in order
            i = queue.pop(0) if len(queue) > 1 else queue[0]
            if err is None:
                alert, key = items[i]
                outcomes[i] = delivered(alert.alert_id, {"topic": topic, "partition": msg.partition(),
                                                         "offset": msg.offset(), "key": key})
            else:
                if err.fatal():  # the idempotent producer cannot continue: start a fresh one next time
                    self._drop(producer)
                outcomes[i] = Outcome.failed(items[i][0].alert_id, translate(where, err))

        for i, (alert, key) in enumerate(items):
            if i and i % POLL_EVERY == 0:
                producer.poll(0)
            key_bytes = key.encode()
            waiting.setdefault(key_bytes, []).append(i)
            try:
                self._produce_one(producer, alert, key_bytes, on_delivery)
            except BufferError:  # still full after waiting: the rest goes to the next attempt
                for j in range(i, len(items)):
                    outcomes[j] = Outcome.retry(items[j][0].alert_id, f"{where}: local producer queue full")
                break
            except KafkaException as exc:
                waiting[key_bytes].pop()
                outcomes[i] = Outcome.failed(alert.alert_id, self._translate(where, exc.args[0]))
        producer.flush(self.flush_timeout)
        # Still queued: it may yet be written (the key lets consumers dedupe a resend).
        unacked = f"{where}: not acknowledged within {self.flush_timeout:g}s"
        return [o if o is not None else Outcome.unknown(items[i][0].alert_id, unacked) for i, o in enumerate(outcomes)]

    def _produce_one(self, producer, alert: Alert, key_bytes: bytes, on_delivery) -> None:
        value = alert_body(alert)
        for attempt in range(2):
            try:
                producer.produce(self.topic, key=key_bytes, value=value, headers=[("aldebaran.alert_id", key_bytes)],
                                 on_delivery=on_delivery)
                return
            except BufferError:
                if attempt:
                    raise
                producer.poll(min(1.0, self.flush_timeout))  # let delivery reports free the queue

    def _drop(self, producer) -> None:
        with self._lock:
            if self._producer is producer:
                self._producer = None

    def _translate(self, where: str, err) -> Exception:
        """A KafkaError → PermanentError (the message or the topic can never be accepted),
        OutcomeUnknown (timed out in flight: it may have been written) or RetryableError."""
        from confluent_kafka import KafkaError

        permanent = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
                     KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._INVALID_ARG}
        text = f"{where}: {scrub(err.str(), self._secrets)}"
        if err.code() in permanent:
            return PermanentError(text)
        if err.code() == KafkaError._MSG_TIMED_OUT:
            return OutcomeUnknown(text)
        return RetryableError(text)

    def close(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None and producer.flush(self.flush_timeout):
            # Still queued (the cluster unreachable): their outcome was reported unknown already. Purged, their
            # callbacks run now, so nothing keeps the producer (and its reconnect attempts) alive after close.
            producer.purge()
            producer.flush(0)
        super().close()
