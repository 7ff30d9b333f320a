"""Kafka administration: topics, offsets and consumer lag (confluent-kafka AdminClient), configured
from the platform's Kafka connection (:mod:`aldebaran.kafka.conn`). A cluster that cannot be reached
or refuses the connection's credentials raises an error naming the connection."""

from __future__ import annotations

import contextlib
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from aldebaran.exceptions import AldebaranError
from aldebaran.kafka import failover
from aldebaran.kafka.conn import resolve
from aldebaran.settings import KafkaSettings

OPERATION_REQUEST_TIMEOUT = 35.0  # seconds: the topic operations' 30 s on the broker, and the round trip


def admin(settings: KafkaSettings, **extra) -> AdminClient:
    return AdminClient({**failover.librdkafka("admin"), **resolve(settings).client_config(), **extra})


def list_topics(settings: KafkaSettings, topic: str | None = None, timeout: float = 10, client=None):
    """The cluster's metadata (of `topic` only, if given); an error naming the connection if the
    cluster cannot be reached or refuses its credentials."""
    try:
        return (client or admin(settings)).list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise resolve(settings).failure("listing topics", exc) from None


def ensure_topics(settings: KafkaSettings, topics: list[str] | None = None, partitions: int | None = None,
                  client=None, listed_timeout: float = 30.0) -> list[str]:
    """Create missing topics; returns the ones created, once the cluster's metadata lists them (a broker's
    metadata can lag the controller's answer, and a client that asks at once is told the topic does not
    exist). Existing topics are left as they are."""
    client = client or admin(settings)
    wanted = topics or settings.topics()
    existing = set(list_topics(settings, client=client).topics)
    new = [
        NewTopic(
            t,
            num_partitions=partitions or settings.partitions,
            replication_factor=settings.replication_factor,
            config={"max.message.bytes": str(
                settings.dlq_record_bytes if t in (settings.dlq_topic, settings.alerts_dlq_topic)
                else settings.max_message_bytes)},
        )
        for t in wanted
        if t not in existing
    ]
    if not new:
        return []
    # The request may take the whole operation timeout on the broker, longer than a request's own timeout.
    for topic, fut in client.create_topics(new, operation_timeout=30, request_timeout=OPERATION_REQUEST_TIMEOUT).items():
        try:
            fut.result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise AldebaranError(f"could not create topic {topic}: {exc}") from exc
    created = [t.topic for t in new]
    deadline = time.monotonic() + listed_timeout
    while missing := _unlisted(list_topics(settings, client=client), created):
        if time.monotonic() > deadline:
            raise AldebaranError(f"topics {', '.join(missing)} created on {resolve(settings).describe()} but not "
                                 f"listed in its metadata after {listed_timeout:.0f}s")
        time.sleep(0.1)
    return created


def _unlisted(meta, topics: list[str]) -> list[str]:
    """The `topics` the metadata does not list yet, or lists with an error or no partitions."""
    return [t for t in topics if (m := meta.topics.get(t)) is None or m.error is not None or not m.partitions]


def delete_topics(settings: KafkaSettings, topics: list[str]) -> None:
    client = admin(settings)
    existing = set(list_topics(settings, client=client).topics)
    doomed = [t for t in topics if t in existing]
    if doomed:
        for _, fut in client.delete_topics(doomed, operation_timeout=30, request_timeout=OPERATION_REQUEST_TIMEOUT).items():
            fut.result()


def partition_count(settings: KafkaSettings, topic: str) -> int:
    meta = list_topics(settings, topic)
    t = meta.topics.get(topic)
    if t is None or t.error is not None:
        raise AldebaranError(f"topic {topic} does not exist on {resolve(settings).describe()}")
    return len(t.partitions)


def consumer_lag(settings: KafkaSettings, group: str, topic: str) -> dict:
    """Committed offsets vs log end per partition of `topic` for consumer `group`.

    Returns {"lag": total, "partitions": {p: lag}, "committed": bool}; a group that never committed
    lags by the whole retained log.
    """
    from confluent_kafka import TopicPartition

    with _group_client(settings, group, topic) as (c, partitions):
        committed = c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        out, any_committed = {}, False
        for tp in committed:
            low, high = c.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            if tp.offset >= 0:
                any_committed = True
                out[tp.partition] = max(0, high - tp.offset)
            else:
                out[tp.partition] = max(0, high - low)
        return {"lag": sum(out.values()), "partitions": out, "committed": any_committed}


def commit_at_end(settings: KafkaSettings, group: str, topic: str) -> dict[int, int]:
    """Commit `group`'s offsets at the log end of every partition of `topic`: a consumer group that is new to
    the topic then reads only what comes next (a channel added for a test or a bench, not the topic's history).
    Returns {partition: offset committed}."""
    from confluent_kafka import TopicPartition

    with _group_client(settings, group, topic) as (c, partitions):
        ends = [TopicPartition(topic, p, c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1])
                for p in partitions]
        c.commit(offsets=ends, asynchronous=False)
        return {tp.partition: tp.offset for tp in ends}


@contextlib.contextmanager
def _group_client(settings: KafkaSettings, group: str, topic: str):
    """A consumer of `group` that never commits by itself, and `topic`'s partitions (AldebaranError: no such
    topic); closed on exit."""
    from confluent_kafka import Consumer

    cluster = resolve(settings)
    c = Consumer({**failover.librdkafka("consumer"), **cluster.client_config(), "group.id": group,
                  "enable.auto.commit": False, "log_level": 3})
    try:
        meta = list_topics(settings, topic, client=c).topics.get(topic)
        if meta is None or meta.error is not None:
            raise AldebaranError(f"topic {topic} not found on {cluster.describe()}")
        yield c, list(meta.partitions)
    finally:
        c.close()

