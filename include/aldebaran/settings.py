"""Typed settings shared by every part of the platform.

Each field is read from an environment variable named in its description (pydantic-settings; the
git-ignored .env is loaded first by :func:`aldebaran.runtime.envfile.load_env`). A missing or invalid
setting fails at start with :class:`ConfigError` naming the variable, never later in the hot path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aldebaran.exceptions import ConfigError

S = TypeVar("S", bound=BaseSettings)

TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"


# Room for the reason/origin headers a DLQ record adds to the original bytes.
DLQ_HEADER_HEADROOM = 64 * 1024

# --- tiers of the configuration -------------------------------------------------------------------
# What a deployment must know: where Kafka and S3 are, the topics, the channels, who is paged. The
# first block of .env.example; the rest of it is OFTEN_TUNED. Every other setting stays out of
# .env.example and is in the generated reference (docs/operations.md) with its scope: tuning unless
# named in TEST_ONLY (tests, demos and bounded runs set it). tests/unit/deploy/test_compose.py keeps
# these names, .env.example and the reference in step.
DEPLOYMENT = (
    "ALDEBARAN_KAFKA_CONNECTION", "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "ALDEBARAN_KAFKA_REPLICATION_FACTOR",
    "ALDEBARAN_KAFKA_TRADES_TOPIC", "ALDEBARAN_KAFKA_ALERTS_TOPIC", "ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC",
    "ALDEBARAN_KAFKA_DLQ_TOPIC", "ALDEBARAN_KAFKA_ALERTS_DLQ_TOPIC", "ALDEBARAN_S3_CONNECTION",
    "ALDEBARAN_S3_ENDPOINT_URL", "ALDEBARAN_S3_BUCKET", "ALDEBARAN_S3_REGION", "ALDEBARAN_SPARK_MASTER",
    "ALDEBARAN_CHANNELS", "ALDEBARAN_ONCALL_CONNECTION",
)
OFTEN_TUNED = (
    "ALDEBARAN_KAFKA_PARTITIONS", "ALDEBARAN_AUDIT_TTL_SECONDS", "ALDEBARAN_AUDIT_TRIGGER_INTERVAL",
    "ALDEBARAN_AUDIT_MAX_OFFSETS_PER_TRIGGER", "ALDEBARAN_AUDIT_SHARDS", "ALDEBARAN_DELIVERY_MAX_ATTEMPTS",
    "ALDEBARAN_DELIVERY_CONCURRENCY", "ALDEBARAN_LANES_ENABLED", "ALDEBARAN_LANES_MASTER",
    "ALDEBARAN_LANES_CONFIRM_TTL_SECONDS", "ALDEBARAN_SUPERVISOR_NICE", "ALDEBARAN_SPARK_RUNTIME_ARCHIVE",
    "ALDEBARAN_LOG_FORMAT", "ALDEBARAN_RUN_DIR",
)
TEST_ONLY = (
    "ALDEBARAN_AUDIT_ENDING_OFFSETS", "ALDEBARAN_AUDIT_TRIGGER", "ALDEBARAN_AUDIT_EXPIRE_AT_END",
    "ALDEBARAN_AUDIT_TIMEOUT_SECONDS", "ALDEBARAN_DELIVERY_STORE",
)


def scope(env_var: str) -> str:
    """deployment, tuning or test-only: where a setting belongs (the tiers above)."""
    if env_var in DEPLOYMENT:
        return "deployment"
    return "test-only" if env_var in TEST_ONLY else "tuning"


class KafkaSettings(BaseSettings):
    """The Kafka cluster and the platform's topics."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_KAFKA_", extra="ignore")

    bootstrap_servers: str = Field(
        "127.0.0.1:9092", min_length=1, description="ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS: host:port[,host:port]"
    )
    connection: str = Field(
        "aldebaran_kafka", pattern=r"^[A-Za-z][A-Za-z0-9_]{0,249}$",
        description="ALDEBARAN_KAFKA_CONNECTION: id of the Airflow connection (conn_type kafka, extra = "
                    "librdkafka configuration) every Kafka client and Spark's Kafka source/sink use; outside "
                    "Airflow AIRFLOW_CONN_<ID>; undefined: plaintext clients of ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS, "
                    "which also gives the brokers of a connection naming none (aldebaran.kafka.conn)",
    )
    partitions: int = Field(2, ge=1, le=1024, description="ALDEBARAN_KAFKA_PARTITIONS: partitions of new topics")
    replication_factor: int = Field(
        1, ge=1, le=32,
        description="ALDEBARAN_KAFKA_REPLICATION_FACTOR: replicas of each topic Aldebaran creates (HA profile: 3, "
                    "with the brokers' min.insync.replicas 2; producers are idempotent, so acks=all)",
    )
    trades_topic: str = Field("trades", pattern=TOPIC_PATTERN, description="ALDEBARAN_KAFKA_TRADES_TOPIC: input trades (PR and P events as JSON)")
    alerts_topic: str = Field("alerts", pattern=TOPIC_PATTERN, description="ALDEBARAN_KAFKA_ALERTS_TOPIC: alerts out (key = alert_id)")
    fast_alerts_topic: str = Field(
        "alerts.fast", pattern=TOPIC_PATTERN,
        description="ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC: the low-latency lane's alerts (key = alert_id); the "
                    "dispatchers do not read it: an alert is delivered once the exact lane raises it",
    )
    dlq_topic: str = Field("trades.dlq", pattern=TOPIC_PATTERN, description="ALDEBARAN_KAFKA_DLQ_TOPIC: rejected input with reason, partition and offset")
    alerts_dlq_topic: str = Field(
        "alerts.dlq", pattern=TOPIC_PATTERN,
        description="ALDEBARAN_KAFKA_ALERTS_DLQ_TOPIC: messages of the alerts topics a consumer rejected (not an "
                    "alert, too large, too deep): the original bytes, the reason, topic, partition, offset and the "
                    "rejecting consumer in headers; created by its first writer if missing",
    )
    max_message_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="ALDEBARAN_KAFKA_MAX_MESSAGE_BYTES: largest message the topics take"
    )
    # The cluster this object's clients reach, resolved once from the connection (aldebaran.kafka.conn.resolve)
    # and pickled with it: Spark's executors write the DLQ and alerts with the driver's resolution, whatever
    # their own environment holds.
    _cluster: object = PrivateAttr(default=None)

    def topics(self) -> list[str]:
        return [self.trades_topic, self.alerts_topic, self.dlq_topic]

    @property
    def dlq_record_bytes(self) -> int:
        """Largest DLQ record (trades.dlq, alerts.dlq): a rejected message of the largest size the topics take,
        plus its reason and origin headers. The DLQ topics, the broker and the DLQ producer all allow this much."""
        return self.max_message_bytes + DLQ_HEADER_HEADROOM


class ObjectStoreSettings(BaseSettings):
    """S3 or MinIO: checkpoints, the alert archive, heartbeats and delivery records. The Airflow connection
    ALDEBARAN_S3_CONNECTION, where it is defined, replaces every setting here but the bucket."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_S3_", extra="ignore")

    endpoint_url: str | None = Field(
        "http://127.0.0.1:9000",
        description="ALDEBARAN_S3_ENDPOINT_URL: MinIO/S3 endpoint; empty for AWS S3's regional endpoint",
    )
    bucket: str = Field(
        "aldebaran", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", description="ALDEBARAN_S3_BUCKET: checkpoints, alert archive, heartbeats, leases, delivery records"
    )
    region: str = Field("us-east-1", min_length=1, description="ALDEBARAN_S3_REGION: signing region (any value for MinIO)")
    access_key: SecretStr | None = Field(
        None, description="ALDEBARAN_S3_ACCESS_KEY: empty to use the AWS default credential chain"
    )
    secret_key: SecretStr | None = Field(None, description="ALDEBARAN_S3_SECRET_KEY: set with ALDEBARAN_S3_ACCESS_KEY, or both empty")
    session_token: SecretStr | None = Field(
        None, description="ALDEBARAN_S3_SESSION_TOKEN: with temporary credentials (STS); empty otherwise"
    )
    role_arn: str | None = Field(
        None, description="ALDEBARAN_S3_ROLE_ARN: an IAM role to assume (STS AssumeRole) with the keys above or the "
                          "AWS default credential chain; empty: none"
    )
    connection: str = Field(
        "aldebaran_s3", pattern=r"^([A-Za-z0-9_.-]{1,250})?$",
        description="ALDEBARAN_S3_CONNECTION: the Airflow AWS connection to reach the object store with (e.g. "
                    "aws_default): inside an Airflow task as Airflow resolves it, outside Airflow "
                    "AIRFLOW_CONN_<ID>; where it is not defined, the ALDEBARAN_S3_* settings (not the bucket: "
                    "ALDEBARAN_S3_BUCKET always). Empty: ALDEBARAN_S3_* only (aldebaran.storage.s3access)",
    )

    def endpoint(self) -> str | None:
        return self.endpoint_url or None


class PathSettings(BaseSettings):
    """Where this machine keeps local data: the run directory, the download cache, the env file."""

    # Empty = the default: an empty path would mean the current directory.
    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_", extra="ignore", env_ignore_empty=True)

    run_dir: Path | None = Field(
        None, description="ALDEBARAN_RUN_DIR: service data, logs, PID files (unset: `<work tree>/.run`)"
    )
    cache: Path | None = Field(
        None, description="ALDEBARAN_CACHE: download/build cache `make setup` fills, shared by every clone "
                          "on the machine (unset: `~/.cache/aldebaran`)"
    )
    env_file: Path | None = Field(
        None, description="ALDEBARAN_ENV_FILE: the git-ignored env file with generated credentials "
                          "(unset: `<work tree>/.env`)"
    )


class LogSettings(BaseSettings):
    """The platform's own log lines (aldebaran.runtime.logs): every process, every line an ISO-8601 UTC time."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_LOG_", extra="ignore")

    format: Literal["text", "json"] = Field(
        "text",
        description="ALDEBARAN_LOG_FORMAT: text (one classic line) or json (one JSON object per line: time, "
                    "level, logger, message, role, and channel, partition, alert_id where known)",
    )

    @field_validator("format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


SparkLogLevel = Literal["ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"]


class SparkSettings(BaseSettings):
    """The Spark sessions this package builds (the auditor under spark-submit, tests, benchmarks)."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_SPARK_", extra="ignore")

    master: str = Field(
        "local[2]", min_length=1,
        description="ALDEBARAN_SPARK_MASTER: master of a session built outside spark-submit (under "
                    "spark-submit, --master decides)",
    )
    log_level: SparkLogLevel = Field("WARN", description="ALDEBARAN_SPARK_LOG_LEVEL: Spark driver log level")
    ui: bool = Field(False, description="ALDEBARAN_SPARK_UI: start the Spark web UI")
    runtime_archive: Path | None = Field(
        None,
        description="ALDEBARAN_SPARK_RUNTIME_ARCHIVE: the packed runtime `make dist` builds "
                    "(dist/aldebaran-runtime-py<X.Y>.tar.gz); with a cluster master, Spark ships it to the "
                    "workers (spark.archives <it>#env) and runs the executors' Python from it "
                    "(./env/bin/python), so the workers need no aldebaran installed. Unset: the workers' "
                    "own Python; ignored with a local master",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("runtime_archive")
    @classmethod
    def _archive_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value} (`make dist` builds it)")
        return value


# One meaning, one constraint: a supervision setting that a class gives another default keeps both.
StaleAfter = Annotated[float, Field(gt=0, description=(
    "a heartbeat older than this = restart (platform_health: unhealthy): the process is frozen or dead"))]
StartTimeout = Annotated[float, Field(gt=0, description=(
    "a (re)started process must report that it runs within this, else the start failed"))]
BackoffMax = Annotated[float, Field(ge=0, description="the backoff doubles per restart up to this")]
StatePrefix = Annotated[str, Field(min_length=1, description=(
    "object-store prefix of the supervisor's state (<prefix>/<name>.json)"))]


class SupervisionSettings(BaseSettings):
    """How a supervisor judges and restarts the process it keeps (the auditor, a dispatcher, the lane
    keeper): when its heartbeat is stale, how long a start may take, how restarts back off within one
    incident, when the incident closes, how long a stop may take. Each supervisor's settings extend this
    with their own env prefix (``ALDEBARAN_SUPERVISOR_``, ``ALDEBARAN_DISPATCH_SUPERVISOR_``,
    ``ALDEBARAN_LANES_``), and set their own defaults where the process needs others."""

    model_config = SettingsConfigDict(extra="ignore")

    stale_after_seconds: StaleAfter = 30.0
    start_timeout_seconds: StartTimeout = 180.0
    backoff_base_seconds: float = Field(30.0, ge=0, description="wait before the 2nd restart of an incident")
    backoff_max_seconds: BackoffMax = 600.0
    stable_after_seconds: float = Field(
        300.0, gt=0, description="healthy this long after a restart closes the incident (and resets the backoff)")
    stop_timeout_seconds: float = Field(
        30.0, gt=0, description="how long a process being replaced may take to stop before it is killed")
    state_prefix: StatePrefix


def env_var_of(cls: type[BaseSettings], field: str) -> str:
    prefix = cls.model_config.get("env_prefix", "") or ""
    return f"{prefix}{field}".upper()


def load(cls: type[S], **overrides) -> S:
    """Instantiate settings, translating validation errors into one ConfigError naming each variable."""
    try:
        return cls(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            value = err.get("input")
            shown = "" if "secret" in field or "password" in field else f" (got {value!r})"
            problems.append(f"{env_var_of(cls, field)}: {err['msg']}{shown}")
        raise ConfigError("invalid settings: " + "; ".join(problems)) from None
