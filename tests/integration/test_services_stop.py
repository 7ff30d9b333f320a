"""`aldebaran services down` on a private set of the core services (own run dir and ports; the shared ones are
not touched): each stops within 15 s without SIGKILL, Airflow while tasks run (in CI the stop comes after
the whole suite, when dispatch tasks may be running), and no process of theirs is left."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import time

import pytest

from aldebaran_lab.airflow_api import AirflowApi
from aldebaran_lab.chaos.common import private_ports
from aldebaran_lab.services.airflow import Airflow
from aldebaran_lab.services.base import session
from aldebaran_lab.services.kafka import Kafka
from aldebaran_lab.services.minio import MinIO

log = logging.getLogger(__name__)

# A Python task (stopped by SIGINT: a @task ignores SIGTERM) and a BashOperator (SIGTERM runs its on_kill),
# both running far longer than the test.
DAG = '''
import time, pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import dag, task

@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False, is_paused_upon_creation=False)
def stop_probe():
    @task
    def python_sleep():
        time.sleep(600)

    python_sleep()
    BashOperator(task_id="bash_sleep", bash_command="sleep 600")

stop_probe()
'''


class PrivateAirflow(Airflow):
    """The shared service's configuration with its own DAG folder and ports (its log servers and scheduler
    health check too: the shared instance holds the defaults)."""

    def __init__(self, dags) -> None:
        super().__init__()
        self.dags = dags

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.update({
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.dags.parent / "plugins"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.port + 713),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.port + 714),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(self.port + 715),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # A task's supervisor registers its start with the api-server; on a loaded box Airflow's 5 s
            # timeout failed both tasks before they ran (the stop under test needs them running).
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        })
        return env


@pytest.fixture
def private_core(tmp_path, monkeypatch):
    """MinIO, Kafka and Airflow of our own, started side by side; stopped (SIGKILL) by the test's end at the
    latest."""
    ports = private_ports()
    run_dir = tmp_path / "run"
    # Never the shared instance's (or the DAG tests') Airflow home, database or secrets.
    for key in [k for k in os.environ if k.startswith("AIRFLOW__") or k in ("AIRFLOW_HOME", "AIRFLOW_CONFIG")]:
        monkeypatch.delenv(key)
    for key, value in {
        "ALDEBARAN_RUN_DIR": str(run_dir),
        "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{ports['kafka']}",
        "ALDEBARAN_S3_ENDPOINT_URL": f"http://127.0.0.1:{ports['minio']}",
        "ALDEBARAN_KAFKA_HEAP": "-Xmx512m",
        "ALDEBARAN_KAFKA_SECURE_PORT": "0",  # the shared broker's SASL_SSL listener holds its port
        "ALDEBARAN_AIRFLOW_PORT": str(ports["airflow_api"]),
        "ALDEBARAN_AIRFLOW_ADMIN_PASSWORD": secrets.token_urlsafe(16),
    }.items():
        monkeypatch.setenv(key, value)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "stop_probe.py").write_text(DAG)
    kafka = Kafka()
    kafka.controller_port = ports["kafka_controller"]
    svcs = {"minio": MinIO(), "kafka": kafka, "airflow": PrivateAirflow(dags)}
    leaders = []
    try:
        for svc in svcs.values():
            svc.launch()
            leaders.append(svc.pid())
        for svc in svcs.values():
            svc.wait_healthy(svc.start_timeout)
        yield svcs
    finally:
        for svc in svcs.values():
            svc.kill()
        for p in {p for leader in leaders if leader for p in session(leader)}:  # a task in a group of its own
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


# Not in `make test` yet: it FAILS intermittently. In the clean-clone CI run of 77420ed (11:16 UTC, quiet box)
# Airflow needed SIGKILL at 15.2 s (SIGINT → SIGTERM → SIGKILL) after a bash task's SIGTERM. Two causes fixed
# since (docs/operations.md, services down): the components' interpreter teardown, a task's command holding
# its supervisor's socket. 11-28 13:24-13:36, loaded box, both fixes: 6 of 8 runs passed (2.4-7.0 s, SIGINT
# alone); 2 needed SIGKILL at 15.2 s for an `airflow triggerer` that outlived its SIGTERM (the standalone's,
# then ours at 11.3 s). Its cause, fixed 11-28 19:10 UTC: the triggerer noticed its trigger runner's exit only when
# a select on the runner's sockets returned, and a runner that closed them just before it was a zombie left it
# in an empty select for 10 s (services.airflow_exit._runner_exit_seen_promptly; A/B on a private Airflow with
# 12 busy loops: 2 of 4 SIGKILLs before, 0 of 4 after, 7.4-9.3 s). Runs of this test after it (18:52-19:20 UTC,
# load 2.5-16): 16 of 17 passed, Airflow stopped by SIGINT alone in 0.6-7.9 s (one with 48 busy loops: 7.1 s),
# the last 10 in a row; the 7th failed: SIGKILL at 15.5 s for the scheduler and an idle LocalExecutor worker
# (load 16), another cause, not reproduced since, open. So it stays here for now: `make chaos-short` runs it.
@pytest.mark.campaign
def test_each_service_stops_within_15_s_without_sigkill_airflow_with_tasks_running(private_core):
    airflow = private_core["airflow"]
    api = AirflowApi(f"http://{airflow.address}", os.environ["ALDEBARAN_AIRFLOW_ADMIN_PASSWORD"])
    api.wait_registered(["stop_probe"], 120)
    deadline = time.monotonic() + 180
    run_id, states = api.trigger("stop_probe"), {}
    # Both started (on a loaded box a task process can fail to start: one running is enough; a run whose
    # tasks all failed to start is triggered again).
    while not ("running" in (states := api.task_states("stop_probe", run_id)).values()
               and not {None, "scheduled", "queued"} & set(states.values())):
        assert time.monotonic() < deadline, f"tasks not running after 180 s: {states}"
        if states and set(states.values()) <= {"failed", "upstream_failed"}:
            log.info("no task of %s started (%s): triggering again", run_id, states)
            run_id = api.trigger("stop_probe")
        time.sleep(1)
    pids = {name: svc.pid() for name, svc in private_core.items()}
    assert Airflow._task_processes(pids["airflow"]), states  # the task processes, in groups of their own

    results = {name: private_core[name].stop() for name in ("airflow", "kafka", "minio")}  # services.down's order
    log.info("stopped: %s", "; ".join(map(str, results.values())))
    for name, result in results.items():
        assert result is not None and not result.killed, result
        assert result.seconds <= 15.0, result
        assert session(pids[name]) == set(), f"{name}: processes left: {session(pids[name])}"
    assert (airflow.logfile.read_text().splitlines()[-1]
            == f"aldebaran services: {results['airflow']}")
