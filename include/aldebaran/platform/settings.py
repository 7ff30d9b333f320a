"""Settings of the platform DAGs (supervisor, health, replay). Each field names its env var; the DAGs'
Params override them per run (a Param left empty means: use the setting)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SupervisorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_SUPERVISOR_", extra="ignore")

    stale_after_seconds: float = Field(
        120.0, gt=0, description="ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS: no heartbeat for this long = unhealthy"
    )
    start_timeout_seconds: float = Field(
        180.0, gt=0,
        description="ALDEBARAN_SUPERVISOR_START_TIMEOUT_SECONDS: a (re)submitted auditor must report 'started' within this",
    )
    backoff_base_seconds: float = Field(
        30.0, ge=0, description="ALDEBARAN_SUPERVISOR_BACKOFF_BASE_SECONDS: wait before the 2nd restart of an incident"
    )
    backoff_max_seconds: float = Field(
        900.0, ge=0, description="ALDEBARAN_SUPERVISOR_BACKOFF_MAX_SECONDS: the backoff doubles per restart up to this"
    )
    stable_after_seconds: float = Field(
        300.0, gt=0,
        description="ALDEBARAN_SUPERVISOR_STABLE_AFTER_SECONDS: healthy this long after a restart closes the incident",
    )
    page_after_restarts: int = Field(
        3, ge=1, description="ALDEBARAN_SUPERVISOR_PAGE_AFTER_RESTARTS: page the alert channels after this many restarts"
    )
    stop_timeout_seconds: float = Field(
        30.0, gt=0, description="ALDEBARAN_SUPERVISOR_STOP_TIMEOUT_SECONDS: SIGINT, then SIGKILL after this"
    )
    state_prefix: str = Field(
        "supervisor/auditor", min_length=1, description="ALDEBARAN_SUPERVISOR_STATE_PREFIX: object-store prefix"
    )


class HealthSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_HEALTH_", extra="ignore")

    max_progress_age_seconds: float = Field(
        180.0, gt=0, description="ALDEBARAN_HEALTH_MAX_PROGRESS_AGE_SECONDS: oldest acceptable auditor heartbeat"
    )
    max_auditor_lag: int = Field(
        1_000_000, ge=0, description="ALDEBARAN_HEALTH_MAX_AUDITOR_LAG: trades on the topic the auditor has not read"
    )
    max_dispatch_backlog: int = Field(
        10_000, ge=0, description="ALDEBARAN_HEALTH_MAX_DISPATCH_BACKLOG: alerts a channel's dispatcher has not settled"
    )
    max_dead: int = Field(0, ge=0, description="ALDEBARAN_HEALTH_MAX_DEAD: DEAD delivery records tolerated per channel")
    max_in_doubt: int = Field(
        0, ge=0, description="ALDEBARAN_HEALTH_MAX_IN_DOUBT: IN_DOUBT delivery records tolerated per channel"
    )
    prefix: str = Field("health/platform", min_length=1, description="ALDEBARAN_HEALTH_PREFIX: where health records go")
    timeout_seconds: float = Field(5.0, gt=0, description="ALDEBARAN_HEALTH_TIMEOUT_SECONDS: per reachability probe")


class ReplaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_REPLAY_", extra="ignore")

    checkpoint_root: str | None = Field(
        None,
        description="ALDEBARAN_REPLAY_CHECKPOINT_ROOT: where replays' fresh checkpoints go "
                    "(default: next to the auditor's checkpoint, under replays/)",
    )
    archive_prefix: str = Field(
        "archive/replays", min_length=1, description="ALDEBARAN_REPLAY_ARCHIVE_PREFIX: replays' alert archive"
    )
