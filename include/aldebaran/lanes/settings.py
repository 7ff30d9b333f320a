"""Settings of the low-latency lane: its query, its reconciliation and its supervision (``ALDEBARAN_LANES_*``)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from aldebaran.settings import StatePrefix, SupervisionSettings
from aldebaran.storage.store import safe_segment

_INTERVAL = re.compile(r"^\s*(\d+)\s*(second|seconds|minute|minutes)\s*$")


class LaneSettings(SupervisionSettings):
    """The low-latency lane: its query, its reconciliation, and how the lane_supervisor DAG keeps its keeper.

    The keeper beats from its loop every ALDEBARAN_LANES_HEARTBEAT_SECONDS: the supervision defaults fit."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_LANES_", extra="ignore")

    enabled: bool = Field(
        False,
        description="ALDEBARAN_LANES_ENABLED: the low-latency lane is part of this platform: platform_health checks "
                    "it (the lane_supervisor DAG runs it once unpaused)",
    )
    name: str = Field("realtime", description="ALDEBARAN_LANES_NAME: the lane's name (its heartbeat, state, records)")
    fast_channels: str | None = Field(
        None,
        description="ALDEBARAN_LANES_FAST_CHANNELS: the channels with \"fast\": true, comma-separated (empty: none), "
                    "as lane_supervisor names them to the keeper, which retracts only where a channel had the fast "
                    "alerts; unset: read from ALDEBARAN_CHANNELS and the channels' connections",
    )
    checkpoint: str | None = Field(
        None,
        description="ALDEBARAN_LANES_CHECKPOINT: the lane query's checkpoint (unset: <run dir>/lanes/<name>/checkpoint); "
                    "losing it only re-reads from ALDEBARAN_LANES_STARTING_OFFSETS, the exact lane delivers the rest",
    )
    checkpoint_interval: str = Field(
        "5 minutes",
        description="ALDEBARAN_LANES_CHECKPOINT_INTERVAL: real-time trigger duration, how often the lane commits "
                    "(≥ 5 seconds; each boundary is a stall of up to seconds)",
    )
    starting_offsets: str = Field(
        "latest", pattern=r"^(earliest|latest)$",
        description="ALDEBARAN_LANES_STARTING_OFFSETS: where a lane with a new checkpoint starts reading trades",
    )
    gap_starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest",
        description="ALDEBARAN_LANES_GAP_STARTING_OFFSETS: where the lane starts again when the trades its checkpoint "
                    "would resume from are gone (the topic recreated, or retention deleted them before the lane "
                    "read them): earliest = the first trade still there, latest = only new trades. The old "
                    "checkpoint is moved under <checkpoint>/abandoned/ and the gap logged, counted and shown by "
                    "`aldebaran lanes status` (aldebaran.lanes.gap)",
    )
    master: str = Field(
        "local[4]", min_length=1,
        description="ALDEBARAN_LANES_MASTER: the lane's Spark master; it needs a slot per Kafka partition plus one per "
                    "stateful operator (real-time mode runs them all at once)",
    )
    driver_memory: str = Field("1g", description="ALDEBARAN_LANES_DRIVER_MEMORY: spark-submit --driver-memory")
    rotate_seconds: float = Field(
        21600.0, ge=0,
        description="ALDEBARAN_LANES_ROTATE_SECONDS: start the lane on a fresh checkpoint (from the latest trades) "
                    "this long after it started, which bounds its state (it never expires books); 0 = never. Each "
                    "rotation overlaps the old generation with the new one (ALDEBARAN_LANES_ROTATION_OVERLAP_SECONDS); "
                    "orders open across it are left to the exact lane",
    )
    rotation_overlap_seconds: float = Field(
        15.0, ge=0,
        description="ALDEBARAN_LANES_ROTATION_OVERLAP_SECONDS: a rotation starts the new generation before it stops "
                    "the old one, and stops the old one this long after the new one's first batch has started (its "
                    "tasks reading), so that no second goes without fast alerts; the alerts both raise meanwhile "
                    "have the same ids (the ledger and the reconciler count them once)",
    )
    confirm_ttl_seconds: float = Field(
        300.0, gt=0,
        description="ALDEBARAN_LANES_CONFIRM_TTL_SECONDS: how long the exact lane has to raise a fast-lane alert "
                    "before it is reported unconfirmed (more than the exact lane's latency plus a restart)",
    )
    heartbeat_seconds: float = Field(
        5.0, gt=0, description="ALDEBARAN_LANES_HEARTBEAT_SECONDS: how often the lane keeper writes its heartbeat"
    )
    query_stale_seconds: float = Field(
        60.0, gt=0,
        description="ALDEBARAN_LANES_QUERY_STALE_SECONDS: the lane's driver reports every 2 s; silent this long "
                    "(after it started) = hung, the keeper stops it and exits failed",
    )
    state_prefix: StatePrefix = "supervisor/lane"
    records_prefix: str = Field(
        "lanes", min_length=1,
        description="ALDEBARAN_LANES_RECORDS_PREFIX: object-store prefix of the reconciliation's status and its "
                    "unconfirmed-alert records (<prefix>/<name>/...)",
    )

    @field_validator("name")
    @classmethod
    def _segment(cls, value: str) -> str:
        return safe_segment(value, "lane name")

    @field_validator("checkpoint_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        m = _INTERVAL.match(value)
        if not m:
            raise ValueError("expected '<n> seconds' or '<n> minutes'")
        seconds = int(m.group(1)) * (60 if m.group(2).startswith("minute") else 1)
        if seconds < 5:
            raise ValueError("real-time mode's checkpoint interval is at least 5 seconds")
        return value.strip()
