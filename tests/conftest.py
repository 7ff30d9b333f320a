"""Shared fixtures: one Spark session and one set of real services per test run.

`make test` starts Kafka, MinIO and Airflow before pytest and stops them afterwards; integration
tests verify they are healthy and fail with a clear message (not a skip) when they are not.
Each test gets its own topics, object-store prefix and checkpoint directory, so tests never see
each other's data.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from aldebaran.runtime import envfile

envfile.load_env()
# An idle auditor runs one micro-batch per expiry period (30 s by default, a deployment's resting cost). A test
# that waits for a book to expire on an idle topic would wait up to that long, so the suite's auditors tick every
# 2 s; tests/integration/test_idle_expiry.py sets its own period and checks the rule itself.
os.environ.setdefault("ALDEBARAN_AUDIT_EXPIRY_PERIOD_SECONDS", "2")
# The suite's Spark drivers live a minute or two: the JIT's first tier, the serial collector and, once
# scripts/test.sh has built it, a class-data archive of Spark's classes (aldebaran_lab.spark_cds; test.sh exports
# the same for the services' tasks).
if "SPARK_SUBMIT_OPTS" not in os.environ:
    from aldebaran_lab import spark_cds

    os.environ["SPARK_SUBMIT_OPTS"] = spark_cds.submit_opts(spark_cds.archive_path())


def assert_eventually(check, timeout: float = 30.0, interval: float = 0.25, message: str = ""):
    """Retry `check` (returns truthy or raises AssertionError) until it passes or the timeout ends."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result or result is None:
                return result
        except AssertionError as exc:
            last = exc
        time.sleep(interval)
    if last:
        raise AssertionError(f"{message or 'condition'} not met after {timeout}s: {last}") from last
    raise AssertionError(f"{message or 'condition'} not met after {timeout}s")


@pytest.fixture(autouse=True)
def _airflow_connections_restored():
    """Undo the ``AIRFLOW_CONN_*`` variables a test's code set in this process. A task run with ``dag.test()``
    runs here, and a task may hand Airflow's connections to what it starts through ``os.environ`` (the replay's
    ``pre_execute``): harmless in a real task process, but here it would leak into every later test."""
    before = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW_CONN_")}
    yield
    for key in [k for k in os.environ if k.startswith("AIRFLOW_CONN_") and k not in before]:
        del os.environ[key]
    os.environ.update(before)


@pytest.fixture
def without_retries(monkeypatch):
    """For a ``dag.test()`` run whose failure is the point: the DAG's tasks get no retries for this test, so
    the run fails at once instead of waiting through each retry delay (the failure is the same each try)."""
    def strip(dag):
        for task in dag.tasks:
            monkeypatch.setattr(task, "retries", 0)
        return dag
    return strip


def pytest_collection_modifyitems(config, items):
    misplaced = []
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
        elif "services_up" in getattr(item, "fixturenames", ()):
            misplaced.append(item.nodeid)
    if misplaced:
        # `make test-unit` (tests/unit, tests/dags) runs with no services: a test that needs them lives
        # under tests/integration.
        raise pytest.UsageError("tests that need the services (fixture services_up) outside tests/integration: "
                                + ", ".join(misplaced))
    from tests import schedule

    schedule.order(items)  # the files without services first, then the integration files longest first


@pytest.fixture(scope="session")
def services_up():
    """The real services `make test` started. Fails (does not skip) if one is missing."""
    from aldebaran_lab import services

    down = [s for s in services.status(services.CORE) if not s.healthy]
    if down:
        pytest.fail(
            "services not healthy: " + ", ".join(f"{s.name} (log {s.log})" for s in down)
            + " — run the suite with `make test`, or start them with `make up`",
            pytrace=False,
        )
    return True


@pytest.fixture(scope="session")
def spark():
    """One local Spark session (local[2]) with the Kafka connector, shared by the whole run."""
    from aldebaran.runtime import spark as sparkmod

    session = sparkmod.session("aldebaran-tests", master="local[2]", shuffle_partitions=2,
                               conf={"spark.sql.adaptive.enabled": "false"})
    yield session
    session.stop()


@pytest.fixture
def alertmanager(tmp_path):
    """A real Prometheus Alertmanager (the binary `make setup` builds) of this test's own, on a free port."""
    from aldebaran_capacity.receivers.base import free_port
    from aldebaran_lab.services.alertmanager import Alertmanager

    service = Alertmanager(root=tmp_path, port=free_port())
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def unique():
    return uuid.uuid4().hex[:10]


@pytest.fixture
def kafka_topics(services_up, unique, monkeypatch):
    """Fresh trades/alerts/DLQ topics for one test, exported through the ALDEBARAN_KAFKA_* env vars."""
    from aldebaran.kafka import admin as kadmin
    from aldebaran.settings import KafkaSettings, load

    names = {
        "trades_topic": f"t-{unique}-trades",
        "alerts_topic": f"t-{unique}-alerts",
        "dlq_topic": f"t-{unique}-dlq",
        "fast_alerts_topic": f"t-{unique}-fast",  # the low-latency lane's
        "alerts_dlq_topic": f"t-{unique}-alerts-dlq",  # not created here: its first writer creates it
    }
    for field, topic in names.items():
        monkeypatch.setenv(f"ALDEBARAN_KAFKA_{field.upper()}", topic)
    settings = load(KafkaSettings)
    topics = [*settings.topics(), settings.fast_alerts_topic]
    kadmin.ensure_topics(settings, topics)
    yield settings
    kadmin.delete_topics(settings, [*topics, settings.alerts_dlq_topic])


@pytest.fixture
def store(services_up):
    from aldebaran.storage.store import open_store

    return open_store()


@pytest.fixture
def s3_prefix(store, unique):
    prefix = f"tests/{unique}"
    yield prefix
    store.delete_prefix(prefix + "/")


@pytest.fixture
def checkpoint(tmp_path) -> str:
    path = tmp_path / "checkpoint"
    path.mkdir()
    return str(path)


ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALDEBARAN_RUN_DIR", str(ROOT / ".run"))
