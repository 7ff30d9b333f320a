"""dispatch_supervisor run for real with dag.test(): the supervisor starts a streaming dispatcher
(`aldebaran dispatch --follow`, channel `log`) on real Kafka and MinIO, whose heartbeat becomes
`running` and which delivers; the test SIGKILLs it; the next supervisor run sees the dead process
and restarts it (a new pid in the heartbeat); the new dispatcher delivers what arrived meanwhile, each
alert once; a third run leaves it alone; platform_health's dispatcher check agrees. The health check
is also run on injected heartbeats (broken partition, stale, missing).

The kill/restart figures are logged (`dispatch supervisor figures: ...`) and appended to
.run/figures/dispatch_supervisor.jsonl; they are not asserted (no timed assertions): see docs/airflow.md."""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import pytest

from aldebaran.runtime import paths
from aldebaran.audit.findings import alert_id
from aldebaran.runtime import heartbeat
from aldebaran.kafka import io as kio
from aldebaran.platform import dispatch_supervisor as ds
from aldebaran.platform import health_checks, processes
from aldebaran.runtime.procs import pid_alive
from aldebaran.platform.settings import HealthSettings
from tests.conftest import assert_eventually

log = logging.getLogger(__name__)


def _alert(order_id: str) -> dict:
    return {"alert_id": alert_id("OVERFILL", order_id), "kind": "OVERFILL", "order_id": order_id,
            "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2,
            "trigger_event_id": "3", "trigger_event_ts": 0, "detected_at": 0}


def _delivered(log_file) -> list[str]:
    if not log_file.exists():
        return []
    # the log channel's lines: {"idempotency_key", "sent_at", "alert"}
    return sorted(json.loads(line)["alert"]["alert_id"] for line in log_file.read_text().splitlines() if line.strip())


def _supervise_ti(run):
    return next(ti for ti in run.get_task_instances() if ti.task_id == "supervise")


@pytest.fixture
def dispatcher_env(kafka_topics, store, s3_prefix, tmp_path, monkeypatch, unique):
    """One channel (`log`), a dispatcher named for this test (heartbeat keys are not under a prefix)."""
    name = f"ds-{unique}"
    log_file = tmp_path / "alerts.jsonl"
    env = {
        "ALDEBARAN_CHANNELS": "log",
        "AIRFLOW_CONN_ALDEBARAN_LOG": json.dumps({"conn_type": "log", "extra": {"path": str(log_file)}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        "ALDEBARAN_DISPATCH_SUPERVISOR_STATE_PREFIX": f"{s3_prefix}/supervisor",
        "ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS": json.dumps({name: ["log"]}),
        # The first start is restart 1 of an incident; a kill sooner than the base after it would (rightly)
        # be backed off. Backoff is unit-tested (tests/unit/aldebaran/platform/test_dispatch_supervisor_decisions.py).
        "ALDEBARAN_DISPATCH_SUPERVISOR_BACKOFF_BASE_SECONDS": "1",
        "ALDEBARAN_DISPATCH_SUPERVISOR_STOP_TIMEOUT_SECONDS": "15",
        "ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS": "1",
        "ALDEBARAN_HEALTH_PREFIX": f"{s3_prefix}/health",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield name, log_file
    # No stray processes: stop the current dispatcher (SIGTERM to its process group, SIGKILL after the
    # stop timeout), and check that it is gone.
    cfg = ds.settings()
    stopped = ds.stop(store, name, cfg, reason="test finished")
    launch = processes.load_state(store, processes.state_key(cfg, name))[0].get("launch") or {}
    log.info("dispatcher stopped at teardown: pids %s", stopped)
    store.delete(heartbeat.key(heartbeat.DISPATCHER, name))
    assert not pid_alive(launch.get("pid"), launch.get("start_ticks")), f"dispatcher {launch} still running"


def test_supervisor_starts_a_dispatcher_and_restarts_it_after_a_kill(airflow_db, dagbag, dispatcher_env,
                                                                     kafka_topics, store, s3_prefix):
    name, log_file = dispatcher_env
    dag = dagbag.dags["dispatch_supervisor"]
    assert dag.max_active_runs == 1 and dag.catchup is False and dag.is_paused_upon_creation is True
    produce = kio.producer(kafka_topics)
    first_alerts = [_alert(f"ds-{i}") for i in range(3)]
    kio.produce_all(produce, kafka_topics.alerts_topic, [(a["alert_id"], json.dumps(a)) for a in first_alerts])
    cfg = ds.settings()
    state_key = processes.state_key(cfg, name)

    # 1. Nothing runs yet: the supervisor launches the dispatcher and returns once it beats `running`.
    first = dag.test()
    assert first.state == "success"
    ti = _supervise_ti(first)
    assert ti.state == "success" and ti.map_index == -1  # one task for every dispatcher, not one per dispatcher
    state = store.get(state_key).json()
    assert state["last_assessment"]["action"] == "restart"
    assert state["last_assessment"]["problems"][0].startswith("no heartbeat at ")
    pid = state["launch"]["pid"]
    assert pid_alive(pid, state["launch"]["start_ticks"])
    hb = heartbeat.read(store, heartbeat.DISPATCHER, name)
    assert (hb["status"], hb["pid"], hb["channels"]) == ("running", pid, ["log"])
    assert_eventually(lambda: _delivered(log_file) == sorted(a["alert_id"] for a in first_alerts), timeout=60,
                      message="the streaming dispatcher delivers")

    # 2. SIGKILL the dispatcher (no clean stop: its heartbeat still says `running`).
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    assert_eventually(lambda: not pid_alive(pid), timeout=10)
    more = [_alert(f"ds-after-{i}") for i in range(2)]
    kio.produce_all(produce, kafka_topics.alerts_topic, [(a["alert_id"], json.dumps(a)) for a in more])

    # 3. The next run sees the dead process and restarts it: a new pid beats `running`. (Restart 2 of the
    # incident waits the backoff, 1 s here, after the first launch: on a fast machine the kill comes sooner.)
    time.sleep(max(0.0, float(state["launch"]["at"]) + 1.5 - time.time()))
    second = dag.test()
    second_done = time.time()
    assert second.state == "success"
    state = store.get(state_key).json()
    assessment = state["last_assessment"]
    assert assessment["action"] == "restart"
    assert f"dispatcher process {pid} on " in assessment["problems"][0] and "is gone" in assessment["problems"][0]
    new_pid = state["launch"]["pid"]
    assert new_pid != pid and pid_alive(new_pid, state["launch"]["start_ticks"])
    hb = heartbeat.read(store, heartbeat.DISPATCHER, name)
    assert (hb["status"], hb["pid"]) == ("running", new_pid)
    assert [r["pid"] for r in state["restarts"]] == [pid, new_pid]
    assert_eventually(lambda: _delivered(log_file) == sorted(a["alert_id"] for a in first_alerts + more),
                      timeout=60, message="the restarted dispatcher delivers what arrived meanwhile, each alert once")
    after = {a["alert_id"] for a in more}
    resumed_at = max(json.loads(line)["sent_at"] for line in log_file.read_text().splitlines()
                     if json.loads(line)["alert"]["alert_id"] in after)

    # 4. Healthy now: a third run leaves it alone; platform_health's dispatcher check agrees.
    third = dag.test()
    assert third.state == "success"
    state3 = store.get(state_key).json()
    assert state3["last_assessment"]["action"] == "none" and state3["launch"]["pid"] == new_pid
    checked = health_checks.check_dispatchers(HealthSettings(), time.time())
    assert checked["ok"] and checked["dispatchers"][name]["status"] == "running", checked

    figures = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # the run started right after the kill; on its schedule add up to one minute
        "detect_seconds": round(assessment["observed_at"] - killed_at, 2),
        "launch_to_running_seconds": round(state["launch"]["started_at"] - state["launch"]["at"], 2),
        "kill_to_running_seconds": round(state["launch"]["started_at"] - killed_at, 2),
        "supervisor_run_seconds": round(second_done - killed_at, 2),
        # the killed consumer's partitions move once its Kafka session expires (ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS)
        "kill_to_delivered_seconds": round(resumed_at - killed_at, 2),
        "load_average": os.getloadavg(),
    }
    log.warning("dispatch supervisor figures: %s", json.dumps(figures))
    out = paths.run_dir() / "figures"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "dispatch_supervisor.jsonl", "a") as fh:
        fh.write(json.dumps(figures) + "\n")


def test_health_names_missing_stale_and_broken_dispatchers(services_up, store, s3_prefix, monkeypatch, unique):
    """Failure injection: heartbeats written by the test, one per case, read by the health check."""
    names = {"missing": f"hm-{unique}", "stale": f"hs-{unique}", "broken": f"hb-{unique}"}
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log,webhook,email")
    monkeypatch.setenv("ALDEBARAN_DELIVERY_PREFIX", f"{s3_prefix}/deliveries")
    monkeypatch.setenv("ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS", json.dumps(
        {names["missing"]: ["log"], names["stale"]: ["webhook"], names["broken"]: ["email"]}))
    now = time.time()
    base = {"status": "running", "host": "h", "pid": 1, "started_at": now - 100, "error": None}
    store.put(heartbeat.key(heartbeat.DISPATCHER, names["stale"]), json.dumps({**base, "channels": ["webhook"], "at": now - 90,
                                                         "partitions": {"webhook": {}}}).encode())
    store.put(heartbeat.key(heartbeat.DISPATCHER, names["broken"]), json.dumps({**base, "channels": ["email"], "at": now - 1, "partitions": {
        "email": {"0": {"epoch": 4, "broken": None},
                  "1": {"epoch": 2, "broken": "fenced: epoch 3 took partition 1"}}}}).encode())
    try:
        checked = health_checks.check_dispatchers(HealthSettings(max_dispatcher_heartbeat_age_seconds=60), now)
    finally:
        for name in names.values():
            store.delete(heartbeat.key(heartbeat.DISPATCHER, name))
    assert checked["ok"] is False
    assert checked["problem"].split("; ") == [
        f"dispatcher {names['missing']!r} (log): no heartbeat at s3://{store.bucket}/heartbeats/dispatcher/"
        f"{names['missing']}.json — is it running? (the dispatch_supervisor DAG starts it)",
        f"dispatcher {names['stale']!r}: last heartbeat 90s ago at s3://{store.bucket}/heartbeats/dispatcher/"
        f"{names['stale']}.json (limit 60s, ALDEBARAN_HEALTH_MAX_DISPATCHER_HEARTBEAT_AGE_SECONDS)",
        f"dispatcher {names['broken']!r}: channel email partition 1 broken, not delivered: fenced: epoch 3 took partition 1",
    ]
    assert checked["dispatchers"][names["broken"]]["broken"] == {"email/1": "fenced: epoch 3 took partition 1"}
