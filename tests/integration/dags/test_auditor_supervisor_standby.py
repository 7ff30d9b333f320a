"""auditor_supervisor with its standby slot (ALDEBARAN_SUPERVISOR_STANDBY=true), run for real with dag.test()
on real Kafka and MinIO (spark-submit, local[2]):

1. nothing runs → the supervisor submits the active auditor, then launches a warm standby (ready: its
   Spark session up, waiting on the checkpoint lease);
2. the active's whole spark-submit session is SIGKILLed; the standby takes the lease by itself;
3. the next run sees the takeover for what it is (the lease holder's session is the standby's
   spark-submit): it promotes the standby — healthy, no spark-submit of an active, not a "JVM gone"
   restart — and launches a fresh standby; the promoted auditor audits the trades produced after the kill;
4. the active's driver is frozen (SIGSTOP: alive, holding its lease, no progress); a run with
   stale_after_seconds=5 fails over: it stops the frozen active, the standby takes over, nothing is
   submitted, and a fresh standby is launched again.

Four Spark JVMs start one after another (the active, three standbys): 4.4 min at load 10 on the 2-core box,
so it is a `campaign` (left out of `make test`; `make chaos-short` runs it):

    .venv/bin/pytest tests/integration/dags/test_auditor_supervisor_standby.py -m campaign

Figures are logged (`standby supervisor figures: ...`) and appended to
.run/figures/auditor_supervisor_standby.jsonl, not asserted (no timed assertions): see docs/airflow.md."""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import pytest

from aldebaran.runtime import paths
from aldebaran.runtime import lease as leases
from aldebaran.runtime import heartbeat
from aldebaran.kafka import io as kio
from aldebaran.platform import standby_slot, supervisor
from aldebaran.platform.health_checks import _offsets
from aldebaran.platform.settings import SupervisorSettings
from aldebaran_capacity import loadgen
from tests.conftest import assert_eventually

log = logging.getLogger(__name__)

PARAMS_NONE = {"query_name": None, "checkpoint": None, "stale_after_seconds": None, "start_timeout_seconds": None,
               "page_after_restarts": None, "standby": None}


def _ti_state(run, task_id: str) -> str:
    return next(ti.state for ti in run.get_task_instances() if ti.task_id == task_id)


def _holder_session(store, checkpoint) -> int | None:
    got = leases.read(store, checkpoint)
    if not got or got[0].get("state") != leases.HELD:
        return None
    return standby_slot.session_of(got[0].get("pid"))


def _audited(store, query, kafka):
    ends = kio.end_offsets(kafka, kafka.trades_topic)
    done = _offsets((heartbeat.read(store, heartbeat.AUDITOR, query) or {}).get("kafka_end_offsets"), kafka.trades_topic) or {}
    assert all(done.get(p, 0) >= e for p, e in ends.items()), (done, ends)
    return True


@pytest.fixture
def supervised(kafka_topics, store, s3_prefix, tmp_path, monkeypatch, unique):
    query = f"sby-{unique}"
    checkpoint = str(tmp_path / "checkpoint")
    env = {
        "ALDEBARAN_AUDIT_QUERY_NAME": query,
        "ALDEBARAN_AUDIT_CHECKPOINT": checkpoint,
        "ALDEBARAN_AUDIT_ARCHIVE_PREFIX": f"{s3_prefix}/archive",
        # A frozen driver's lease runs out one ttl after its last renewal, and the standby would then take
        # over by itself: a long ttl leaves step 4 to the supervisor's failover.
        "ALDEBARAN_AUDIT_LEASE_SECONDS": "90",
        "ALDEBARAN_AUDIT_TIMEOUT_SECONDS": "900",  # if this test process dies, the auditors still stop
        "ALDEBARAN_SUPERVISOR_STATE_PREFIX": f"{s3_prefix}/supervisor",
        "ALDEBARAN_SUPERVISOR_STANDBY": "true",
        # Each takeover is a restart of the incident the first start opened: no backoff in the way of step 4
        # (backoff is unit-tested in test_supervisor_decisions).
        "ALDEBARAN_SUPERVISOR_BACKOFF_BASE_SECONDS": "1",
        "ALDEBARAN_SUPERVISOR_STOP_TIMEOUT_SECONDS": "5",  # a frozen driver ignores SIGINT: SIGKILL after 5 s
        "ALDEBARAN_CHANNELS": "log",
        "AIRFLOW_CONN_ALDEBARAN_LOG": json.dumps({"conn_type": "log", "extra": {"path": str(tmp_path / "pages.jsonl")}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]",
                                                  "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"}}),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    sessions: set[int] = set()  # every spark-submit the supervisor started: none outlives the test
    yield query, checkpoint, sessions
    settings = SupervisorSettings()
    standby_slot.stop(store, query, settings, "test finished", force=True)
    supervisor.stop_local(store, query, checkpoint, 10, reason="test finished")
    for pid in sessions:
        supervisor._signal(pid, signal.SIGKILL, group=True)
    store.delete(leases.lease_key(checkpoint))
    store.delete(heartbeat.key(heartbeat.AUDITOR, query))


@pytest.mark.campaign
def test_supervisor_keeps_a_standby_promotes_its_takeover_and_fails_over_to_it(
        airflow_db, dagbag, supervised, kafka_topics, store):
    query, checkpoint, sessions = supervised
    dag = dagbag.dags["auditor_supervisor"]
    key = supervisor.state_key(SupervisorSettings(), query)
    produce = kio.producer(kafka_topics)
    parts = [list(loadgen.records(loadgen.original_mix(n, seed))) for n, seed in ((40, 1), (40, 2))]
    kio.produce_all(produce, kafka_topics.trades_topic, [(r.key, r.value) for r in parts[0]])

    # 1. An active auditor, then a standby waiting on its lease.
    first = dag.test(run_conf=PARAMS_NONE)
    assert first.state == "success"
    assert _ti_state(first, "submit_auditor") == "success" and _ti_state(first, "submit_standby") == "success"
    state = store.get(key).json()
    active, standby = state["submit"]["pid"], state["standby"]["pid"]
    sessions.update({active, standby})
    assert supervisor.pid_alive(active) and supervisor.pid_alive(standby) and state["standby"]["ready_at"]
    assert _holder_session(store, checkpoint) == active
    standby_ready_in = state["standby"]["ready_at"] - state["standby"]["at"]

    # 2. SIGKILL of the active (driver and JVM): the standby takes the lease by itself.
    os.killpg(active, signal.SIGKILL)
    killed_at = time.time()
    kio.produce_all(produce, kafka_topics.trades_topic, [(r.key, r.value) for r in parts[1]])
    assert_eventually(lambda: _holder_session(store, checkpoint) == standby, timeout=120, interval=0.1,
                      message="the standby holds the lease")
    took_lease_at = time.time()

    # 3. The next run promotes it: no restart, no new active; a fresh standby.
    second = dag.test(run_conf=PARAMS_NONE)
    assert second.state == "success"
    state = store.get(key).json()
    assessment = state["last_assessment"]
    assert assessment["action"] == "none" and assessment["reason"].startswith("the standby took over"), assessment
    assert not any("is gone" in p for p in assessment["problems"]), assessment["problems"]
    assert _ti_state(second, "prepare_restart") == "success" and _ti_state(second, "submit_auditor") == "skipped"
    assert state["submit"]["pid"] == standby and state["submit"]["promoted_at"]
    assert state["takeovers"][-1]["replaced_pid"] == active and state["takeovers"][-1]["pid"] == standby
    assert _ti_state(second, "submit_standby") == "success"
    fresh = state["standby"]["pid"]
    sessions.add(fresh)
    assert fresh not in (active, standby) and supervisor.pid_alive(fresh) and state["standby"]["ready_at"]
    assert _holder_session(store, checkpoint) == standby
    assert_eventually(lambda: _audited(store, query, kafka_topics), timeout=180,
                      message="the promoted auditor audits the trades produced after the kill")
    audited_at = time.time()

    # 4. A frozen active (alive, holding its lease, no progress): the supervisor fails over to the standby.
    holder = leases.read(store, checkpoint)[0]["pid"]
    os.kill(holder, signal.SIGSTOP)
    frozen_at = time.time()
    time.sleep(6)  # its last heartbeat is now older than the run's stale_after_seconds
    third = dag.test(run_conf={**PARAMS_NONE, "stale_after_seconds": 5})
    assert third.state == "success"
    state = store.get(key).json()
    assert any("no progress for" in p for p in state["last_assessment"]["problems"]), state["last_assessment"]
    assert state["last_assessment"]["action"] == "failover", state["last_assessment"]
    assert _ti_state(third, "submit_auditor") == "skipped"
    assert not supervisor.pid_alive(holder) and not supervisor.pid_alive(standby)  # the frozen active is gone
    assert state["submit"]["pid"] == fresh and _holder_session(store, checkpoint) == fresh
    assert state["takeovers"][-1]["replaced_pid"] == standby
    assert state["standby"] and state["standby"]["pid"] not in (active, standby, fresh)
    sessions.add(state["standby"]["pid"])
    failover = state["restarts"][-1]

    figures = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "standby_ready_in_seconds": round(standby_ready_in, 1),
        "kill_to_standby_lease_seconds": round(took_lease_at - killed_at, 1),
        "kill_to_new_trades_audited_seconds": round(audited_at - killed_at, 1),  # includes run 2's standby launch
        "freeze_to_failover_started_seconds": round(failover["started_at"] - frozen_at, 1),  # 6 s of it waited
        "load_average": os.getloadavg(),
    }
    log.warning("standby supervisor figures: %s", json.dumps(figures))
    out = paths.run_dir() / "figures"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "auditor_supervisor_standby.jsonl", "a") as fh:
        fh.write(json.dumps(figures) + "\n")
