"""`aldebaran chaos ha`: on the HA profile (`make up-ha`), under a steady end-to-end load in the original
publisher's mix, SIGKILL one component at a time and measure what the recipients see (the failover
target: nothing lost, nothing duplicated, processing back within 10 s).

    1. the campaign's own topics (replication 3, min ISR 2) on the HA brokers, its checkpoint, books and
       ledger on the erasure-coded MinIO — every client through the profile's balancer (minio-lb), so
       the MinIO node killed, MINIO_VICTIM, is minio-1: the node a single-endpoint client would have used;
    2. an active auditor and a warm standby (failover.py's flags, s3a:// checkpoint) as applications of the
       HA Spark master, one executor core each (spark.cores.max=1: each on a worker of its own); a pair of
       streaming dispatchers (channels webhook and bus, one consumer group per channel: they split its
       partitions); a webhook receiver process and a Kafka bus topic;
    3. `producers` processes produce the mix at `rate` trades/s (under_load's producer) for the whole run;
    4. after a warm-up and a baseline slot without a fault, one slot per component of `components`, in turn:
       SIGKILL, the member left dead `down_s`, then started again as its supervisor would (services.ha.start
       waits until it is healthy; a killed active auditor's standby takes over by itself and a new standby is
       started; a killed dispatcher's partner takes its partitions by itself, then it is restarted). A
       fault's window runs from its kill to the next slot's;
    5. meanwhile a sampler notes the checkpoint's committed batches every 0.5 s, and a watchdog restarts an
       auditor or dispatcher that died by itself (a finding, in the details);
    6. after the load: the auditor catches up, the channels settle, everything stops cleanly; the alerts
       topic is compared with the reference model, and each fault gets its figures (ha_measure).

The Airflow members (schedulers, triggerers) are not on this data path: the campaign supervises the auditor
and the dispatchers itself, as dispatch_supervisor/auditor_supervisor would. Their slots measure that the
data path does not notice them, and note whether the surviving peer stayed healthy.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.request

from aldebaran import kafka_admin, kafka_io, paths, reference
from aldebaran.exceptions import ObjectStoreError, ServiceError
from aldebaran.progress import Progress
from aldebaran_lab.chaos.common import (
    AuditorProcess, CampaignResult, ChaosError, DispatcherProcess, Workspace, auditor_args, bus_connection,
    bus_verdict, campaign_ledger, caught_up, committed, delivery_env, unsettled, wait_for,
)
from aldebaran_lab.chaos.failover import LEASE_SECONDS, READY_LINE, STANDBY
from aldebaran_lab.chaos.ha_measure import Fault, commit_times, fault_figures, misses, row, section
from aldebaran_lab.chaos.under_load import EVENTS_PER_ORDER, TTL_SECONDS, expected_keys
from aldebaran_lab.services import ha

log = logging.getLogger(__name__)

# The auditor last: a new standby's Spark start is the slowest restore (minutes on a loaded machine).
COMPONENTS = ("kafka", "minio", "dispatcher", "scheduler", "triggerer", "spark-master", "spark-worker", "auditor")
LABELS = {"kafka": "Kafka broker (the KRaft controller)", "minio": "MinIO node", "auditor": "active auditor",
          "dispatcher": "streaming dispatcher", "scheduler": "Airflow scheduler", "triggerer": "Airflow triggerer",
          "spark-master": "Spark master", "spark-worker": "Spark worker (the active auditor's executor)"}
# A slot's length past `down_s`: what restarting the member takes here, and some settling (seconds).
SLOT_EXTRA = {"auditor": 75.0, "scheduler": 60.0, "triggerer": 60.0}
SLOT_DEFAULT = 45.0
SETTLE_S = 15.0  # at least this long between a member back and the next kill (the schedule slips if need be)
MARGIN_S = 30.0  # load after the last slot's planned end
MINIO_VICTIM = "minio-1"  # the node that was the clients' endpoint before the balancer (minio-lb)
CHANNELS = ("webhook", "bus")
ONE_CORE = "--conf spark.cores.max=1 pyspark-shell"  # each auditor application: one executor core


@contextlib.contextmanager
def profile_env():
    """`.env.ha` over this process's environment while the campaign runs (its subprocesses inherit it):
    the HA brokers, MinIO endpoint and credentials, Spark master — whatever `.env` said."""
    values = ha.read_env()
    if not values:
        raise ChaosError("no .env.ha: start the HA profile first (`make up-ha`)")
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield values
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Platform:
    """The campaign's auditors (active + warm standby) and dispatcher pair. `watch` (the watchdog) restarts
    what died by itself; a deliberately killed process is held down until the campaign restarts it."""

    def __init__(self, ws: Workspace, master: str, max_offsets: int, dispatcher_env: dict[str, str]) -> None:
        self.ws, self.master, self.max_offsets = ws, master, max_offsets
        self.lock = threading.RLock()
        self.auditors: list[AuditorProcess] = []
        self.active: AuditorProcess | None = None
        self.standby: AuditorProcess | None = None
        self.dispatchers = [DispatcherProcess(f"chaos-{ws.name}-{i}", dispatcher_env, ws.logs / f"dispatcher-{i}.log",
                                              CHANNELS, ws.store) for i in (1, 2)]
        self.held: set[str] = set()
        self.deaths: list[str] = []

    def new_auditor(self, standby: bool) -> AuditorProcess:
        extra = ["--lease-seconds", str(LEASE_SECONDS), "--master", self.master, *(STANDBY if standby else [])]
        proc = AuditorProcess(self.ws.env(PYSPARK_SUBMIT_ARGS=ONE_CORE),
                              auditor_args(self.ws, max_offsets=self.max_offsets, ttl_seconds=TTL_SECONDS, extra=extra),
                              self.ws.logs / f"auditor-{len(self.auditors) + 1}.log")
        self.auditors.append(proc)
        proc.start()
        return proc

    @staticmethod
    def ready(proc: AuditorProcess) -> bool:
        return READY_LINE in proc.log_path.read_text(errors="replace")

    def watch(self) -> None:
        with self.lock:
            if self.active is not None and not self.active.alive():
                self.deaths.append(f"active auditor rc {self.active.returncode()}: {self.active.tail(3)[-300:]}")
                # Its standby takes the lease by itself; a new standby (or, without one, a cold start).
                self.active, self.standby = (self.standby, None) if self.standby else (self.new_auditor(False), None)
            if (self.standby is None and "standby" not in self.held) or (self.standby and not self.standby.alive()):
                if self.standby is not None:
                    self.deaths.append(f"standby auditor rc {self.standby.returncode()}")
                self.standby = self.new_auditor(True)
            for d in self.dispatchers:
                if d.name not in self.held and not d.alive():
                    self.deaths.append(f"dispatcher {d.name} rc {d.returncode()}: {d.tail(3)[-300:]}")
                    d.start()

    def kill_active(self) -> str:
        with self.lock:
            victim, self.held = self.active, self.held | {"standby"}
            victim.kill()
            self.active, self.standby = self.standby, None  # the standby takes the lease by itself
        return victim.log_path.stem

    def restore_standby(self, timeout: float) -> None:
        with self.lock:
            self.held.discard("standby")
            self.standby = self.new_auditor(True)
        wait_for(lambda: self.ready(self.standby), timeout, 0.5, "the new standby's Spark session up")

    def stop(self, failures: list[str]) -> None:
        with self.lock:
            self.held |= {"standby", *(d.name for d in self.dispatchers)}
            for p in (self.standby, self.active):
                rc = p.stop() if p is not None else None
                if rc not in (0, None):
                    failures.append(f"auditor: clean stop exited {rc}: {p.tail(5)}")
            for d in self.dispatchers:
                if (rc := d.stop()) != 0:
                    failures.append(f"dispatcher {d.name}: clean stop exited {rc}")

    def kill_all(self) -> None:
        with self.lock:
            self.held |= {"standby", *(d.name for d in self.dispatchers)}
            for p in self.auditors:
                if p.alive():
                    p.kill()
            for d in self.dispatchers:
                if d.alive():
                    d.kill()
                d.forget()


def active_worker(app_name: str) -> str | None:
    """The HA Spark worker running the oldest live application named `app_name` (the active auditor: a
    standby is always started after it), from the master's and workers' JSON status pages."""
    def get(port: int) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as resp:
            return json.load(resp)

    try:
        apps = sorted((a["starttime"], a["id"]) for a in get(ha.LAYOUT.spark_ui_port).get("activeapps", [])
                      if a.get("name") == app_name)
        for i, port in enumerate(ha.LAYOUT.spark_worker_ui_ports, start=1):
            if apps and any(e.get("appid") == apps[0][1] for e in get(port).get("executors", [])):
                return f"spark-worker-{i}"
    except (OSError, ValueError) as exc:
        log.warning("chaos ha: the Spark status pages did not answer: %s", exc)
    return None


def member_fault(name: str, down_s: float, patience: float) -> tuple[float | None, str]:
    """SIGKILL a member of the profile, leave it dead `down_s`, start it again: (kill → healthy, note). A
    member slower than its start timeout (a loaded machine) is waited for up to `patience` s more."""
    t0 = time.time()
    ha.kill(name)
    time.sleep(down_s)
    try:
        ha.start(name)
    except ServiceError as exc:
        member = ha.member(name)
        try:
            wait_for(member.healthy, patience, 1.0, f"{name} healthy")
        except ChaosError:
            return None, f"restart failed: {str(exc).splitlines()[0]}"
        return time.time() - t0, f"healthy only after its start timeout ({member.start_timeout:.0f} s)"
    return time.time() - t0, ""


def inject(component: str, platform: Platform, down_s: float, step_timeout: float) -> Fault:
    """Kill `component`, bring it (or its replacement) back; the Fault, its window not closed yet."""
    if component == "auditor":
        fault = Fault(LABELS[component], "", time.time())
        fault.member = platform.kill_active()
        time.sleep(down_s)
        platform.restore_standby(step_timeout)
        fault.restored_s = time.time() - fault.start
        return fault
    if component == "dispatcher":
        victim = platform.dispatchers[0]
        fault = Fault(LABELS[component], victim.name, time.time())
        with platform.lock:
            platform.held.add(victim.name)
            victim.kill()
        time.sleep(down_s)
        with platform.lock:
            platform.held.discard(victim.name)
            victim.start()
        wait_for(victim.running, step_timeout, 0.5, f"dispatcher {victim.name} running again")
        fault.restored_s = time.time() - fault.start
        return fault
    note = ""
    if component == "kafka":
        name = ha.kafka_controller()
    elif component == "minio":
        name = MINIO_VICTIM
    elif component == "spark-worker":
        found = active_worker(f"aldebaran-{platform.ws.name}")
        name, note = found or "spark-worker-1", "" if found else "the active auditor's worker not found: killed spark-worker-1"
    else:
        name = {"scheduler": "airflow-scheduler-1", "triggerer": "airflow-triggerer-1",
                "spark-master": "spark-master"}[component]
    fault = Fault(LABELS[component], name, time.time(), note=note)
    if component in ("scheduler", "triggerer"):
        peer = name[:-1] + "2"
        checker = threading.Timer(down_s / 2, lambda: setattr(fault, "note", f"{peer} healthy while {name} was "
                                                              f"dead: {ha.member(peer).healthy()}"))
        checker.start()
    fault.restored_s, failed = member_fault(name, down_s, step_timeout)
    fault.note = "; ".join(x for x in (fault.note, failed) if x)
    return fault


def start_load(ws: Workspace, orders: int, seed: int, rate: float, producers: int) -> list[subprocess.Popen]:
    """under_load's producer processes (`python -m aldebaran_lab.chaos.under_load`), each a share of the mix."""
    err = open(ws.logs / "producer.log", "ab")  # noqa: SIM115 - the children write it until they exit
    return [subprocess.Popen([sys.executable, "-m", "aldebaran_lab.chaos.under_load", "--orders", str(orders),
                              "--seed", str(seed), "--rate", str(rate / producers), "--part", f"{k}/{producers}"],
                             env=ws.env(), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
            for k in range(producers)]


def load_result(procs: list[subprocess.Popen], ws: Workspace) -> dict:
    outs = [(p, p.communicate()[0]) for p in procs]
    if bad := [p.returncode for p, _ in outs if p.returncode != 0]:
        raise ChaosError(f"producer(s) exited {bad}; see {ws.logs / 'producer.log'}")
    parts = [json.loads(out.decode().strip().splitlines()[-1]) for _, out in outs]
    count, seconds = sum(p["count"] for p in parts), max(p["seconds"] for p in parts)
    return {"sent": count, "elapsed_s": round(seconds, 1), "achieved_per_s": round(count / seconds)}


def expected_alerts(orders: int, seed: int, workers: int = 2) -> dict[str, tuple]:
    """under_load.expected_keys over the whole mix, its chunks shared by `workers` processes (~25 s per 20k
    orders and process on this machine under load: a full run's reference would take longer than the run)."""
    from concurrent.futures import ProcessPoolExecutor

    out: dict[str, tuple] = {}
    with ProcessPoolExecutor(workers) as pool:
        for part in pool.map(expected_keys, [orders] * workers, [seed] * workers,
                             [(k, workers) for k in range(workers)]):
            if twice := out.keys() & part.keys():
                raise ChaosError(f"the reference expects alerts {sorted(twice)[:3]} twice")
            out |= part
    return out


def slots(components, down_s: float) -> list[float]:
    """Each component's slot length (s): down, restart, settle."""
    return [down_s + SLOT_EXTRA.get(c, SLOT_DEFAULT) for c in components]


def run(rate: float = 10_000, components=COMPONENTS, down_s: float = 10.0, warmup_s: float = 60.0,
        baseline_s: float = 30.0, seed: int = 1, mode: str = "full", producers: int = 2,
        step_timeout: float = 300.0, catch_up_timeout: float = 1200.0) -> CampaignResult:
    with profile_env() as values:
        bad = [s.name for s in ha.status() if not (s.running and s.healthy)]
        if bad:
            raise ChaosError(f"HA profile: {', '.join(bad)} not running and healthy; `make up-ha` first")
        return _run(values, rate, tuple(components), down_s, warmup_s, baseline_s, seed, mode, producers,
                    step_timeout, catch_up_timeout)


def _run(values, rate, components, down_s, warmup_s, baseline_s, seed, mode, producers, step_timeout,
         catch_up_timeout) -> CampaignResult:
    from aldebaran_capacity.receivers import ReceiverProcess

    t0 = time.monotonic()
    result = CampaignResult("ha", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    lengths = slots(components, down_s)
    seconds = warmup_s + baseline_s + sum(lengths) + MARGIN_S
    orders = max(1, int(rate * seconds) // EVENTS_PER_ORDER)
    ws = Workspace.create("ha", s3a=True)
    group, prefix, bus_topic = f"chaos-{ws.name}", f"{ws.prefix}/deliveries", f"chaos-{ws.name}-bus"
    receiver = ReceiverProcess("webhook")
    platform: Platform | None = None
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    progress = Progress("chaos ha", len(components), unit="faults", logger=log)
    try:
        log.info("chaos ha: %d orders (%d trades at %.0f/s, %.0f s)", orders, orders * EVENTS_PER_ORDER, rate, seconds)
        kafka_admin.ensure_topics(ws.kafka, [bus_topic], partitions=2)
        receiver.start()
        conns = {"webhook": {"conn_type": "http", "host": receiver.url, "password": receiver.secret,
                             "extra": {"endpoint": "/alerts", "timeout": 10}},
                 "bus": bus_connection(ws.kafka.bootstrap_servers, bus_topic)}
        denv = ws.env(ALDEBARAN_CHANNELS=",".join(CHANNELS),
                      **{f"AIRFLOW_CONN_ALDEBARAN_{c.upper()}": json.dumps(conn) for c, conn in conns.items()},
                      **delivery_env(prefix, LEASE_SECONDS, ALDEBARAN_DELIVERY_GROUP=group))
        platform = Platform(ws, values["ALDEBARAN_SPARK_MASTER"], int(rate * 5), denv)
        for d in platform.dispatchers:
            d.start()
        for d in platform.dispatchers:
            wait_for(d.running, step_timeout, 0.5, f"dispatcher {d.name} running")
        platform.active = platform.new_auditor(False)
        wait_for(lambda: committed(ws)[0] > 0 or not platform.active.alive(), step_timeout, 1.0, "the first batch")
        platform.standby = platform.new_auditor(True)
        wait_for(lambda: platform.ready(platform.standby), step_timeout, 0.5, "the standby's Spark session up")

        def sample() -> None:
            while not stop.wait(0.5):
                with contextlib.suppress(ObjectStoreError):  # a missed sample widens the gap, it is no error
                    samples.append((time.time(), committed(ws, patience=2.0)[0]))

        def watchdog() -> None:
            while not stop.wait(1.0):
                platform.watch()

        for target in (sample, watchdog):
            threading.Thread(target=target, daemon=True, name=f"chaos-ha-{target.__name__}").start()

        # --- the load, and one fault per slot ---
        load = start_load(ws, orders, seed, rate, producers)
        load_t0 = time.time()
        time.sleep(warmup_s)
        baseline = Fault("none (baseline, no fault)", "-", time.time())
        moment = warmup_s + baseline_s
        faults: list[Fault] = []
        progress.start()
        for component, length in zip(components, lengths):
            start_at = max(load_t0 + moment, faults[-1].start + (faults[-1].restored_s or 0.0) + SETTLE_S
                           if faults else 0.0)
            time.sleep(max(0.0, start_at - time.time()))
            if all(p.poll() is not None for p in load):
                failures.append(f"the load ended before the {component} fault: a longer slot or load needed")
                break
            (faults[-1] if faults else baseline).end = time.time()
            fault = inject(component, platform, down_s, step_timeout)
            log.info("chaos ha: %s (%s) killed %.0f s into the load; back after %s s %s", fault.component,
                     fault.member, fault.start - load_t0, None if fault.restored_s is None else round(fault.restored_s),
                     fault.note)
            faults.append(fault)
            result.faults += 1
            progress.advance()
            moment += length
        if faults:
            f = faults[-1]
            time.sleep(max(0.0, max(load_t0 + moment, f.start + (f.restored_s or 0.0) + SETTLE_S) - time.time()))
        (faults[-1] if faults else baseline).end = time.time()
        trades = load_result(load, ws)
        log.info("chaos ha: %s trades in %s s (%s/s)", f"{trades['sent']:,}", trades["elapsed_s"],
                 f"{trades['achieved_per_s']:,}")

        # --- catch up, settle, stop ---
        ends = kafka_io.end_offsets(ws.kafka, ws.kafka.trades_topic)
        t_end = time.monotonic()
        # The reference after the load, while the platform catches up (a minute per ~70k orders here: its CPU
        # would otherwise compete with the faults' measurements).
        expected = expected_alerts(orders, seed)
        log.info("chaos ha: %d alerts expected (reference: %.0f s)", len(expected), time.monotonic() - t_end)
        wait_for(lambda: caught_up(ws, ends), catch_up_timeout, 2.0, "the auditor caught up")
        ledger = campaign_ledger(ws.store, prefix, LEASE_SECONDS)
        try:
            wait_for(lambda: not unsettled(ws.kafka, ledger, CHANNELS, group=group), catch_up_timeout, 3.0,
                     "every channel settled")
        except ChaosError as exc:
            failures.append(str(exc))
        settled_s = time.monotonic() - t_end
        stop.set()
        if platform.deaths:
            failures.append(f"{len(platform.deaths)} unexpected exit(s), restarted: {platform.deaths[:3]}")
        platform.stop(failures)
        result.runs = len(platform.auditors) + sum(d.starts for d in platform.dispatchers)

        # --- verdict ---
        seen: dict[str, dict] = {}
        raw = 0
        for m in kafka_io.read_topic(ws.kafka, ws.kafka.alerts_topic, timeout=300):
            a = json.loads(m.value())
            raw += 1
            seen.setdefault(a["alert_id"], a)
        ids = set(expected)
        topic = {"expected": len(ids), "received_raw": raw, "unique": len(seen), "missing": len(ids - seen.keys()),
                 "extra": len(seen.keys() - ids),
                 "changed": sum(1 for i in ids & seen.keys() if reference.key(seen[i]) != expected[i])}
        if topic["missing"] or topic["extra"] or topic["changed"]:
            failures.append(f"alerts topic differs from the reference: {topic}")
        trigger_ms = {i: int(a["trigger_event_ts"]) for i, a in seen.items() if i in ids}
        web = receiver.stats(summary=False)
        bus, bus_first = bus_verdict(ws.kafka, bus_topic, ids)
        received_at = {"webhook": {i: t for i, t in web["received_at"].items() if i in ids},
                       "bus": {i: t for i, t in bus_first.items() if i in ids}}
        missing = {r: ids - at.keys() for r, at in received_at.items()}
        recipients = {
            "webhook": {"expected": len(ids), "received": len(received_at["webhook"]), "lost": len(missing["webhook"]),
                        "duplicated": 0, "resent_same_key_deduplicated": web["duplicates"],
                        "unexpected": len(set(web["received_at"]) - ids)},
            "bus": bus,
        }
        result.lost = sum(r["lost"] for r in recipients.values())
        result.duplicated = sum(r["duplicated"] for r in recipients.values())
        commits = commit_times(samples)
        entries = [fault_figures(f, commits, received_at, trigger_ms, missing, {}) for f in faults]
        base = fault_figures(baseline, commits, received_at, trigger_ms, missing, {})
        for e in entries:
            if m := misses(e):
                log.warning("chaos ha: %s: target missed (%s)", e["component"], ", ".join(m))
        result.recovery_s = [e["max_gap_s"] for e in entries]
        result.rows = [row(e, 1) for e in entries] + [
            {**row(base, 0), "scenario": "none (baseline slot before the first fault)", "faults": 0}] + [
            {"scenario": f"whole run at the {name} recipient: {r['received']:,} of {r['expected']:,} alerts",
             "runs": result.runs, "faults": result.faults, "lost": r["lost"], "duplicated": r["duplicated"],
             "recovery": f"everything settled {settled_s:.0f} s after the load ended"}
            for name, r in recipients.items()]
        about = {"command": "", "mode": mode, "started": result.started, "offered_trades_per_s": rate,
                 "achieved_trades_per_s": trades["achieved_per_s"], "trades": trades["sent"],
                 "load_average_before": result.load_before, "minio_node_killed": MINIO_VICTIM,
                 "down_s": down_s, "lost_whole_run": result.lost, "duplicated_whole_run": result.duplicated}
        result.details = {
            "offered_trades_per_s": rate, "trades": trades, "orders": orders, "producer_processes": producers,
            "components": list(components), "down_s": down_s, "slots_s": lengths, "alerts_expected": len(ids),
            "max_offsets_per_trigger": int(rate * 5), "auditors_started": len(platform.auditors),
            "batches_committed": samples[-1][1] if samples else 0, "settled_s_after_load": round(settled_s, 1),
            "alerts_topic": topic, "recipients": recipients, "baseline": base, "faults": entries,
            "unexpected_exits": platform.deaths, "results": section(entries, **about), "failures": failures,
        }
        return result.finish(t0)
    except ChaosError as exc:
        return result.aborted(failures, exc, t0)
    finally:
        stop.set()
        progress.close()
        if platform is not None:
            platform.kill_all()
        receiver.stop()
        try:
            kafka_admin.delete_topics(ws.kafka, [bus_topic])
        finally:
            ws.cleanup()
