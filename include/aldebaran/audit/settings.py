"""Auditor settings: every option has an env var (ALDEBARAN_AUDIT_*) and a CLI flag (--option-name)."""

from __future__ import annotations

import argparse
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aldebaran.audit import parse as events


class AuditorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_AUDIT_", extra="ignore")

    checkpoint: str = Field(
        "s3a://aldebaran/checkpoints/auditor",
        min_length=1,
        description="checkpoint location: a local path or s3a://bucket/prefix (state and offsets)",
    )
    rules: str = Field("overfill", description="comma-separated audit rules (overfill, mismatch)")
    starting_offsets: str = Field("earliest", description="Kafka startingOffsets for a new checkpoint")
    ending_offsets: str | None = Field(None, description="Kafka endingOffsets (bounded runs only)")
    max_offsets_per_trigger: int | None = Field(200_000, ge=1, description="Kafka maxOffsetsPerTrigger")
    fail_on_data_loss: bool = Field(False, description="Kafka failOnDataLoss")
    trigger: Literal["processing-time", "available-now"] = Field(
        "processing-time", description="processing-time: run forever; available-now: drain what is there, stop"
    )
    expire_at_end: bool = Field(
        False, description="available-now only: once the input is drained, expire every open book (ORPHANs of "
        "books still open at the end); the checkpoint is then finished and cannot be resumed")
    trigger_interval: str = Field("0 seconds", description="micro-batch interval for processing-time")
    shards: int = Field(2, ge=1, le=4096, description="book shards (state partitions) of the shuffle plan; the "
                        "co-partitioned plan has one per partition of the trades topic")
    plan: Literal["auto", "copartitioned", "shuffle"] = Field(
        "auto", description="copartitioned: one shard per trades partition, no shuffle, parsed in Python, books in "
        "one process per shard (producers key by order id); shuffle: parsed in the JVM, repartitioned by order id "
        "(any keying: the fallback for unkeyed topics); auto: copartitioned if a sample of the topic keeps the "
        "keying contract (an existing checkpoint keeps its plan)")
    partitioner: Literal["auto", "crc32", "murmur2", "fnv1a"] = Field(
        "auto", description="co-partitioned plan: the partitioner the trades' producers use, which decides the shard "
        "that owns an order — crc32: librdkafka/confluent-kafka's default (consistent_random); murmur2: the Java "
        "client's default (librdkafka murmur2_random); fnv1a: librdkafka fnv1a_random; auto: detected from the "
        "topic's events and recorded with the books (an existing checkpoint keeps its own)")
    ttl_seconds: float = Field(600.0, gt=0, description="a book expires this long after its first event")
    idle_grace_seconds: float = Field(
        60.0, ge=0, description="idle-stream fallback: also expire ttl+grace after a book was opened (processing time)"
    )
    idle_ticks: bool = Field(
        True, description="union an expiry clock (one row per expiry_period_seconds) so an idle topic still runs a "
        "batch, and expires books, at that cadence")
    expiry_period_seconds: float = Field(
        30.0, ge=0.5, le=3600, description="on an idle topic, one micro-batch per this many seconds (it expires "
        "the books that are due; with traffic every batch expires them): an idle book expires at most this late")
    idle_poll_ms: int = Field(
        250, ge=10, le=10_000, description="how often an idle query asks its sources for new data "
        "(spark.sql.streaming.pollingDelay; Spark's 10 ms asks Kafka 100 times a second): at most this much is "
        "added to the first trade after a quiet spell, nothing under load")
    snapshot_every: int = Field(20, ge=1, description="full state snapshot at most every N batches")
    snapshot_delta_ratio: float = Field(
        1.0, ge=0, description="a snapshot only once the deltas written since the last one reach this × its size "
        "(amortises the O(open books) snapshot over the books touched; 0: every snapshot_every batches)"
    )
    shard_host_idle_seconds: float = Field(
        600.0, gt=0, description="co-partitioned plan: a shard's host process stops after this long without a batch "
        "(it also stops with its executor, and when the auditor stops)")
    max_message_bytes: int = Field(events.MAX_MESSAGE_BYTES, ge=64, description="larger messages go to the DLQ")
    max_id_length: int = Field(events.MAX_ID_LENGTH, ge=1, description="longer ids go to the DLQ")
    max_shares: int = Field(events.MAX_SHARES, ge=1, description="larger #shares go to the DLQ")
    archive_prefix: str = Field("archive/alerts", description="object-store prefix of the alert archive")
    master: str = Field("local[2]", description="Spark master when run outside spark-submit")
    query_name: str = Field("auditor", pattern=r"^[A-Za-z0-9_-]+$", description="streaming query name")
    timeout_seconds: float | None = Field(None, gt=0, description="stop after this long (tests, demos)")
    lease_seconds: float = Field(
        30.0, ge=0, description="checkpoint lease ttl in the object store (renewed every ttl/3); 0 disables the lease"
    )
    lease_wait_seconds: float = Field(
        0.0, ge=0, description="at start, wait this long for another auditor's lease on the checkpoint to end"
    )
    standby: bool = Field(
        False, description="a warm standby: start the Spark session, then wait (without limit) for the checkpoint's "
        "lease while prefetching the books every standby_refresh_seconds; take over when the active auditor's "
        "lease ends (at once when it died on this host)")
    standby_refresh_seconds: float = Field(
        5.0, gt=0, description="a standby's book prefetch period (the lease is looked at every 0.25 s)")

    @field_validator("rules")
    @classmethod
    def _rules(cls, value: str) -> str:
        names = [n.strip() for n in value.split(",") if n.strip()]
        if not names:
            raise ValueError("at least one rule is required")
        return ",".join(names)

    @model_validator(mode="after")
    def _expire_at_end(self) -> "AuditorSettings":
        if self.expire_at_end and self.trigger != "available-now":
            raise ValueError("ALDEBARAN_AUDIT_EXPIRE_AT_END needs ALDEBARAN_AUDIT_TRIGGER=available-now: a streaming "
                             "auditor never reaches the end of its input")
        return self

    @model_validator(mode="after")
    def _standby(self) -> "AuditorSettings":
        if self.standby and not self.lease_seconds:
            raise ValueError("ALDEBARAN_AUDIT_STANDBY waits on the checkpoint lease: ALDEBARAN_AUDIT_LEASE_SECONDS "
                             "must not be 0")
        return self

    def rule_names(self) -> list[str]:
        return self.rules.split(",")

    def uses_s3a(self) -> bool:
        return self.checkpoint.startswith("s3a://")


def add_cli_flags(parser: argparse.ArgumentParser) -> None:
    for name, field in AuditorSettings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        env = f"ALDEBARAN_AUDIT_{name.upper()}"
        help_text = f"{field.description} [env {env}; default {field.default}]"
        parser.add_argument(flag, dest=name, default=None, help=help_text)
