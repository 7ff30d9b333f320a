"""The platform pages when it is unwell: platform_health run for real with dag.test() against the real
services fails (no auditor heartbeat), and its notifier pages a real Prometheus Alertmanager (the binary
`make setup` builds, on a port of its own) straight from the DAG run's callback, not through the
platform's Kafka or dispatchers. Two failing runs are one alert (one label set, one start); a green run
(a fresh heartbeat: failure injection ends) resolves it."""

from __future__ import annotations

import json
import time

import pytest

from aldebaran.runtime import heartbeat

FINDING = "aldebaran.platform-health.auditor-progress"


@pytest.fixture
def oncall_env(kafka_topics, s3_prefix, tmp_path, monkeypatch, alertmanager):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_LOG", json.dumps({"conn_type": "log",
                                                                 "extra": {"path": str(tmp_path / "a.jsonl")}}))
    monkeypatch.setenv("ALDEBARAN_DELIVERY_PREFIX", f"{s3_prefix}/deliveries")
    monkeypatch.setenv("ALDEBARAN_HEALTH_PREFIX", f"{s3_prefix}/health")
    monkeypatch.setenv("ALDEBARAN_HEALTH_CHECK_DISPATCHERS", "false")
    monkeypatch.setenv("ALDEBARAN_LANES_ENABLED", "false")
    monkeypatch.setenv("ALDEBARAN_ONCALL_CONNECTION", "aldebaran_oncall")
    monkeypatch.setenv("ALDEBARAN_ONCALL_STATE_PREFIX", f"{s3_prefix}/oncall")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_ONCALL", json.dumps({
        "conn_type": "alertmanager", "host": alertmanager.url, "extra": {"labels": {"severity": "page"}}}))


def test_a_failing_health_pages_alertmanager_once_and_resolves_when_green(airflow_db, dagbag, oncall_env, alertmanager,
                                                                         store, s3_prefix, unique):
    dag = dagbag.dags["platform_health"]
    query = f"oncall-{unique}"
    conf = {"query_name": query, "max_progress_age_seconds": None}

    first = dag.test(run_conf=conf)
    second = dag.test(run_conf=conf)  # the next cadence, the same failure
    assert first.state == second.state == "failed"
    (held,) = alertmanager.alerts()  # one alert: the same label set both times
    assert held["status"]["state"] == "active"
    assert held["labels"] == {"alertname": "AldebaranPlatformUnhealthy", "alert_id": FINDING,
                              "kind": "PLATFORM_UNHEALTHY", "order_id": "platform:platform_health",
                              "client": "aldebaran-platform", "severity": "page"}
    assert f"auditor {query!r}: no heartbeat at" in held["annotations"]["summary"]
    state = store.get(f"{s3_prefix}/oncall/platform_health.json").json()["open"]
    assert list(state) == [FINDING] and state[FINDING]["sent"] is True
    opened = state[FINDING]["opened_at"]
    assert held["startsAt"].startswith(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(opened)))  # the first failure's

    # Failure injection ends: the auditor's heartbeat is there and fresh.
    store.put(heartbeat.key(heartbeat.AUDITOR, query), json.dumps({
        "query": query, "status": "running", "batch_id": 1, "kafka_end_offsets": [],
        "updated_at_ms": int(time.time() * 1000)}).encode())
    try:
        green = dag.test(run_conf=conf)
    finally:
        store.delete(heartbeat.key(heartbeat.AUDITOR, query))
    record = store.get(f"{s3_prefix}/health/latest.json").json()
    assert green.state == "success", record["problems"]
    assert alertmanager.alerts(alert_id=FINDING) == []  # resolved: Alertmanager no longer holds it
    assert store.get(f"{s3_prefix}/oncall/platform_health.json").json()["open"] == {}
