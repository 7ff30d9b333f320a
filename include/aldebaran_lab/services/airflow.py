"""Airflow 3 standalone on 127.0.0.1:8080: SQLite, LocalExecutor, the repo's dags/ and plugins/.

`airflow standalone` stops its components only on KeyboardInterrupt: SIGTERM kills the parent and
orphans the scheduler, api-server, dag-processor and triggerer. So it is started in its own session
with SIGINT restored (services.base) and stopped with SIGINT (Airflow.send_stop: after the running
tasks, to the standalone alone).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time

from aldebaran.runtime import paths
from aldebaran.exceptions import ConfigError
from aldebaran.settings import KafkaSettings, ObjectStoreSettings, load
from aldebaran_lab.services.base import Service, describe, processes, session

log = logging.getLogger(__name__)


# The watcher's consumer (the provider's AwaitMessageTrigger commits each message it reads, so a restarted
# watcher resumes from the group's committed offset; "latest" only applies to a group that never committed).
# A SIGKILLed triggerer leaves its consumer in the group until the session times out, and the restarted
# watcher gets no partition before then: librdkafka's default (45 s) became 10 s.
WATCHER_CONSUMER = {"group.id": "aldebaran-alert-watcher", "auto.offset.reset": "latest", "enable.auto.commit": False,
                    "session.timeout.ms": 10000, "heartbeat.interval.ms": 2000}
# [triggerer] triggerer_health_check_threshold: a killed triggerer's triggers (the alert watcher) move to a live or
# restarted one only once its last heartbeat is this old (Airflow's default 30 s); triggerers beat every 5 s.
TRIGGERER_HEALTH_CHECK_THRESHOLD = "15"


def connections_env(kafka: KafkaSettings | None = None, spark_master: str | None = None,
                    s3: ObjectStoreSettings | None = None) -> dict[str, str]:
    """AIRFLOW_CONN_* for the Airflow connections the DAGs name, derived from the Aldebaran settings:
    ``kafka_alerts_watcher`` (alert_dispatch's AssetWatcher), ``spark_default`` (SparkSubmitOperator) and
    ``aldebaran_s3`` (ALDEBARAN_S3_CONNECTION: the object store as an AWS connection, MinIO's endpoint and
    generated keys; every S3 client and Spark's s3a read it, aldebaran.storage.s3access, and the tasks hand it to
    the auditor and the dispatchers they start). There is no ``aws_default``: nothing reads it unless
    ALDEBARAN_S3_CONNECTION names it.

    The platform's own Kafka clients read the Kafka connection ``aldebaran_kafka`` (aldebaran.kafka.conn;
    a deployment defines it, the local platform needs none: ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS); the
    watcher's connection is derived from the same place (brokers, TLS, SASL), plus its own consumer group.

    A variable already present in the environment (a real deployment's secret) wins. ``kafka``,
    ``spark_master`` and ``s3`` default to this process's settings (the HA profile passes its own).
    """
    from aldebaran.storage.connections import env_var
    from aldebaran.kafka.conn import resolve
    from aldebaran.storage.s3access import connection_of

    kafka = kafka or load(KafkaSettings)
    s3 = s3 or load(ObjectStoreSettings)
    conns = {
        # The alert watcher's own group: it only wakes the dispatch DAG, the dispatcher reads alerts itself.
        "AIRFLOW_CONN_KAFKA_ALERTS_WATCHER": {
            "conn_type": "kafka",
            "extra": {**resolve(kafka).config, **WATCHER_CONSUMER},
        },
        "AIRFLOW_CONN_SPARK_DEFAULT": {
            "conn_type": "spark",
            "host": spark_master or os.environ.get("ALDEBARAN_SPARK_MASTER", "local[*]"),
            "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"},
        },
    }
    if s3.connection:
        conns[env_var(s3.connection)] = connection_of(s3)
    return {k: json.dumps(v) for k, v in conns.items() if k not in os.environ}


class Airflow(Service):
    name = "airflow"
    address = "127.0.0.1:8080"
    start_timeout = 300.0
    stop_signal = signal.SIGINT
    task_grace = 8.0  # how long the running tasks (and their supervisors' reports) get before the components stop
    # Then SIGTERM to each process left but the scheduler `stop_grace` after the standalone's SIGINT, and
    # SIGKILL 15 s after the request. (A triggerer waiting for its exited trigger runner used to need both;
    # airflow_exit ends that wait.)
    stop_grace = 6.0
    stop_timeout = 15.0

    def __init__(self) -> None:
        super().__init__()
        self.host = os.environ.get("ALDEBARAN_AIRFLOW_HOST", "127.0.0.1")
        self.port = int(os.environ.get("ALDEBARAN_AIRFLOW_PORT", "8080"))
        self.address = f"{self.host}:{self.port}"
        self.passwords = self.home / "passwords.json"
        self.bin = self.home / "bin" / "airflow"

    def admin_password(self) -> str:
        password = os.environ.get("ALDEBARAN_AIRFLOW_ADMIN_PASSWORD")
        if not password:
            raise ConfigError(
                "ALDEBARAN_AIRFLOW_ADMIN_PASSWORD must be set to start Airflow "
                "(`aldebaran services up` generates it into .env)"
            )
        return password

    def environment(self) -> dict[str, str]:
        self.admin_password()  # fails early, naming the setting
        env = dict(os.environ)
        # standalone runs its components as `airflow ...` from PATH: our entry point first (airflow_exit), then
        # this venv.
        env["PATH"] = os.pathsep.join([str(self.bin.parent), str(paths.venv_bin("airflow").parent),
                                      env.get("PATH", "")])
        env.update(connections_env())
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(paths.ROOT / "dags"),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(paths.ROOT / "plugins"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": os.environ.get("ALDEBARAN_AIRFLOW_PARALLELISM", "4"),
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "4",
                # timeout: how long a connection waits for SQLite's write lock (Python's default 5 s).
                # The api-server, scheduler, dag-processor and 4 task processes share one file on 2
                # cores; a 5 s wait ran out in CI and the api-server answered "Database error".
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}?timeout=30",
                "AIRFLOW__API__HOST": self.host,
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": f"http://{self.address}",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{self.address}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords),
                "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
                # Its default is 0.0.0.0; every service binds to the loopback address only.
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": self.host,
                # A changed file is re-parsed at the next refresh whatever this says (file_parsing_sort_mode
                # modified_time); an unchanged one is not re-parsed every 30 s (the default): docs/design.md §5.
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": TRIGGERER_HEALTH_CHECK_THRESHOLD,
                # How long a task's supervisor waits, once the task process has exited, for EOF on the sockets
                # a process the task left behind may still hold (Airflow's default 60 s): its LocalExecutor
                # worker stays busy that long, and the scheduler's stop waits for it.
                "AIRFLOW__WORKERS__SOCKET_CLEANUP_TIMEOUT": "5",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            }
        )
        return env

    def prepare(self) -> None:
        # The admin password comes from .env, never from Airflow's generator or a default.
        self.passwords.write_text(json.dumps({"admin": self.admin_password()}))
        os.chmod(self.passwords, 0o600)
        # `airflow` without the interpreter's teardown at exit (airflow_exit: it made the stop miss 15 s).
        self.bin.parent.mkdir(exist_ok=True)
        self.bin.write_text(f"#!{sys.executable}\nfrom aldebaran_lab.services.airflow_exit import main\nmain()\n")
        os.chmod(self.bin, 0o755)

    def command(self) -> list[str]:
        return [str(self.bin), "standalone"]

    def send_stop(self, pid: int) -> None:
        """Stop the running tasks, then SIGINT to the standalone alone: it SIGTERMs each component once.

        One signal per component. A second one is not a gentler stop: in the scheduler it raised SystemExit
        inside LocalExecutor.end() before the idle workers got their poison pill (multiprocessing then
        joined them for ever); the triggerer takes it as "force" (SIGKILL to its trigger runner); the
        dag-processor ran its exit handler twice, nested. The scheduler's end() waits for running tasks (the
        workers ignore SIGINT and SIGTERM), so they go first, while the api-server is up to take their final
        state (a supervisor whose api-server is gone keeps retrying it): SIGTERM runs the operator's on_kill
        (a BashOperator stops its command, which would hold the supervisor's socket open), SIGINT a second
        later interrupts Python code (a @task ignores SIGTERM). A component still winding down `stop_grace`
        later gets SIGTERM (the scheduler is spared); each ends without the interpreter's teardown
        (airflow_exit), which had taken most of the stop."""
        tasks = self._task_processes(pid)
        if tasks:
            log.info("%s: stopping %d task process(es) first: %s", self.name, len(tasks),
                     ", ".join(f"{p} {describe(p)}" for p in sorted(tasks)))
            # What a task started in a session of its own holds the supervisor's sockets too when it inherited
            # the task's stdio (a BashOperator's command: its stdin); a task interrupted before its on_kill
            # could stop it leaves it running, and the supervisor waits for EOF on them (socket_cleanup_timeout).
            sockets = set().union(*map(self._stdio_sockets, tasks))
            t0, signalled = time.monotonic(), 0.0
            for sig, after in ((signal.SIGTERM, 0.0), (signal.SIGINT, 1.0)):
                while time.monotonic() - t0 < after and self._holders(pid, sockets):
                    time.sleep(0.1)
                for p in self._holders(pid, sockets):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, sig)
                signalled = time.monotonic()
            while time.monotonic() - t0 < self.task_grace and ((left := self._holders(pid, sockets))
                                                             or self._busy_workers(pid)):
                if left and time.monotonic() - signalled > 1.0:  # left behind by a task (or it started late)
                    log.info("%s: SIGTERM to what the tasks left: %s", self.name,
                             ", ".join(f"{p} {describe(p)}" for p in sorted(left)))
                    for p in left:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(p, signal.SIGTERM)
                    signalled = time.monotonic()
                time.sleep(0.1)
            log.info("%s: after %.1fs %d task process(es) left, %d LocalExecutor worker(s) busy", self.name,
                     time.monotonic() - t0, len(self._holders(pid, sockets)), len(self._busy_workers(pid)))
        procs = processes()
        if pid in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
            return
        # The standalone is gone (it crashed): its components, left in its group, get their signal directly.
        for p in session(pid) - self._scheduler(pid):
            if procs.get(p, (0, 0, 0))[1] == pid:  # the group: not a task left behind (the later stages)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGINT)

    def spared_from_sigterm(self, pid: int) -> set[int]:
        # A second signal raises SystemExit in the scheduler's LocalExecutor.end(): the cause of the hang.
        return self._scheduler(pid)

    @staticmethod
    def _scheduler(pid: int) -> set[int]:
        """The scheduler's main process (its forked helpers have the same command line, not the same parent)."""
        return {p for p, (ppid, _, _) in processes().items() if ppid == pid
                and describe(p, 4096) == "airflow scheduler"}

    @staticmethod
    def _task_processes(pid: int) -> set[int]:
        """The task processes and what they started: Airflow 3 puts each task in a process group of its own."""
        procs = processes()
        return {p for p in session(pid) if p in procs and procs[p][1] != pid}

    @staticmethod
    def _stdio_sockets(p: int) -> set[str]:
        """The sockets on a process's stdin, stdout and stderr (a task process's: its supervisor's channels)."""
        found = set()
        for fd in (0, 1, 2):
            with contextlib.suppress(OSError):
                if (target := os.readlink(f"/proc/{p}/fd/{fd}")).startswith("socket:"):
                    found.add(target)
        return found

    @classmethod
    def _holders(cls, pid: int, sockets: set[str]) -> set[int]:
        """Processes outside the standalone's own group (the supervisors hold the other ends) with one of the
        task processes' stdio sockets: the task processes, and what they started and left holding them."""
        return {p for p, (_, pgid, _) in processes().items() if pgid != pid and cls._stdio_sockets(p) & sockets}

    @staticmethod
    def _busy_workers(pid: int) -> set[int]:
        """LocalExecutor workers still supervising a task (their title names it; an idle one says <idle>)."""
        return {p for p in session(pid) if (t := describe(p, 4096)).startswith("airflow worker -- LocalExecutor")
                and not t.endswith("<idle>")}

    def healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://{self.address}/api/v2/monitor/health", timeout=3) as resp:
                body = json.loads(resp.read())
        except (OSError, ValueError):
            return False
        return all(
            body.get(part, {}).get("status") == "healthy" for part in ("metadatabase", "scheduler", "dag_processor")
        )
