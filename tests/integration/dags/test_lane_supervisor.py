"""lane_supervisor run for real with dag.test() (issue 19, item 4): the supervisor starts the lane keeper
(`aldebaran lanes run`), which submits the real-time-mode lane on the Spark 4.3 runtime against real Kafka;
the challenge's example gives its OVERFILL on the fast topic within seconds; the exact lane's copy (produced
here, standing in for the auditor) confirms it in the reconciliation; `aldebaran lanes status` shows both
lanes. Then the keeper is SIGKILLed: its lane goes with it (no orphan on the checkpoint), the next
supervisor run sees the dead process and starts a new keeper, whose lane runs again. Needs `make setup`'s
Spark 4.3 runtime; nothing is skipped when it is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from aldebaran.runtime import heartbeat, paths
from aldebaran.audit.findings import alert_id
from aldebaran.kafka import io as kio
from aldebaran.lanes import keeper
from aldebaran.lanes.settings import LaneSettings
from aldebaran.runtime.procs import pid_alive
from aldebaran.platform import lane_supervisor
from aldebaran.platform import processes as procs
from aldebaran.settings import load
from aldebaran_capacity import loadgen
from tests.conftest import assert_eventually


def _supervise(dag, cfg) -> dict:
    """One supervisor run; its assessment as the supervisor recorded it."""
    run = dag.test()
    assert run.state == "success", run.state
    ti = next(ti for ti in run.get_task_instances() if ti.task_id == "supervise")
    assert ti.state == "success"
    return keeper.lane_store().get(procs.state_key(cfg, cfg.name)).json()["last_assessment"]


def _lane_processes(checkpoint: str) -> list[int]:
    """Pids whose command line names this lane's checkpoint (the spark-submit JVM, its Python driver)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if checkpoint.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                    out.append(int(pid))
            except OSError:
                continue
    return out


@pytest.fixture
def lane_env(kafka_topics, store, s3_prefix, tmp_path, monkeypatch, unique):
    env = {
        "ALDEBARAN_LANES_NAME": f"lane-{unique}",
        "ALDEBARAN_LANES_CHECKPOINT": str(tmp_path / "checkpoint"),
        "ALDEBARAN_LANES_CHECKPOINT_INTERVAL": "10 seconds",
        "ALDEBARAN_LANES_STARTING_OFFSETS": "earliest",
        "ALDEBARAN_LANES_CONFIRM_TTL_SECONDS": "120",
        "ALDEBARAN_LANES_STATE_PREFIX": f"{s3_prefix}/supervisor",
        "ALDEBARAN_LANES_RECORDS_PREFIX": f"{s3_prefix}/lanes",
        "ALDEBARAN_LANES_HEARTBEAT_SECONDS": "1",
        "ALDEBARAN_LANES_BACKOFF_BASE_SECONDS": "1",
        "ALDEBARAN_LANES_START_TIMEOUT_SECONDS": "240",
        "ALDEBARAN_LANES_STOP_TIMEOUT_SECONDS": "20",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = load(LaneSettings)
    yield cfg
    lane_supervisor.stop("test finished")
    assert_eventually(lambda: not _lane_processes(cfg.checkpoint), timeout=60, interval=1,
                      message="the lane's processes gone at teardown")
    keeper.lane_store().delete(heartbeat.key(heartbeat.LANE, cfg.name))


def test_supervisor_runs_the_lane_and_restarts_it_after_its_keeper_is_killed(airflow_db, dagbag, lane_env,
                                                                             kafka_topics):
    cfg = lane_env
    dag = dagbag.dags["lane_supervisor"]
    assert dag.max_active_runs == 1 and dag.catchup is False and dag.is_paused_upon_creation is True
    recs = list(loadgen.records(loadgen.CHALLENGE_EXAMPLE))
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in recs])
    lane_store = keeper.lane_store()

    # 1. Nothing runs: the supervisor launches the keeper and returns once its lane's query is active.
    first = _supervise(dag, cfg)
    assert first["action"] == "restart" and first["problems"][0].startswith("no heartbeat at ")
    hb = heartbeat.read(lane_store, heartbeat.LANE, cfg.name)
    assert hb["status"] == "running" and hb["lane"]["query"]["active"] is True
    keeper_pid = hb["pid"]

    # 2. The challenge's alert on the fast topic, with the exact lane's id.
    want = alert_id("OVERFILL", "1")

    def fast_alert():
        got = [json.loads(m.value()) for m in kio.read_topic(kafka_topics, kafka_topics.fast_alerts_topic, idle=1.0)]
        assert [a["alert_id"] for a in got] == [want], got
        return got[0]

    alert = assert_eventually(fast_alert, timeout=120, interval=2, message="the lane's alert on the fast topic")
    assert (alert["order_id"], alert["requested"], alert["purchased"], alert["lane"]) == ("1", 100, 120, "realtime")

    # 3. The exact lane's copy confirms it.
    exact = {k: v for k, v in alert.items() if k != "lane"}
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic, [(want, json.dumps(exact))])

    def confirmed():
        counts = (heartbeat.read(lane_store, heartbeat.LANE, cfg.name).get("reconcile") or {}).get("counts") or {}
        assert counts.get("confirmed") == 1 and counts.get("unconfirmed") == 0, counts

    assert_eventually(confirmed, timeout=60, interval=1, message="the reconciliation's confirmation")
    shown = subprocess.run([str(paths.venv_bin("aldebaran")), "lanes", "status"], capture_output=True, text=True,
                           timeout=60, check=True).stdout
    assert f"fast lane    {cfg.name} → {kafka_topics.fast_alerts_topic}: running" in shown, shown
    assert "exact lane" in shown and "confirmed 1" in shown and "unconfirmed  0 " in shown, shown

    # 4. A healthy lane is left alone.
    assert _supervise(dag, cfg)["action"] == "none"

    # 5. SIGKILL the keeper alone: its lane dies with it (PR_SET_PDEATHSIG), the next run restarts it.
    os.kill(keeper_pid, signal.SIGKILL)
    assert_eventually(lambda: not pid_alive(keeper_pid), timeout=10, message="the keeper gone")
    assert_eventually(lambda: not _lane_processes(cfg.checkpoint), timeout=60, interval=1,
                      message="the killed keeper's lane gone")
    time.sleep(1.1)  # the backoff base: the restart is due at once after it
    again = _supervise(dag, cfg)
    assert again["action"] == "restart", again
    assert any("is gone" in p for p in again["problems"]), again["problems"]
    hb = heartbeat.read(lane_store, heartbeat.LANE, cfg.name)
    assert hb["status"] == "running" and hb["pid"] != keeper_pid and hb["lane"]["query"]["active"] is True
    state = lane_store.get(procs.state_key(cfg, cfg.name)).json()
    assert len(state["restarts"]) == 2
