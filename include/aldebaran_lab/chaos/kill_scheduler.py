"""`aldebaran chaos kill-scheduler`: SIGKILL the Airflow scheduler while the real `alert_dispatch` DAG
delivers a known alert set, restart it after a pause, and check that every alert still reaches its
recipient exactly once.

The shared Airflow is never touched. The campaign starts its own stack under a private run directory:
a Kafka and a MinIO on their own ports (outages.private_services, here 19192/19193 and 19100) and an
Airflow 3 (SQLite, LocalExecutor, the shared service's configuration from services.airflow with its
own AIRFLOW_HOME, ports and generated admin password) run as separate processes, each in its own
process group, so that the scheduler alone can be killed:

    airflow db migrate, then
    airflow api-server (127.0.0.1:18080: the UI/REST API, and the Execution API the task processes talk to)
    airflow dag-processor
    airflow scheduler --skip-serve-logs (LocalExecutor: its workers and the task processes are its children)

The DAG folder holds only a link to dags/alert_dispatch.py (the other DAGs would supervise auditors). No
triggerer runs: the campaign triggers DAG runs through the REST API where the Kafka AssetWatcher would.

    1. `alerts` alerts (plus ~10% repeats: the topic is at-least-once) are published in waves to the
       private alerts topic, channels `webhook` (deduplicates by Idempotency-Key) and `sms` (cannot);
    2. per kill: a wave is published, a DAG run triggered if none is active; once a `dispatch` task
       instance is running, at a random moment the scheduler is SIGKILLed — alternately with every
       process it started ("tree": LocalExecutor workers, task supervisors and the task processes, which
       Airflow 3 puts in process groups of their own — a crashed scheduler host) and the scheduler
       process alone ("process": workers, supervisors and tasks are orphaned and go on); after a pause
       it is restarted. Measured: restart → the new scheduler's first heartbeat (the API's
       /monitor/health), restart → the first task instance started after the restart finishing;
    3. after the last kill, runs are triggered until every delivery record is settled;
    4. verdict as kill-dispatch: webhook accepted each alert exactly once, SMS never twice and each
       alert DELIVERED or IN_DOUBT; and what Airflow did with the task instances running at each kill
       (their final state and every try, from the REST API).

The private Airflow shortens two intervals so that the campaign takes minutes, not hours (recorded in
its details): `[scheduler] orphaned_tasks_check_interval` 10 s (default 300 s) and
`[scheduler] task_instance_heartbeat_timeout` 60 s (default 300 s); delivery leases are 10 s (60 s).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import random
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.delivery.records import DELIVERED, IN_DOUBT
from aldebaran.kafka import io as kio
from aldebaran.runtime.progress import track
from aldebaran_lab import airflow_api
from aldebaran_lab.chaos.common import (
    CampaignResult, ChaosError, DeliveryVerdict, Workspace, campaign_ledger, channel_connections, delivery_env,
    recovery_text, settled, unsettled, wait_for,
)
from aldebaran_lab.chaos.kill_dispatch import make_alerts
from aldebaran_lab.services.airflow import Airflow
from aldebaran_lab.services.base import Service

log = logging.getLogger(__name__)

DAG_ID = "alert_dispatch"
PORTS = {"kafka": 19192, "kafka_controller": 19193, "minio": 19100, "airflow_api": 18080}
LEASE_SECONDS = 10.0
ORPHAN_CHECK_SECONDS = 10.0
TI_HEARTBEAT_TIMEOUT = 60.0
# --short (the test suite): one kill, small waves, short pauses and idle time.
SHORT = {"delay": (0.5, 3.0), "pause": (3.0, 6.0), "idle_seconds": 6.0, "settle_timeout": 300.0}
KILL_TEXT = {"tree": "with every process under it", "process": "process alone (tasks orphaned)"}
ACTIVE_RUN_STATES = ("queued", "running")
SETTLED_STATES = {"webhook": (DELIVERED,), "sms": (DELIVERED, IN_DOUBT)}
FINISHED_TI_STATES = ("success", "failed", "skipped", "upstream_failed", "removed")


# --- pure logic (unit-tested) ---------------------------------------------------------------------------
@dataclass
class KillPlan:
    mode: str  # "tree" (the scheduler and every process under it) or "process" (the scheduler pid only)
    delay: float  # seconds after a dispatch task instance was seen running
    pause: float  # seconds the scheduler stays down


def plan_kills(kills: int, rng: random.Random, delay: tuple[float, float], pause: tuple[float, float]) -> list[KillPlan]:
    """Alternate tree and process kills, starting with the harsher tree kill; random moments and pauses."""
    return [KillPlan("tree" if i % 2 == 0 else "process", round(rng.uniform(*delay), 2), round(rng.uniform(*pause), 2))
            for i in range(kills)]


def descendants(root: int, parents: dict[int, int]) -> list[int]:
    """Every process below `root` in a pid → ppid table (children, grandchildren, ...), sorted."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.append(pid)
            todo.extend(children.get(pid, []))
    return sorted(out)


def parse_ts(value: str | None) -> dt.datetime | None:
    """An Airflow API timestamp (ISO 8601, 'Z' or offset) as an aware datetime; None stays None."""
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def ti_key(ti: dict) -> tuple[str, str, int]:
    return ti["dag_run_id"], ti["task_id"], int(ti.get("map_index", -1))


def first_finished_after(tis: list[dict], since: dt.datetime) -> dt.datetime | None:
    """End of the first task instance that started at or after `since` and has finished."""
    ends = [parse_ts(t.get("end_date")) for t in tis
            if t.get("state") in FINISHED_TI_STATES and (parse_ts(t.get("start_date")) or since - dt.timedelta(1)) >= since]
    ends = [e for e in ends if e is not None]
    return min(ends) if ends else None


def fate(at_kill: dict, final: dict | None, tries: list[dict], killed_at: dt.datetime | None = None) -> dict:
    """What became of a task instance that was running when the scheduler died: the try that was running,
    how that try was recorded afterwards (and when it ended, in seconds after the kill), and the
    instance's final state and try number."""
    killed_try = int(at_kill["try_number"])
    recorded = next((t for t in tries if int(t["try_number"]) == killed_try), None)
    ended = parse_ts(recorded.get("end_date")) if recorded else None
    return {
        "task": f"{at_kill['task_id']}[{at_kill.get('map_index', -1)}]", "run": at_kill["dag_run_id"],
        "killed_try": killed_try,
        "killed_try_recorded_as": recorded.get("state") if recorded else None,
        "killed_try_ended_s_after_kill": round((ended - killed_at).total_seconds(), 1) if ended and killed_at else None,
        "final_state": final.get("state") if final else None,
        "final_try": int(final["try_number"]) if final else None,
        "tries": [(int(t["try_number"]), t.get("state")) for t in sorted(tries, key=lambda t: int(t["try_number"]))],
    }


def fate_summary(fates: list[dict]) -> str:
    """'2 running → re-run (try 2) and succeeded' style text for the table."""
    if not fates:
        return "no task instance running"
    parts = []
    for f in fates:
        again = f["final_try"] is not None and f["final_try"] > f["killed_try"]
        how = f"re-run as try {f['final_try']}" if again else f"finished in try {f['killed_try']}"
        parts.append(f"{f['task']} try {f['killed_try']} → {f['killed_try_recorded_as']}, {how}: {f['final_state']}")
    return "; ".join(parts)


# --- the private Airflow ----------------------------------------------------------------------------------
class PrivateAirflowConfig(Airflow):
    """The shared service's configuration (services.airflow), with its own home, port and password."""

    def __init__(self, home: Path, port: int, password: str) -> None:
        super().__init__()
        self.home = home
        self.passwords = home / "passwords.json"
        self.port = port
        self.address = f"{self.host}:{port}"
        self._password = password

    def admin_password(self) -> str:
        return self._password


class AirflowComponent(Service):
    """One Airflow component (`airflow <args>`) in its own process group, with the private environment."""

    stop_signal = signal.SIGTERM
    stop_timeout = 30.0
    start_timeout = 300.0

    def __init__(self, name: str, args: list[str], env: dict[str, str], healthy, address: str = "no port") -> None:
        self.name = name
        super().__init__()
        self.address = address
        self.args = args
        self.env = env
        self._healthy = healthy
        self.pgids: list[int] = []  # every group started: orphans of a "process" kill are reaped at the end
        self.orphans: list[int] = []  # left behind by process kills; reaped at the end

    def command(self) -> list[str]:
        return [str(paths.venv_bin("airflow")), *self.args]

    def environment(self) -> dict[str, str]:
        return self.env

    def healthy(self) -> bool:
        return self._healthy()

    def start(self, timeout: float | None = None) -> None:
        super().start(timeout)
        pid = self.pid()
        if pid is not None and pid not in self.pgids:
            self.pgids.append(pid)

    def kill_process(self) -> None:
        """SIGKILL the component's main process only; its children (workers, tasks) live on as orphans."""
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            t0 = time.monotonic()
            while _alive(pid) and time.monotonic() - t0 < 10:
                time.sleep(0.1)

    def kill_tree(self) -> list[int]:
        """SIGKILL the component and every process under it, whatever their process group (Airflow 3's
        task processes lead groups of their own): freeze the tree, collect it again (no fork escapes),
        kill it. Returns the pids killed."""
        pid = self.pid()
        if pid is None:
            return []
        tree = [pid, *descendants(pid, process_table())]
        for p in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGSTOP)
        tree = sorted(set(tree) | set(descendants(pid, process_table())))
        for p in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        t0 = time.monotonic()
        while any(_alive(p) for p in tree) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)
        return tree

    def orphan_candidates(self) -> list[int]:
        """The processes under the component now (what a process kill leaves behind as orphans)."""
        pid = self.pid()
        return descendants(pid, process_table()) if pid is not None else []

    def reap(self, orphans: list[int]) -> None:
        """SIGKILL what we started and outlived its scheduler: the old process groups, and orphans of a
        process kill that are still Airflow processes (not a recycled pid)."""
        for pgid in self.pgids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        for pid in orphans:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                if _alive(pid) and b"airflow" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)


def process_table() -> dict[int, int]:
    """pid → ppid of every live process (from /proc)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, IndexError):
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                if fields[0] != "Z":
                    table[int(entry)] = int(fields[1])
    return table


def _alive(pid: int) -> bool:
    from aldebaran_lab.services.base import pid_alive

    return pid_alive(pid)


class AirflowApi(airflow_api.AirflowApi):
    """The private api-server's REST API, about the campaign's DAG."""

    error = ChaosError

    def runs(self, dag_id: str = DAG_ID, limit: int = 1000) -> list[dict]:
        return super().runs(dag_id, limit)

    def task_instances(self) -> list[dict]:
        return self.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/~/taskInstances?limit=1000")["task_instances"]

    def tries(self, ti: dict) -> list[dict]:
        run, task, index = ti_key(ti)
        return self.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run}/taskInstances/{task}/{index}/tries")[
            "task_instances"]

    def trigger(self, dag_id: str = DAG_ID, conf: dict | None = None) -> str:
        return super().trigger(dag_id, conf)


def component_heartbeat(api: AirflowApi, part: str = "scheduler") -> dt.datetime | None:
    """The latest heartbeat of the scheduler / triggerer / dag_processor as /monitor/health reports it."""
    return parse_ts(api.health().get(part, {}).get(f"latest_{part}_heartbeat"))


@dataclass
class PrivateAirflow:
    """The private Airflow's REST API and components (each killable and restartable on its own)."""

    api: "AirflowApi"
    api_server: "AirflowComponent"
    processor: "AirflowComponent"
    scheduler: "_Heartbeating"
    triggerer: "_Heartbeating | None" = None

    def components(self) -> list:
        return [c for c in (self.api_server, self.processor, self.scheduler, self.triggerer) if c is not None]


@contextlib.contextmanager
def private_airflow(run_dir: Path, env_extra: dict[str, str], port: int, triggerer: bool = False):
    """api-server, dag-processor, scheduler (and with `triggerer`, the triggerer, which runs the
    alert_dispatch DAG's Kafka AssetWatcher) of a private Airflow; yields a :class:`PrivateAirflow`."""
    home = run_dir / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    dags = run_dir / "airflow-dags"
    dags.mkdir(exist_ok=True)
    link = dags / "alert_dispatch.py"
    if not link.exists():
        link.symlink_to(paths.ROOT / "dags" / "alert_dispatch.py")
    (run_dir / "airflow-plugins").mkdir(exist_ok=True)
    password = secrets.token_urlsafe(24)
    config = PrivateAirflowConfig(home, port, password)
    config.prepare()
    env = config.environment()
    # env_extra is built from this process's environment, which a test session may have pointed at its own
    # Airflow home and metadata DB (tests/airflow_home.py): only its non-Airflow settings and connections
    # pass, so the private Airflow never migrates or reads another instance's database.
    env.update({k: v for k, v in env_extra.items()
                if not (k.startswith("AIRFLOW__") or k in ("AIRFLOW_HOME", "AIRFLOW_CONFIG"))})
    env.update({
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(run_dir / "airflow-plugins"),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": str(ORPHAN_CHECK_SECONDS),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(TI_HEARTBEAT_TIMEOUT),
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(port + 713),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(port + 714),
    })
    env.pop("AIRFLOW__CORE__FERNET_KEY", None)  # nothing encrypted here; never the shared instance's key
    api = AirflowApi(f"http://{config.address}", password)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(logs / "airflow-db-migrate.log", "ab") as out:
        rc = subprocess.run([str(paths.venv_bin("airflow")), "db", "migrate"], env=env, stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=600).returncode
    if rc != 0:
        raise ChaosError(f"airflow db migrate exited {rc}; see {logs / 'airflow-db-migrate.log'}")
    log.info("private Airflow: db migrated in %.0fs", time.monotonic() - t0)
    api_server = AirflowComponent(
        "airflow-api-server", ["api-server", "--host", config.host, "--port", str(port)], env,
        lambda: api.health().get("metadatabase", {}).get("status") == "healthy", config.address)
    processor = AirflowComponent("airflow-dag-processor", ["dag-processor"], env, lambda: processor.running())
    scheduler = _Heartbeating("airflow-scheduler", ["scheduler", "--skip-serve-logs"], env, api, "scheduler")
    airflow = PrivateAirflow(api, api_server, processor, scheduler)
    if triggerer:
        airflow.triggerer = _Heartbeating("airflow-triggerer", ["triggerer", "--skip-serve-logs"], env, api,
                                          "triggerer")
    try:
        api_server.start()
        processor.start()
        wait_for(lambda: _dag_registered(api), 300, 2.0, f"DAG {DAG_ID} parsed by the private dag-processor")
        scheduler.start()
        if airflow.triggerer is not None:
            airflow.triggerer.start()
        yield airflow
    finally:
        for c in reversed(airflow.components()):
            c.stop()
        for c in airflow.components():
            c.reap(c.orphans)


class _Heartbeating(AirflowComponent):
    """A component whose health is its heartbeat in the API's /monitor/health (`part`: scheduler,
    triggerer): healthy = a heartbeat newer than its latest start (the killed one's last is older)."""

    def __init__(self, name, args, env, api: "AirflowApi", part: str) -> None:
        super().__init__(name, args, env, self._beating)
        self.api = api
        self.part = part
        self.started_at: list[dt.datetime] = []

    def _beating(self) -> bool:
        beat = component_heartbeat(self.api, self.part)
        return beat is not None and bool(self.started_at) and beat >= self.started_at[-1]

    def start(self, timeout: float | None = None) -> None:
        self.started_at.append(dt.datetime.now(dt.UTC))
        super().start(timeout)


def _dag_registered(api: AirflowApi) -> bool:
    try:
        dag = api.call("GET", f"/api/v2/dags/{DAG_ID}")
    except ChaosError:
        return False
    return not dag.get("is_paused", True)


# --- the campaign ------------------------------------------------------------------------------------------
@dataclass
class KillRecord:
    n: int
    plan: KillPlan
    running_at_kill: list[dict] = field(default_factory=list)
    killed_at: dt.datetime | None = None
    processes: int = 0  # killed (tree) or orphaned (process)
    to_heartbeat_s: float | None = None
    to_next_ti_s: float | None = None


def run(alerts: int = 3000, kills: int = 3, seed: int = 1, mode: str = "full",
        delay: tuple[float, float] = (0.5, 8.0), pause: tuple[float, float] = (5.0, 20.0),
        idle_seconds: float = 12.0, settle_timeout: float = 900.0) -> CampaignResult:
    from aldebaran_capacity.receivers import SmsProvider, WebhookReceiver
    from aldebaran_lab.chaos.outages import private_services

    t0 = time.monotonic()
    result = CampaignResult("kill-scheduler", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    rng = random.Random(seed)
    plans = plan_kills(kills, rng, delay, pause)
    records: list[KillRecord] = []
    secret = secrets.token_urlsafe(24)
    try:
        with private_services(ports=PORTS) as svcs, WebhookReceiver(secret) as webhook, SmsProvider() as sms:
            ws = Workspace.create("kill-scheduler", s3a=False)
            batch = make_alerts(alerts, ws.name)
            repeats = rng.sample(batch, max(1, alerts // 10))
            stream = batch + repeats
            rng.shuffle(stream)
            waves = [stream[len(stream) * i // (kills + 1):len(stream) * (i + 1) // (kills + 1)] for i in range(kills + 1)]
            env_extra = ws.env(
                ALDEBARAN_CHANNELS="webhook,sms",
                **delivery_env(f"{ws.prefix}/deliveries", LEASE_SECONDS,
                               ALDEBARAN_DELIVERY_IDLE_SECONDS=str(idle_seconds)),
                **channel_connections(webhook, secret, sms),
            )
            producer = kio.producer(ws.kafka)

            def publish(wave: list[dict]) -> None:
                kio.produce_all(producer, ws.kafka.alerts_topic, [(a["alert_id"], json.dumps(a)) for a in wave])

            with private_airflow(svcs["run_dir"], env_extra, PORTS["airflow_api"]) as airflow:
                api, scheduler = airflow.api, airflow.scheduler
                result.runs = 1
                triggered: list[str] = []

                def ensure_run() -> None:
                    if not any(r["state"] in ACTIVE_RUN_STATES for r in api.runs()):
                        triggered.append(api.trigger())

                for n, plan in enumerate(track(plans, "kill-scheduler", unit="kills", logger=log), 1):
                    publish(waves[n - 1])
                    ensure_run()
                    wait_for(lambda: any(t["task_id"] == "dispatch" and t["state"] == "running"
                                         for t in api.task_instances()),
                             600, 0.5, f"kill {n}: a dispatch task instance running")
                    time.sleep(plan.delay)
                    rec = KillRecord(n, plan)
                    rec.running_at_kill = [t for t in api.task_instances() if t["state"] == "running"]
                    rec.killed_at = dt.datetime.now(dt.UTC)
                    if plan.mode == "tree":
                        rec.processes = len(scheduler.kill_tree()) - 1
                    else:
                        orphans = scheduler.orphan_candidates()
                        scheduler.orphans.extend(orphans)
                        rec.processes = len(orphans)
                        scheduler.kill_process()
                    result.faults += 1
                    log.info("kill %d: SIGKILL scheduler (%s) with %d task instance(s) running; down %.1fs",
                             n, plan.mode, len(rec.running_at_kill), plan.pause)
                    time.sleep(plan.pause)
                    restart = dt.datetime.now(dt.UTC)
                    t_restart = time.monotonic()
                    scheduler.start()
                    result.runs += 1
                    rec.to_heartbeat_s = time.monotonic() - t_restart
                    ensure_run()
                    # (an orphan may finish the active run by itself: then a new run gives the scheduler work)
                    wait_for(lambda: first_finished_after(api.task_instances(), restart) is not None, 900, 1.0,
                             f"kill {n}: a task instance started after the restart finishing", on_tick=ensure_run)
                    rec.to_next_ti_s = time.monotonic() - t_restart
                    log.info("kill %d: heartbeat %.1fs, next task instance finished %.1fs after the restart",
                             n, rec.to_heartbeat_s, rec.to_next_ti_s)
                    result.recovery_s.append(rec.to_heartbeat_s)
                    records.append(rec)
                last_restart = time.monotonic()

                # The last wave, then runs until every delivery record is settled.
                publish(waves[-1])
                ledger = campaign_ledger(ws.store, f"{ws.prefix}/deliveries", LEASE_SECONDS)
                ids = [a["alert_id"] for a in batch]
                states: dict[str, dict[str, str]] = {}

                def all_settled() -> bool:
                    if not unsettled(ws.kafka, ledger, SETTLED_STATES):
                        return True
                    ensure_run()
                    return False

                settle_s = wait_for(all_settled, settle_timeout, 5.0, "every delivery settled")
                states.update({ch: ledger.states(ch) for ch in SETTLED_STATES})  # one scan, for the verdict
                if settled(states, ids, SETTLED_STATES):
                    failures.append(f"the consumer groups said settled, the ledger says not: "
                                    f"{settled(states, ids, SETTLED_STATES)}")
                settle_after_restart = time.monotonic() - last_restart
                wait_for(lambda: not any(r["state"] in ACTIVE_RUN_STATES for r in api.runs()), 300, 2.0,
                         "the last DAG run finished")
                final_tis = {ti_key(t): t for t in api.task_instances()}
                run_states = {r["dag_run_id"]: r["state"] for r in api.runs()}
                fates_per_kill = []
                for rec in records:
                    fates_per_kill.append([fate(t, final_tis.get(ti_key(t)), api.tries(t), rec.killed_at)
                                           for t in rec.running_at_kill])

            # --- verdict (the receivers' counts and the ledger) ---
            verdict = DeliveryVerdict.from_receivers(batch, webhook, sms, states)
            failures.extend(verdict.failures())
            unfinished = [f for fs in fates_per_kill for f in fs if f["final_state"] != "success"]
            if unfinished:
                failures.append(f"{len(unfinished)} task instance(s) running at a kill did not end in success")
            result.lost = verdict.lost
            result.duplicated = verdict.duplicated
            result.resent_same_key = verdict.resent_same_key
            result.details = {
                "alerts": alerts, "repeats_on_topic": len(repeats), "waves": [len(w) for w in waves],
                "scheduler_starts": result.runs, "dag_runs_triggered": len(triggered),
                "dag_runs": dict(sorted(run_states.items())),
                "kills": [{"n": r.n, "mode": r.plan.mode, "delay_s": r.plan.delay, "pause_s": r.plan.pause,
                           "processes_killed_or_orphaned": r.processes,
                           "restart_to_heartbeat_s": round(r.to_heartbeat_s, 1),
                           "restart_to_next_ti_finished_s": round(r.to_next_ti_s, 1),
                           "running_at_kill": fates} for r, fates in zip(records, fates_per_kill)],
                "settled_s_after_last_restart": round(settle_after_restart, 1), "settle_wait_s": round(settle_s, 1),
                **verdict.details(),
                "private_airflow": {"executor": "LocalExecutor", "database": "SQLite", "parallelism": 4,
                                    "orphaned_tasks_check_interval_s": ORPHAN_CHECK_SECONDS,
                                    "task_instance_heartbeat_timeout_s": TI_HEARTBEAT_TIMEOUT,
                                    "delivery_lease_s": LEASE_SECONDS, "dispatch_idle_s": idle_seconds,
                                    "triggerer": "not run (DAG runs triggered through the REST API)"},
                "failures": failures,
            }
            for r, fates in zip(records, fates_per_kill):
                result.rows.append({
                    "scenario": f"kill {r.n}: SIGKILL scheduler {KILL_TEXT[r.plan.mode]}, down {r.plan.pause:.0f} s — "
                                + fate_summary(fates),
                    "runs": 1, "faults": 1, "lost": "–", "duplicated": "–",
                    "recovery": f"restart → heartbeat {r.to_heartbeat_s:.1f} s, → next task instance finished "
                                f"{r.to_next_ti_s:.1f} s"})
            settle = f"{settle_after_restart:.1f} s from the last restart to all records settled"
            result.rows.extend(verdict.rows(result.runs, result.faults, settle))
            log.info("kill-scheduler: heartbeat after restart %s", recovery_text(result.recovery_s))
            ws.cleanup()
    except ChaosError as exc:
        failures.append(str(exc))
        result.details["failures"] = failures
        result.lost = -1
    return result.finish(t0)
