"""auditor_supervisor run for real with dag.test(): the supervisor starts the auditor (spark-submit,
local[2]) on real Kafka and MinIO; the test SIGKILLs its driver mid-stream; the next supervisor run
detects it and restarts the auditor on the same checkpoint; the auditor resumes from it, and the
alerts — on the topic and in the archive — are exactly the independent reference model's, none lost,
none duplicated in the archive. While it runs: a second auditor on its checkpoint is refused (lease),
a third supervisor run leaves the healthy auditor alone, and platform_health passes.

The kill/restart figures are logged (`supervisor figures: ...`) and appended to
.run/figures/auditor_supervisor.jsonl; they are not asserted (no timed assertions in tests): see
docs/airflow.md."""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import pytest

from aldebaran.audit import reference
from aldebaran.runtime import paths
from aldebaran.runtime import lease as leases
from aldebaran.runtime import heartbeat
from aldebaran.audit.archive import Archive
from aldebaran.exceptions import LeaseHeld
from aldebaran.kafka import io as kio
from aldebaran.platform import supervisor
from aldebaran.platform.health_checks import _offsets
from aldebaran.platform.settings import SupervisorSettings
from aldebaran_capacity import loadgen
from tests.conftest import assert_eventually

log = logging.getLogger(__name__)


def _processed_all(store, query, kafka):
    ends = kio.end_offsets(kafka, kafka.trades_topic)
    hb = heartbeat.read(store, heartbeat.AUDITOR, query) or {}
    done = _offsets(hb.get("kafka_end_offsets"), kafka.trades_topic) or {}
    assert hb.get("status") in ("running", "idle") and all(done.get(p, 0) >= e for p, e in ends.items()), (done, ends)
    return True


def _ti_state(run, task_id: str) -> str:
    return next(ti.state for ti in run.get_task_instances() if ti.task_id == task_id)


@pytest.fixture
def supervised(kafka_topics, store, s3_prefix, tmp_path, monkeypatch, unique):
    query = f"sup-{unique}"
    checkpoint = str(tmp_path / "checkpoint")
    env = {
        "ALDEBARAN_AUDIT_QUERY_NAME": query,
        "ALDEBARAN_AUDIT_CHECKPOINT": checkpoint,
        "ALDEBARAN_AUDIT_ARCHIVE_PREFIX": f"{s3_prefix}/archive",
        "ALDEBARAN_AUDIT_MAX_OFFSETS_PER_TRIGGER": "200",  # a backlog spans batches: the kill lands mid-stream
        "ALDEBARAN_SUPERVISOR_STATE_PREFIX": f"{s3_prefix}/supervisor",
        # The first start counts as restart 1 of an incident that closes only after STABLE_AFTER_SECONDS of
        # observed health; a kill sooner than BACKOFF_BASE_SECONDS after that start would (rightly) be
        # backed off. This test is about detection and restart; backoff is unit-tested (test_supervisor_decisions).
        "ALDEBARAN_SUPERVISOR_BACKOFF_BASE_SECONDS": "1",
        # If this test process dies before its teardown, the detached auditor still stops by itself.
        "ALDEBARAN_AUDIT_TIMEOUT_SECONDS": "900",
        "ALDEBARAN_CHANNELS": "log",
        "AIRFLOW_CONN_ALDEBARAN_LOG": json.dumps({"conn_type": "log", "extra": {"path": str(tmp_path / "pages.jsonl")}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        "ALDEBARAN_HEALTH_PREFIX": f"{s3_prefix}/health",
        "ALDEBARAN_HEALTH_CHECK_DISPATCHERS": "false",  # no streaming dispatcher in this test
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]",
                                                  "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"}}),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield query, checkpoint
    stopped = supervisor.stop_local(store, query, checkpoint, 30, reason="test finished")
    log.info("auditor stopped at teardown: %s", stopped)
    store.delete(leases.lease_key(checkpoint))
    store.delete(heartbeat.key(heartbeat.AUDITOR, query))


def test_supervisor_restarts_a_killed_auditor_which_resumes_from_its_checkpoint(
        airflow_db, dagbag, supervised, kafka_topics, store, s3_prefix, unique):
    query, checkpoint = supervised
    produce = kio.producer(kafka_topics)
    parts = [list(loadgen.records(loadgen.original_mix(n, seed))) for n, seed in ((60, 1), (80, 2), (20, 3))]
    kio.produce_all(produce, kafka_topics.trades_topic, [(r.key, r.value) for r in parts[0]])
    dag = dagbag.dags["auditor_supervisor"]
    state_key = supervisor.state_key(SupervisorSettings(), query)

    # 1. First run: nothing is running → the supervisor submits the auditor and waits for it to start.
    first = dag.test()
    assert first.state == "success"
    assert _ti_state(first, "submit_auditor") == "success"
    state = store.get(state_key).json()
    driver = state["submit"]["pid"]
    assert supervisor.pid_alive(driver)
    assert_eventually(lambda: sum((_offsets((heartbeat.read(store, heartbeat.AUDITOR, query) or {}).get("kafka_end_offsets"),
                                            kafka_topics.trades_topic) or {}).values()),
                      timeout=240, message="auditor progress (a first batch of trades committed)")

    # Never two auditors on one checkpoint.
    with pytest.raises(LeaseHeld, match=f"query {query}"):
        leases.acquire(store, checkpoint, "intruder", ttl_seconds=30)

    # 2. More trades, and the driver is SIGKILLed while it works through them.
    kio.produce_all(produce, kafka_topics.trades_topic, [(r.key, r.value) for r in parts[1]])
    killed_at = time.time()
    os.kill(driver, signal.SIGKILL)

    # 3. The next run detects it and restarts the auditor on the same checkpoint.
    second = dag.test()
    assert second.state == "success"
    assert _ti_state(second, "submit_auditor") == "success"
    state = store.get(state_key).json()
    assessment = state["last_assessment"]
    assert assessment["action"] == "restart"
    assert any("is gone" in p for p in assessment["problems"]), assessment["problems"]
    assert state["submit"]["pid"] != driver and supervisor.pid_alive(state["submit"]["pid"])
    restarted = state["restarts"][-1]
    first_progress = None

    def resumed():
        nonlocal first_progress
        hb = heartbeat.read(store, heartbeat.AUDITOR, query) or {}
        assert hb.get("status") == "running" and hb.get("updated_at_ms", 0) / 1000 > restarted["started_at"]
        first_progress = first_progress or hb["updated_at_ms"] / 1000
        return True

    assert_eventually(resumed, timeout=120, interval=0.2, message="progress after the restart")
    kio.produce_all(produce, kafka_topics.trades_topic, [(r.key, r.value) for r in parts[2]])
    assert_eventually(lambda: _processed_all(store, query, kafka_topics), timeout=180, message="all trades audited")

    # 4. Healthy now: a third run leaves it alone; platform_health agrees.
    third = dag.test()
    assert third.state == "success"
    assert _ti_state(third, "submit_auditor") == "skipped"
    assert store.get(state_key).json()["submit"]["pid"] == state["submit"]["pid"]
    # Every Param given: dag.test() on the session's shared DAG object keeps an earlier run's conf.
    health = dagbag.dags["platform_health"].test(run_conf={
        "query_name": query, "max_progress_age_seconds": None, "max_auditor_lag": None,
        "max_dispatch_backlog": None, "max_dead": None, "max_in_doubt": None})
    assert health.state == "success"
    record = store.get(f"{s3_prefix}/health/latest.json").json()
    assert record["healthy"] and record["checks"]["auditor_lag"]["lag"] == 0, record

    # 5. No alert lost, none duplicated: the archive is exactly the reference; the topic (at-least-once)
    #    holds exactly the reference's alert ids.
    trades = [(m.value(), m.timestamp()[1]) for m in kio.read_topic(kafka_topics, kafka_topics.trades_topic)]
    assert len(trades) == sum(len(p) for p in parts)
    expected = sorted(reference.key(a) for a in reference.expected_alerts(trades))
    assert expected, "the mix produces overfills"
    archived = [json.loads(line) for line in Archive(store, f"{s3_prefix}/archive", query).read_all()]
    assert sorted(reference.key(a) for a in archived) == expected
    on_topic = [json.loads(m.value()) for m in kio.read_topic(kafka_topics, kafka_topics.alerts_topic)]
    assert sorted({reference.key(a) for a in on_topic}) == expected
    duplicates = len(on_topic) - len({a["alert_id"] for a in on_topic})

    figures = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # the run started right after the kill; on its schedule add up to one minute
        "detect_seconds": round(assessment["observed_at"] - killed_at, 1),
        "restart_to_started_seconds": round(restarted["started_at"] - restarted["submitted_at"], 1),
        "kill_to_first_progress_seconds": round(first_progress - killed_at, 1),
        "trades": len(trades), "alerts_expected": len(expected), "alerts_archived": len(archived),
        "alerts_lost": 0, "alerts_duplicated_in_archive": 0,
        "alerts_repeated_on_topic": duplicates,  # at-least-once topic; delivery records suppress repeats
        "load_average": os.getloadavg(),
    }
    log.warning("supervisor figures: %s", json.dumps(figures))
    out = paths.run_dir() / "figures"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "auditor_supervisor.jsonl", "a") as fh:
        fh.write(json.dumps(figures) + "\n")
