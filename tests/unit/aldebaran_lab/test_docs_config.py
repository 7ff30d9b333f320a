"""`aldebaran docs config`: the configuration reference generated from the settings models.

The expected rows are written out by hand from include/aldebaran/settings.py, audit/settings.py and
platform/settings.py, never taken from the generator's own output.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from aldebaran.cli import main as cli
from aldebaran_lab import docsgen


class _FakeSettings(BaseSettings):
    """A settings class with every kind of secret the generator must hide."""

    model_config = SettingsConfigDict(env_prefix="FAKE_", extra="ignore")

    token: SecretStr = SecretStr("hunter2-default-token")
    api_secret: SecretStr = Field(description="required, no default")
    password: str = Field("plain-text-default", description="typed str but named like a secret")
    legacy: int = Field(5, ge=1, alias="OLD_LEGACY_NAME", description="read under its alias")
    mode: str = Field("fast", description="FAKE_MODE: fast or slow")


def test_every_settings_class_of_the_package_is_found():
    assert docsgen.settings_class_names() == [
        ("aldebaran.settings", "KafkaSettings"),
        ("aldebaran.settings", "ObjectStoreSettings"),
        ("aldebaran.settings", "PathSettings"),
        ("aldebaran.settings", "LogSettings"),
        ("aldebaran.settings", "SparkSettings"),
        ("aldebaran.audit.settings", "AuditorSettings"),
        ("aldebaran.delivery.settings", "DeliverySettings"),
        ("aldebaran.delivery.settings", "ChannelSettings"),
        ("aldebaran.delivery.settings", "WatcherSettings"),
        ("aldebaran.lanes.settings", "LaneSettings"),
        ("aldebaran.platform.settings", "SupervisorSettings"),
        ("aldebaran.platform.settings", "DispatchSupervisorSettings"),
        ("aldebaran.platform.settings", "HealthSettings"),
        ("aldebaran.platform.settings", "OnCallSettings"),
        ("aldebaran.platform.settings", "ReplaySettings"),
        ("aldebaran.runtime.metrics", "MetricsSettings"),
    ]


def test_reference_names_the_real_env_vars_with_types_and_defaults():
    text = docsgen.render()
    for row in [
        "| `ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS` | deployment | str (not empty) | `127.0.0.1:9092` | host:port[,host:port] |",
        "| `ALDEBARAN_KAFKA_PARTITIONS` | tuning | int (≥ 1, ≤ 1024) | `2` | partitions of new topics |",
        "| `ALDEBARAN_S3_ENDPOINT_URL` | deployment | str | `http://127.0.0.1:9000` | "
        "MinIO/S3 endpoint; empty for AWS S3's regional endpoint |",
        "| `ALDEBARAN_AUDIT_CHECKPOINT` | tuning | str (not empty) | `s3a://aldebaran/checkpoints/auditor` | "
        "checkpoint location: a local path or s3a://bucket/prefix (state and offsets) |",
        "| `ALDEBARAN_AUDIT_TRIGGER` | test-only | `processing-time` or `available-now` | `processing-time` | "
        "processing-time: run forever; available-now: drain what is there, stop |",
        "| `ALDEBARAN_AUDIT_ENDING_OFFSETS` | test-only | str | unset | Kafka endingOffsets (bounded runs only) |",
        "| `ALDEBARAN_AUDIT_IDLE_TICKS` | tuning | bool | `true` | "
        "union an expiry clock (one row per expiry_period_seconds) so an idle topic still runs a batch, and expires "
        "books, at that cadence |",
        "| `ALDEBARAN_AUDIT_EXPIRY_PERIOD_SECONDS` | tuning | float (≥ 0.5, ≤ 3600) | `30.0` | on an idle topic, one micro-batch "
        "per this many seconds (it expires the books that are due; with traffic every batch expires them): an idle "
        "book expires at most this late |",
        "| `ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS` | tuning | float (> 0) | `120.0` | "
        "a heartbeat older than this = restart (platform_health: unhealthy): the process is frozen or dead |",
        "| `ALDEBARAN_DISPATCH_SUPERVISOR_START_TIMEOUT_SECONDS` | tuning | float (> 0) | `60.0` | "
        "a (re)started process must report that it runs within this, else the start failed |",
        "| `ALDEBARAN_LANES_BACKOFF_MAX_SECONDS` | tuning | float (≥ 0) | `600.0` | the backoff doubles per restart up to this |",
        "| `ALDEBARAN_HEALTH_MAX_IN_DOUBT` | tuning | int (≥ 0) | `0` | IN_DOUBT delivery records tolerated per channel |",
        "| `ALDEBARAN_REPLAY_ARCHIVE_PREFIX` | tuning | str (not empty) | `archive/replays` | replays' alert archive |",
        "| `ALDEBARAN_RUN_DIR` | tuning | Path | unset | service data, logs, PID files (unset: `<work tree>/.run`) |",
        "| `ALDEBARAN_SPARK_LOG_LEVEL` | tuning | `ALL` or `TRACE` or `DEBUG` or `INFO` or `WARN` or `ERROR` or `FATAL` or "
        "`OFF` | `WARN` | Spark driver log level |",
        "| `ALDEBARAN_SPARK_UI` | tuning | bool | `false` | start the Spark web UI |",
    ]:
        assert row in text.splitlines(), row


def test_secrets_show_no_value():
    text = docsgen.render()
    assert "| `ALDEBARAN_S3_ACCESS_KEY` | tuning | SecretStr | (secret, optional) | " \
           "empty to use the AWS default credential chain |" in text.splitlines()
    assert "| `ALDEBARAN_S3_SECRET_KEY` | tuning | SecretStr | (secret, optional) | set with ALDEBARAN_S3_ACCESS_KEY, or both empty |" \
        in text.splitlines()

    fake = docsgen.render_class(_FakeSettings)
    lines = fake.splitlines()
    assert "hunter2" not in fake and "plain-text-default" not in fake
    assert "| `FAKE_TOKEN` | tuning | SecretStr | (secret, optional) |  |" in lines
    assert "| `FAKE_API_SECRET` | tuning | SecretStr | (secret, required) | required, no default |" in lines
    assert "| `FAKE_PASSWORD` | tuning | str | (secret, optional) | typed str but named like a secret |" in lines
    # An alias is the variable itself (no prefix); a description repeating the variable is not repeated.
    assert "| `OLD_LEGACY_NAME` | tuning | int (≥ 1) | `5` | read under its alias |" in lines
    assert "| `FAKE_MODE` | tuning | str | `fast` | fast or slow |" in lines


def test_committed_operations_md_is_current():
    assert cli.main(["docs", "config", "--check"]) == 0


def test_check_fails_on_a_stale_section_and_rewrite_fixes_only_the_section(tmp_path):
    doc = tmp_path / "ops.md"
    stale = f"# Ops\n\nbefore\n\n{docsgen.BEGIN}\n| `ALDEBARAN_OLD` | str | `x` | gone |\n{docsgen.END}\n\nafter\n"
    doc.write_text(stale)
    assert cli.main(["docs", "config", "--check", "--file", str(doc)]) == 1
    assert doc.read_text() == stale  # --check writes nothing

    assert cli.main(["docs", "config", "--file", str(doc)]) == 0
    text = doc.read_text()
    assert "ALDEBARAN_OLD" not in text and "`ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS`" in text
    assert text.startswith(f"# Ops\n\nbefore\n\n{docsgen.BEGIN}\n") and text.endswith(f"\n{docsgen.END}\n\nafter\n")
    assert cli.main(["docs", "config", "--check", "--file", str(doc)]) == 0


def test_a_document_without_markers_is_an_error(tmp_path):
    doc = tmp_path / "ops.md"
    doc.write_text("# Ops\n")
    assert cli.main(["docs", "config", "--file", str(doc)]) == 2
    assert doc.read_text() == "# Ops\n"
