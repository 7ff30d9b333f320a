"""kill-triggerer's questions to the alert watcher (the alert_dispatch DAG's Kafka AssetWatcher, run by the
triggerer): does its consumer group hold the alerts topic, and did a run it woke deliver an idle kill's wave."""

from __future__ import annotations

from aldebaran.kafka import admin as kadmin
from aldebaran_lab.services.airflow import WATCHER_CONSUMER


def watcher_failures(n: int, mode: str, runs_after_restart: list[tuple[str, str]]) -> list[str]:
    """An idle kill's wave can only reach the recipients through a run the restarted watcher woke: a wave
    delivered by none, or by a scheduled run, means the watcher did not resume."""
    if mode != "idle":
        return []
    kinds = {t for _, t in runs_after_restart}
    if "asset_triggered" in kinds and "scheduled" not in kinds:
        return []
    return [f"kill {n} (idle): the wave was not delivered by runs the restarted watcher woke alone (runs queued "
            f"after the restart: {runs_after_restart or 'none'})"]


def watcher_assigned(kafka) -> bool:
    """The alert watcher's consumer group holds every partition of the alerts topic (False while the group
    does not exist yet)."""
    from confluent_kafka import KafkaException

    group = WATCHER_CONSUMER["group.id"]
    client = kadmin.admin(kafka)  # held until the answer: a dropped client never completes its futures
    try:
        desc = client.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    except (KafkaException, TimeoutError):  # no coordinator yet on a fresh broker: ask again
        return False
    held = {tp.partition for m in desc.members for tp in m.assignment.topic_partitions
            if tp.topic == kafka.alerts_topic}
    return bool(held) and len(held) == kadmin.partition_count(kafka, kafka.alerts_topic)


def watcher_committed(kafka) -> bool:
    """The alert watcher's group has committed an offset on the alerts topic (a restarted watcher resumes there)."""
    return kadmin.consumer_lag(kafka, WATCHER_CONSUMER["group.id"], kafka.alerts_topic)["committed"]
