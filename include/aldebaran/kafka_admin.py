"""Kafka administration: topics, offsets and consumer lag (confluent-kafka AdminClient)."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from aldebaran.exceptions import AldebaranError
from aldebaran.settings import KafkaSettings


def admin(settings: KafkaSettings) -> AdminClient:
    return AdminClient({"bootstrap.servers": settings.bootstrap_servers})


def ensure_topics(settings: KafkaSettings, topics: list[str] | None = None, partitions: int | None = None) -> list[str]:
    """Create missing topics; returns the ones created. Existing topics are left as they are."""
    client = admin(settings)
    wanted = topics or settings.topics()
    existing = set(client.list_topics(timeout=10).topics)
    new = [
        NewTopic(
            t,
            num_partitions=partitions or settings.partitions,
            replication_factor=1,
            config={"max.message.bytes": str(settings.max_message_bytes)},
        )
        for t in wanted
        if t not in existing
    ]
    if not new:
        return []
    for topic, fut in client.create_topics(new, operation_timeout=30).items():
        try:
            fut.result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise AldebaranError(f"could not create topic {topic}: {exc}") from exc
    return [t.topic for t in new]


def delete_topics(settings: KafkaSettings, topics: list[str]) -> None:
    client = admin(settings)
    existing = set(client.list_topics(timeout=10).topics)
    doomed = [t for t in topics if t in existing]
    if doomed:
        for _, fut in client.delete_topics(doomed, operation_timeout=30).items():
            fut.result()


def partition_count(settings: KafkaSettings, topic: str) -> int:
    meta = admin(settings).list_topics(topic, timeout=10)
    t = meta.topics.get(topic)
    if t is None or t.error is not None:
        raise AldebaranError(f"topic {topic} does not exist on {settings.bootstrap_servers}")
    return len(t.partitions)
