"""platform_health run for real with dag.test() against the real services, on the failing side (the
healthy side runs in test_auditor_supervisor.py, where a live auditor exists): a missing heartbeat and
a stale one (written by the test: failure injection) fail the run, each problem named, and the health
record in MinIO says so. Unreachable Kafka is named too."""

from __future__ import annotations

import json
import time

import pytest

from aldebaran.runtime import heartbeat
from aldebaran.exceptions import PlatformUnhealthy
from aldebaran.platform import health


@pytest.fixture
def health_env(kafka_topics, s3_prefix, tmp_path, monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_LOG", json.dumps({"conn_type": "log",
                                                                 "extra": {"path": str(tmp_path / "a.jsonl")}}))
    monkeypatch.setenv("ALDEBARAN_DELIVERY_PREFIX", f"{s3_prefix}/deliveries")
    monkeypatch.setenv("ALDEBARAN_HEALTH_PREFIX", f"{s3_prefix}/health")
    # No streaming dispatcher here; the dispatcher check is tested in test_dispatch_supervisor.py.
    monkeypatch.setenv("ALDEBARAN_HEALTH_CHECK_DISPATCHERS", "false")


def test_missing_and_stale_heartbeats_fail_the_run_naming_the_problem(airflow_db, dagbag, health_env, store,
                                                                      s3_prefix, unique):
    dag = dagbag.dags["platform_health"]
    ghost = f"ghost-{unique}"
    run = dag.test(run_conf={"query_name": ghost, "max_progress_age_seconds": None})
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"check": "success", "verdict": "failed"}
    record = store.get(f"{s3_prefix}/health/latest.json").json()
    assert record["healthy"] is False and record["checks"]["kafka"]["ok"] and record["checks"]["object_store"]["ok"]
    assert record["problems"] == [
        f"auditor {ghost!r}: no heartbeat at s3://{store.bucket}/heartbeats/auditor/{ghost}.json — is it running? "
        "(the auditor_supervisor DAG starts it)"]
    kept = store.get(record["record_uri"].split(f"s3://{store.bucket}/", 1)[1]).json()
    assert kept["run_id"] == run.run_id and kept["problems"] == record["problems"]

    stale = f"stale-{unique}"
    fake_heartbeat = {"query": stale, "status": "running", "batch_id": 41, "kafka_end_offsets": [],
                      "updated_at_ms": int((time.time() - 600) * 1000)}  # failure injection: 10 min old
    store.put(heartbeat.key(heartbeat.AUDITOR, stale), json.dumps(fake_heartbeat).encode())
    try:
        run = dag.test(run_conf={"query_name": stale, "max_progress_age_seconds": 120})
    finally:
        store.delete(heartbeat.key(heartbeat.AUDITOR, stale))
    assert run.state == "failed"
    problems = store.get(f"{s3_prefix}/health/latest.json").json()["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"auditor {stale!r}: last progress 6")
    assert "(limit 120s, ALDEBARAN_HEALTH_MAX_PROGRESS_AGE_SECONDS)" in problems[0]


def test_unreachable_kafka_is_named(health_env, monkeypatch, unique):
    monkeypatch.setenv("ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    record = health.check(f"test-{unique}", query_name=f"ghost-{unique}", overrides={"timeout_seconds": 2})
    assert record["healthy"] is False
    assert record["problems"][0].startswith("Kafka 127.0.0.1:1 unreachable")
    with pytest.raises(PlatformUnhealthy, match="platform unhealthy — 2 problem"):
        health.raise_if_unhealthy(record)


def test_a_high_misrouted_share_warns_and_keeps_the_verdict_green(airflow_db, dagbag, health_env, spark, checkpoint,
                                                                  store, s3_prefix, kafka_topics, unique):
    """The producer keying contract, checked: a plain confluent-kafka producer (CRC32) against a checkpoint
    pinned to murmur2 — a real auditor run misroutes about half the events, and platform_health, run for real,
    warns naming the share, the partitioner and the setting, while its verdict stays green (misrouted events are
    audited correctly, one batch later). The auditor streams on the shared session meanwhile."""
    import threading

    from confluent_kafka import Producer

    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.audit.sparkjob import job
    from aldebaran.settings import load
    from aldebaran_capacity import loadgen

    recs = list(loadgen.records(loadgen.original_mix(200, 12)))
    producer = Producer({"bootstrap.servers": kafka_topics.bootstrap_servers})  # what a user writes
    for r in recs:
        producer.produce(kafka_topics.trades_topic, key=r.key, value=r.value)
    assert producer.flush(30) == 0
    name = f"keying-{unique}"
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="processing-time", trigger_interval="1 second",
                    timeout_seconds=240, query_name=name, archive_prefix=f"{s3_prefix}/archive",
                    plan="copartitioned", partitioner="murmur2")
    auditor = threading.Thread(target=job.run, args=(settings,), kwargs={"spark": spark}, daemon=True)
    auditor.start()
    try:
        deadline = time.monotonic() + 180
        while True:  # the live auditor's heartbeat, with its books' misrouted share
            beat = heartbeat.read(store, heartbeat.AUDITOR, name) or {}
            if beat.get("status") == "running" and (beat.get("books") or {}).get("misrouted_share_recent"):
                break
            assert time.monotonic() < deadline, f"no running heartbeat with books: {beat}"
            time.sleep(1)
        run = dagbag.dags["platform_health"].test(run_conf={"query_name": name, "max_progress_age_seconds": None})
    finally:
        for query in spark.streams.active:
            if query.name == name:
                query.stop()
        auditor.join(60)
        store.delete(heartbeat.key(heartbeat.AUDITOR, name))
    record = store.get(f"{s3_prefix}/health/latest.json").json()
    assert run.state == "success", record["problems"]
    keying = record["checks"]["keying"]
    assert keying["partitioner"] == "murmur2" and 0.2 < keying["misrouted_share_recent"] < 0.8
    assert [w for w in record["warnings"] if "ALDEBARAN_HEALTH_MAX_MISROUTED_SHARE" in w and "murmur2" in w]
