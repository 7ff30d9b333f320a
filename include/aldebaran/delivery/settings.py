"""Settings of alert delivery (ledger and dispatchers). Each field names its env var; an invalid value
fails at start naming it (aldebaran.settings.load)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class DeliverySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_DELIVERY_", extra="ignore")

    prefix: str = Field(
        "deliveries", pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,200}$",
        description="ALDEBARAN_DELIVERY_PREFIX: object-store prefix of the delivery ledger",
    )
    store: str | None = Field(
        None,
        description="ALDEBARAN_DELIVERY_STORE: where the ledger lives: empty = the S3/MinIO bucket "
                    "(ALDEBARAN_S3_*), or a local directory (file:///path) for tests and demos",
    )
    group: str = Field(
        "aldebaran-dispatcher", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$",
        description="ALDEBARAN_DELIVERY_GROUP: Kafka consumer-group prefix; channel <name> consumes as <group>-<name>",
    )
    lease_seconds: float = Field(
        60.0, gt=0, le=3600,
        description="ALDEBARAN_DELIVERY_LEASE_SECONDS: a claimed per-alert delivery (or a run) is its owner's for "
                    "this long; then it is rescued (or IN_DOUBT on a channel that cannot deduplicate)",
    )
    max_attempts: int = Field(5, ge=1, le=100, description="ALDEBARAN_DELIVERY_MAX_ATTEMPTS: RETRY until DEAD")
    backoff_base_seconds: float = Field(
        2.0, gt=0, description="ALDEBARAN_DELIVERY_BACKOFF_BASE_SECONDS: first retry delay; doubles per attempt"
    )
    backoff_max_seconds: float = Field(300.0, gt=0, description="ALDEBARAN_DELIVERY_BACKOFF_MAX_SECONDS: retry delay cap")
    run_max: int = Field(
        5000, ge=1, le=100_000,
        description="ALDEBARAN_DELIVERY_RUN_MAX: most alerts one ledger run holds, on every channel (a channel may "
                    "set its own lower max_run: one send window on a channel that can neither deduplicate nor look up)",
    )
    dedupe_window_offsets: int = Field(
        200_000, ge=0,
        description="ALDEBARAN_DELIVERY_DEDUPE_WINDOW_OFFSETS: on taking a partition, a dispatcher reads the runs "
                    "of the last this-many offsets to recognise repeated alert ids; older repeats are dropped by "
                    "a deduplicating recipient (alert id), the log channel's own sent-log, or an SMS alert's "
                    "sent marker in the ledger",
    )
    # The default by measurement (docs/benchmarks.md, "Dispatch", fast_markers against fast_log): the claim log
    # writes once per run, markers once per alert, and drains two orders of magnitude more alerts a second.
    cross_lane: Literal["markers", "log"] = Field(
        "log",
        description="ALDEBARAN_DELIVERY_CROSS_LANE: where a fast channel's two lanes meet: per partition one claim "
                    "log both lanes' runs append to with If-Match (log: one write per run; needs the alerts and fast "
                    "topics partitioned alike, checked at start), or a sent marker per alert (markers: one write per "
                    "alert); channels where a resend is not harmless (SMS, push) keep their markers either way",
    )
    claim_log_window: int = Field(
        20_000, ge=100,
        description="ALDEBARAN_DELIVERY_CLAIM_LOG_WINDOW: alert ids a partition's claim log keeps (cross_lane=log): "
                    "the other lane's copy is recognised within that many alerts",
    )
    concurrency: int = Field(
        64, ge=1, le=1024, description="ALDEBARAN_DELIVERY_CONCURRENCY: sends in flight per channel"
    )
    poll_max: int = Field(
        20_000, ge=1, description="ALDEBARAN_DELIVERY_POLL_MAX: most alerts read from Kafka per poll"
    )
    sweep_seconds: float = Field(
        5.0, gt=0, description="ALDEBARAN_DELIVERY_SWEEP_SECONDS: how often due retries and doubts are swept"
    )
    lookup_grace_seconds: float = Field(
        30.0, ge=0,
        description="ALDEBARAN_DELIVERY_LOOKUP_GRACE_SECONDS: an IN_DOUBT delivery on a channel with a provider "
                    "lookup is asked about after this long (providers' message logs lag a little)",
    )
    heartbeat_seconds: float = Field(
        5.0, gt=0, description="ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS: a streaming dispatcher's heartbeat period"
    )
    # 6 s, the broker's default floor (group.min.session.timeout.ms): `aldebaran chaos dispatch-failover` measured
    # kill → the survivor delivers the dead one's partitions at 6, 10 and 20 s; a process frozen longer than this
    # is expelled (a false failover, fenced by the owner epochs). docs/reliability.md § dispatcher failover.
    session_timeout_ms: int = Field(
        6_000, ge=1000, le=300_000,
        description="ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS: Kafka consumer session; a dead dispatcher's partitions "
                    "move to a live one after about this long (at least the broker's group.min.session.timeout.ms; "
                    "a dispatcher frozen longer loses its partitions)",
    )
    assignment_strategy: Literal["cooperative-sticky", "range,roundrobin", "range", "roundrobin"] = Field(
        "cooperative-sticky",
        description="ALDEBARAN_DELIVERY_ASSIGNMENT_STRATEGY: partition.assignment.strategy of the dispatchers' "
                    "consumer groups: cooperative-sticky moves only the partitions that change owner, so a "
                    "survivor keeps delivering its own through a handover; the eager ones revoke every partition "
                    "of every member. All members of a group must agree (aldebaran.kafka.failover)",
    )
    max_poll_interval_ms: int = Field(
        300_000, ge=1_000, le=86_400_000,
        description="ALDEBARAN_DELIVERY_MAX_POLL_INTERVAL_MS: a dispatcher that does not poll for this long leaves "
                    "its consumer group, and a rebalance waits at most this long for a member (at least "
                    "ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS)",
    )
    # Chosen by measurement (docs/reliability.md § dispatcher restart handover): a restarted member with the
    # old one's group.instance.id takes its partitions back without a rebalance, so neither a killed
    # predecessor's session nor a busy member of the same group (which rejoins only when it polls) holds it up.
    static_membership: bool = Field(
        True,
        description="ALDEBARAN_DELIVERY_STATIC_MEMBERSHIP: a streaming dispatcher (`dispatch --follow`) joins each "
                    "channel's consumer group as a static member, group.instance.id <group>@<host>/<dispatcher name>, "
                    "so its restart owns its partitions at once; one dispatcher per name per host (a second one "
                    "with the same name fences the first). `dispatch` (one pass, alert_dispatch) stays dynamic",
    )
    idle_seconds: float = Field(
        5.0, gt=0, description="ALDEBARAN_DELIVERY_IDLE_SECONDS: `dispatch` (one pass) returns after this long idle"
    )

    @field_validator("max_poll_interval_ms")
    @classmethod
    def _at_least_the_session(cls, value: int, info: ValidationInfo) -> int:
        session = info.data.get("session_timeout_ms")
        if session is not None and value < session:  # librdkafka refuses it too, later and less clearly
            raise ValueError(f"must be at least ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS ({session})")
        return value


class ChannelSettings(BaseSettings):
    """Which channels every alert goes to, and what their connections fall back on (delivery/channels/).

    A channel's own connection is an Airflow connection (``aldebaran_<name>``), not a setting."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_", extra="ignore", env_ignore_empty=True)

    channels: str = Field(
        "log",
        description="ALDEBARAN_CHANNELS: comma list of the channels every alert goes to; inside Airflow's tasks the "
                    "Airflow Variable aldebaran_channels wins when it exists",
    )
    webhook_secret: SecretStr | None = Field(
        None, description="ALDEBARAN_WEBHOOK_SECRET: HMAC signing secret of a webhook connection without a password",
    )
    log_channel_path: Path | None = Field(
        None, description="ALDEBARAN_LOG_CHANNEL_PATH: file of the `log` channel (JSON lines); default "
                          "<run dir>/alerts.log.jsonl (alerts.<name>.log.jsonl for another log channel)",
    )


class WatcherSettings(BaseSettings):
    """The alert_dispatch DAG's AssetWatcher (it runs in Airflow's triggerer)."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_DISPATCH_", extra="ignore")

    wakeup_seconds: float = Field(
        5.0, gt=0, le=3600,
        description="ALDEBARAN_DISPATCH_WAKEUP_SECONDS: at most one DAG wake-up per this many seconds, however "
                    "many alerts arrive")
    sweep_cron: str = Field(
        "*/5 * * * *", pattern=r"^\s*(@[a-z]+|\S+(\s+\S+){4})\s*$",
        description="ALDEBARAN_DISPATCH_SWEEP_CRON: alert_dispatch's periodic sweep beside the watcher (UTC cron, "
                    "5 fields or an @preset; read when the DAG is parsed): expired leases, due retries, alerts the "
                    "watcher did not wake it for")
