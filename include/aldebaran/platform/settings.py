"""Settings of the platform DAGs (supervisors, health, replay). Each field names its env var; the DAGs'
Params override them per run (a Param left empty means: use the setting)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aldebaran.settings import BackoffMax, StaleAfter, StartTimeout, StatePrefix, SupervisionSettings
from aldebaran.storage.store import safe_segment


class SupervisorSettings(SupervisionSettings):
    """The auditor's supervisor (the auditor_supervisor DAG)."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_SUPERVISOR_", extra="ignore")

    stale_after_seconds: StaleAfter = 120.0
    backoff_max_seconds: BackoffMax = 900.0
    state_prefix: StatePrefix = "supervisor/auditor"
    page_after_restarts: int = Field(
        3, ge=1, description="ALDEBARAN_SUPERVISOR_PAGE_AFTER_RESTARTS: page the alert channels after this many restarts"
    )
    standby: bool = Field(
        False,
        description="ALDEBARAN_SUPERVISOR_STANDBY: keep a warm standby auditor (`--standby true`) next to the supervised "
                    "one; an unhealthy auditor is then stopped and the standby takes over instead of a cold restart "
                    "(client deploy mode only: the standby runs on the supervisor's host)",
    )
    nice: int = Field(
        0, ge=0, le=19,
        description="ALDEBARAN_SUPERVISOR_NICE: the auditor's CPU priority on its host (client deploy mode): its "
                    "spark-submit, JVM, Python workers and shard hosts start at this nice level, so that on a shared "
                    "box the fast lane, Kafka and the dispatchers are served first when the cores are all busy "
                    "(measured: docs/benchmarks.md, the deployed path beside the lane); 0: no change",
    )


class DispatchSupervisorSettings(SupervisionSettings):
    """The streaming dispatchers' supervisor (the dispatch_supervisor DAG).

    A dispatcher's heartbeat comes from a thread of its own every ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS, however
    busy its channels are, so a stale one means frozen or dead; a slow channel is judged by its progress."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_DISPATCH_SUPERVISOR_", extra="ignore")

    start_timeout_seconds: StartTimeout = 60.0
    state_prefix: StatePrefix = "supervisor/dispatcher"
    progress_limit_seconds: float = Field(
        120.0, gt=0,
        description="ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS: a channel with work pending (alerts "
                    "read, not settled) whose settled offsets and settled deliveries have not moved for this long "
                    "= restart; a slow channel that progresses is never restarted",
    )
    groups: dict[str, list[str]] | None = Field(
        None,
        description="ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS: JSON {dispatcher name: [channel, ...]} to run several "
                    "channels in one dispatcher; a configured channel in no group gets its own, named after it",
    )

    @field_validator("groups")
    @classmethod
    def _one_group_per_channel(cls, groups: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        seen: dict[str, str] = {}
        for name, channels in (groups or {}).items():
            safe_segment(name, "dispatcher name")  # it names the heartbeat and state objects
            if not channels:
                raise ValueError(f"group {name!r} has no channel")
            for channel in channels:
                if channel in seen:
                    raise ValueError(f"channel {channel!r} is in groups {seen[channel]!r} and {name!r}")
                seen[channel] = name
        return groups


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
    check_dispatchers: bool = Field(
        True,
        description="ALDEBARAN_HEALTH_CHECK_DISPATCHERS: check the streaming dispatchers' heartbeats (off where "
                    "only the alert_dispatch DAG delivers)",
    )
    max_dispatcher_heartbeat_age_seconds: float = Field(
        60.0, gt=0,
        description="ALDEBARAN_HEALTH_MAX_DISPATCHER_HEARTBEAT_AGE_SECONDS: oldest acceptable streaming dispatcher "
                    "heartbeat",
    )
    max_misrouted_share: float = Field(
        0.10, ge=0, le=1,
        description="ALDEBARAN_HEALTH_MAX_MISROUTED_SHARE: warn when more than this share of the auditor's recent "
                    "events reached a partition that does not own their order (producers not keyed by order id, or "
                    "partitioned by another function than the checkpoint's); correct, but one batch slower")
    prefix: str = Field("health/platform", min_length=1, description="ALDEBARAN_HEALTH_PREFIX: where health records go")
    timeout_seconds: float = Field(5.0, gt=0, description="ALDEBARAN_HEALTH_TIMEOUT_SECONDS: per reachability probe")


class OnCallSettings(BaseSettings):
    """The platform DAGs' on-call page (aldebaran.platform.oncall): where it goes, what it remembers."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_ONCALL_", extra="ignore")

    connection: str | None = Field(
        None,
        description="ALDEBARAN_ONCALL_CONNECTION: Airflow connection id of the on-call target the platform DAGs "
                    "page on failure and resolve on recovery (conn_type alertmanager, pagerduty, opsgenie, "
                    "http (webhook) or smtp (email)); unset: nobody is paged")
    state_prefix: str = Field(
        "oncall", min_length=1,
        description="ALDEBARAN_ONCALL_STATE_PREFIX: where each DAG's open findings are kept (object store)")
    hold_seconds: float = Field(
        1800.0, ge=60,
        description="ALDEBARAN_ONCALL_HOLD_SECONDS: how long Alertmanager keeps a page firing after its last post "
                    "(endsAt); longer than the DAGs' cadence, so a failure every 5 minutes stays one alert")


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
