"""The local Airflow's environment (aldebaran_lab.services.airflow): the alert watcher's Kafka connection,
derived from the platform's, gives a killed triggerer's partitions up within seconds
(docs/reliability.md § Triggerer and the asset watcher)."""

from __future__ import annotations

import json

import pytest

from aldebaran.settings import KafkaSettings

SECRET = "s3cr3t-pa\"ss\\word"


@pytest.fixture
def clean(monkeypatch):
    for var in ("AIRFLOW_CONN_ALDEBARAN_KAFKA", "AIRFLOW_CONN_OTHER_KAFKA", "ALDEBARAN_KAFKA_CONNECTION",
                "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_the_alert_watchers_connection_is_derived_from_the_kafka_connection(clean):
    from aldebaran_lab.services.airflow import connections_env

    clean.delenv("AIRFLOW_CONN_KAFKA_ALERTS_WATCHER", raising=False)
    clean.setenv("AIRFLOW_CONN_ALDEBARAN_KAFKA", json.dumps({"conn_type": "kafka", "login": "u", "password": SECRET, "extra": {
        "bootstrap.servers": "sec:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}}))
    watcher = json.loads(connections_env(KafkaSettings(), spark_master="local[1]")["AIRFLOW_CONN_KAFKA_ALERTS_WATCHER"])
    assert watcher == {"conn_type": "kafka", "extra": {
        "bootstrap.servers": "sec:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u", "sasl.password": SECRET, "group.id": "aldebaran-alert-watcher",
        "auto.offset.reset": "latest", "enable.auto.commit": False, "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 2000}}


def test_the_watchers_consumer_gives_a_killed_triggerers_partitions_up_within_ten_seconds(monkeypatch):
    from aldebaran_lab.services.airflow import connections_env

    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_ALERTS_WATCHER", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_KAFKA", raising=False)
    extra = json.loads(connections_env(KafkaSettings(), spark_master="local[1]")["AIRFLOW_CONN_KAFKA_ALERTS_WATCHER"])[
        "extra"]
    # librdkafka's default session is 45 s; the broker's group.min.session.timeout.ms is 6 s.
    assert 6000 <= extra["session.timeout.ms"] <= 10000
    assert extra["heartbeat.interval.ms"] * 3 <= extra["session.timeout.ms"]
    assert extra["group.id"] == "aldebaran-alert-watcher" and extra["enable.auto.commit"] is False


def test_every_airflow_the_platform_writes_moves_a_dead_triggerers_watcher_after_15_seconds(tmp_path):
    import yaml

    from aldebaran.runtime import paths
    from aldebaran_lab.services.airflow import TRIGGERER_HEALTH_CHECK_THRESHOLD

    assert TRIGGERER_HEALTH_CHECK_THRESHOLD == "15"
    compose = yaml.safe_load((paths.ROOT / "docker-compose.yml").read_text())
    envs = [svc.get("environment") or {} for name, svc in compose["services"].items() if name.startswith("airflow")]
    assert envs and all(e.get("AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD") == "15" for e in envs)
    watcher = json.loads(envs[0]["AIRFLOW_CONN_KAFKA_ALERTS_WATCHER"])["extra"]
    assert (watcher["session.timeout.ms"], watcher["heartbeat.interval.ms"]) == (10000, 2000)
    assert '"session.timeout.ms": 10000' in (paths.ROOT / ".env.example").read_text()
