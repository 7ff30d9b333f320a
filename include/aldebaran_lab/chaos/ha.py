"""`aldebaran chaos ha`: on the HA profile (`make up-ha`), under a steady end-to-end load in the original
publisher's mix, SIGKILL one component at a time and measure what the recipients see (the failover
target: nothing lost, nothing duplicated, processing back within 10 s).

    1. the campaign's own topics (replication 3, min ISR 2) on the HA brokers, its checkpoint, books and
       ledger on the erasure-coded MinIO — every client through the profile's balancer (minio-lb), so
       the MinIO node killed, MINIO_VICTIM, is minio-1: the node a single-endpoint client would have used;
    2. an active auditor and a warm standby (failover.py's flags, s3a:// checkpoint) as applications of the
       HA Spark master, one executor of two cores each (a whole worker each); a pair of
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
import threading
import time

from aldebaran.audit import reference
from aldebaran.exceptions import ObjectStoreError, ServiceError
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.runtime.progress import Progress
from aldebaran_capacity.bench.harness import percentile
from aldebaran_lab.chaos import ha_probes
from aldebaran_lab.chaos.common import (
    CampaignResult, ChaosError, Workspace, bus_connection, bus_verdict, campaign_ledger, caught_up, committed,
    delivery_env, unsettled, wait_for,
)
from aldebaran_lab.chaos.failover import LEASE_SECONDS
from aldebaran_lab.chaos.ha_load import (
    LADDER, expected_alerts, find_rate, load_result, read_alerts, start_load, trade_to_alert, warm_up,
)
from aldebaran_lab.chaos.ha_measure import Fault, commit_times, fault_figures, misses, phases, row, section
from aldebaran_lab.chaos.ha_platform import CHANNELS, Platform, profile_env
from aldebaran_lab.chaos.receipts import promise_of, recipient
from aldebaran_lab.chaos.under_load import EVENTS_PER_ORDER
from aldebaran_lab.services import ha

log = logging.getLogger(__name__)

# The auditor last: a new standby's Spark start is the slowest restore (minutes on a loaded machine).
COMPONENTS = ("kafka", "minio", "dispatcher", "scheduler", "triggerer", "api-server", "spark-master", "spark-worker",
              "auditor")
LABELS = {"kafka": "Kafka broker (the KRaft controller)", "minio": "MinIO node", "auditor": "active auditor",
          "dispatcher": "streaming dispatcher", "scheduler": "Airflow scheduler", "triggerer": "Airflow triggerer",
          "api-server": "Airflow api-server",
          "spark-master": "Spark master", "spark-worker": "Spark worker (the active auditor's executor)"}
# A slot's length past `down_s`: what restarting the member takes here, and some settling (seconds).
SLOT_EXTRA = {"auditor": 75.0, "scheduler": 60.0, "triggerer": 60.0, "api-server": 60.0}
SLOT_DEFAULT = 45.0
SETTLE_S = 15.0  # at least this long between a member back and the next kill (the schedule slips if need be)
MARGIN_S = 30.0  # load after the last slot's planned end
# The schedule slips when members come back late or a replaced standby takes long to prefetch (2026-11-30
# 09:29: members back 10-76 s after their kill, a new standby ~110 s to its first prefetch, and the load ended
# before the auditor's slot). The load is planned this much longer than the slots; what is left after the
# last fault is only load.
SLIP = 1.35
MINIO_VICTIM = "minio-1"  # the node that was the clients' endpoint before the balancer (minio-lb)


def member_fault(name: str, down_s: float, patience: float,
                 probe: ha_probes.Probe | None = None) -> tuple[float | None, str]:
    """SIGKILL a member of the profile (`probe` started at once), leave it dead `down_s`, start it again:
    (kill → healthy, note). A member slower than its start timeout (a loaded machine) is waited for up to
    `patience` s more."""
    t0 = time.time()
    ha.kill(name)
    if probe is not None:
        probe.start()
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


def inject(component: str, platform: Platform, down_s: float, step_timeout: float,
           probe_for) -> tuple[Fault, ha_probes.Probe | None]:
    """Kill `component`, bring it (or its replacement) back: the Fault, its window not closed yet, and the
    probe that notes when the platform noticed (`probe_for(component, member)`, started at the kill; None
    for a member nothing on the data path waits for: its detection is the kill)."""
    if component == "auditor":
        probe = probe_for(component, "")
        fault = Fault(LABELS[component], "", time.time())
        fault.member = platform.kill_active()
        probe.start()
        time.sleep(down_s)
        platform.restore_standby(step_timeout)
        fault.restored_s = time.time() - fault.start
        return fault, probe
    if component == "dispatcher":
        victim = platform.dispatchers[0]
        probe = probe_for(component, victim.name)
        fault = Fault(LABELS[component], victim.name, time.time())
        with platform.lock:
            platform.held.add(victim.name)
            victim.kill()
        probe.start()
        time.sleep(down_s)
        with platform.lock:
            platform.held.discard(victim.name)
            victim.start()
        wait_for(victim.running, step_timeout, 0.5, f"dispatcher {victim.name} running again")
        fault.restored_s = time.time() - fault.start
        return fault, probe
    note = ""
    if component == "kafka":
        name = ha.kafka_controller()
    elif component == "minio":
        name = MINIO_VICTIM
    elif component == "spark-worker":
        found = ha_probes.active_worker(f"aldebaran-{platform.ws.name}")
        name, note = found or "spark-worker-1", "" if found else "the active auditor's worker not found: killed spark-worker-1"
    else:
        name = {"scheduler": "airflow-scheduler-1", "triggerer": "airflow-triggerer-1",
                "api-server": "airflow-api-server", "spark-master": "spark-master"}[component]
    probe = probe_for(component, name)
    fault = Fault(LABELS[component], name, time.time(), note=note)
    if probe is None:
        fault.detected = fault.start
    if component in ("scheduler", "triggerer"):
        peer = name[:-1] + "2"
        checker = threading.Timer(down_s / 2, lambda: setattr(fault, "note", f"{peer} healthy while {name} was "
                                                              f"dead: {ha.member(peer).healthy()}"))
        checker.start()
    fault.restored_s, failed = member_fault(name, down_s, step_timeout, probe)
    fault.note = "; ".join(x for x in (fault.note, failed) if x)
    return fault, probe


def slots(components, down_s: float) -> list[float]:
    """Each component's slot length (s): down, restart, settle."""
    return [down_s + SLOT_EXTRA.get(c, SLOT_DEFAULT) for c in components]


def run(rate: float | None = None, components=COMPONENTS, down_s: float = 10.0, warmup_s: float = 60.0,
        baseline_s: float = 30.0, seed: int = 1, mode: str = "full", producers: int = 1,
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
    seconds = (warmup_s + baseline_s + sum(lengths)) * SLIP + MARGIN_S
    ws = Workspace.create("ha", s3a=True)
    group, prefix, bus_topic = f"chaos-{ws.name}", f"{ws.prefix}/deliveries", f"chaos-{ws.name}-bus"
    receiver = ReceiverProcess("webhook")
    platform: Platform | None = None
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    progress = Progress("chaos ha", len(components), unit="faults", logger=log)
    try:
        kadmin.ensure_topics(ws.kafka, [bus_topic], partitions=2)
        receiver.start()
        conns = {"webhook": {"conn_type": "http", "host": receiver.url, "password": receiver.secret,
                             "extra": {"endpoint": "/alerts", "timeout": 10}},
                 "bus": bus_connection(ws.kafka.bootstrap_servers, bus_topic)}
        denv = ws.env(ALDEBARAN_CHANNELS=",".join(CHANNELS),
                      **{f"AIRFLOW_CONN_ALDEBARAN_{c.upper()}": json.dumps(conn) for c, conn in conns.items()},
                      **delivery_env(prefix, LEASE_SECONDS, ALDEBARAN_DELIVERY_GROUP=group))
        platform = Platform(ws, values["ALDEBARAN_SPARK_MASTER"], int((rate or max(LADDER)) * 5), denv)
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

        # --- the rate: the highest of the ladder with trade → alert p99 within the limit, no fault ---
        ladder = None
        if rate is None:
            warm = warm_up(ws, min(LADDER), seed=seed, producers=producers)
            wait_for(lambda: platform.standby is not None and platform.warm(platform.standby), step_timeout, 0.5,
                     "a warm standby before the rate ladder")
            ladder = find_rate(ws, producers=producers, seed=seed) | {"warm_up": warm}
            rate = ladder["rate"]
            if not ladder["met"]:
                failures.append(f"no rate of the ladder kept trade → alert p99 ≤ {ladder['limit_ms']:.0f} ms: "
                                f"{ladder['steps']}")
        orders = max(1, int(rate * seconds) // EVENTS_PER_ORDER)
        log.info("chaos ha: %d orders (%d trades at %.0f/s, %.0f s)", orders, orders * EVENTS_PER_ORDER, rate, seconds)
        admin = kadmin.admin(ws.kafka)
        probe_for = ha_probes.probes(platform, admin, [f"{group}-{c}" for c in CHANNELS],
                           [ws.kafka.trades_topic, ws.kafka.alerts_topic, bus_topic], step_timeout)
        detections: list[ha_probes.Probe | None] = []

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
            # Every fault starts from a whole platform: a standby replaced after the last fault (a handover,
            # a death) is waited for until it has prefetched the books, or the next kill would measure a
            # cold start (12.4 s of book loading in the first batch here).
            wait_for(lambda: platform.standby is not None and platform.warm(platform.standby), step_timeout, 0.5,
                     f"a warm standby before the {component} fault")
            if all(p.poll() is not None for p in load):
                failures.append(f"the load ended before the {component} fault: a longer slot or load needed")
                break
            (faults[-1] if faults else baseline).end = time.time()
            fault, probe = inject(component, platform, down_s, step_timeout, probe_for)
            detections.append(probe)
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
        for fault, probe in zip(faults, detections):
            if probe is not None:
                fault.detected = probe.stop()
        trades = load_result(load, ws)
        log.info("chaos ha: %s trades in %s s (%s/s)", f"{trades['sent']:,}", trades["elapsed_s"],
                 f"{trades['achieved_per_s']:,}")

        # --- catch up, settle, stop ---
        ends = kio.end_offsets(ws.kafka, ws.kafka.trades_topic)
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
        seen, where, raw = read_alerts(ws)
        ids = set(expected)
        # The rate ladder's alerts (their trades all produced before the load) are not the reference's.
        probe_ids = {i for i, a in seen.items() if int(a["trigger_event_ts"]) < load_t0 * 1000 and i not in ids}
        topic = {"expected": len(ids), "received_raw": raw, "unique": len(seen), "rate_ladder": len(probe_ids),
                 "missing": len(ids - seen.keys()), "extra": len(seen.keys() - ids - probe_ids),
                 "changed": sum(1 for i in ids & seen.keys() if reference.key(seen[i]) != expected[i])}
        if topic["missing"] or topic["extra"] or topic["changed"]:
            failures.append(f"alerts topic differs from the reference: {topic}")
        trigger_ms = {i: int(a["trigger_event_ts"]) for i, a in seen.items() if i in ids}
        web = receiver.stats(summary=False)
        bus, bus_first = bus_verdict(ws.kafka, bus_topic, ids)
        bus["unexpected"] -= len(probe_ids & bus_first.keys())
        received_at = {"webhook": {i: t for i, t in web["received_at"].items() if i in ids},
                       "bus": {i: t for i, t in bus_first.items() if i in ids}}
        missing = {r: ids - at.keys() for r, at in received_at.items()}
        recipients = {
            "webhook": {**recipient(web, ids, promise_of("webhook")), "resent_same_key_deduplicated": web["duplicates"],
                        "unexpected": len(set(web["received_at"]) - ids - probe_ids)},
            "bus": bus,
        }
        result.lost = sum(r["lost"] for r in recipients.values())
        result.duplicated = sum(r["duplicated"] for r in recipients.values())
        result.resent_same_key = sum(r["resent_same_key"] for r in recipients.values())
        commits = commit_times(samples)
        # The paths a kill can stop: the auditor's commits, each recipient's receipts per alerts partition.
        paths: dict[str, list[float]] = {"auditor batches": commits}
        for name, at in received_at.items():
            for i, t in at.items():
                paths.setdefault(f"{name} p{where[i][0]}", []).append(t)
        latency = [(produced, ms) for _, produced, ms in trade_to_alert({i: seen[i] for i in ids & seen.keys()}, where)]
        base = fault_figures(baseline, commits, received_at, trigger_ms, missing, {})
        base_lat = [ms for trig, _, ms in trade_to_alert({i: seen[i] for i in ids & seen.keys()}, where)
                    if baseline.start <= trig <= baseline.end]
        baseline_p99 = round(percentile(base_lat, 99)) if base_lat else None
        baseline.detected = (baseline.start + baseline.end) / 2  # no kill: the same phases, from its middle
        baseline.start = baseline.detected
        base |= phases(baseline, paths, latency, baseline_p99)
        entries = [fault_figures(f, commits, received_at, trigger_ms, missing, {}) | phases(f, paths, latency, baseline_p99)
                   for f in faults]
        for e in entries:
            if m := misses(e):
                log.warning("chaos ha: %s: target missed (%s)", e["component"], ", ".join(m))
        result.recovery_s = [e["max_gap_s"] for e in entries]
        result.rows = [row(e, 1) for e in entries] + [
            {**row(base, 0), "scenario": "none (the baseline slot's middle, no fault)", "faults": 0}] + [
            {"scenario": f"whole run at the {name} recipient: {r['received']:,} of {r['expected']:,} alerts",
             "runs": result.runs, "faults": result.faults, "lost": r["lost"], "duplicated": r["duplicated"],
             "resent_same_key": r["resent_same_key"],
             "recovery": f"everything settled {settled_s:.0f} s after the load ended"}
            for name, r in recipients.items()]
        about = {"command": "", "mode": mode, "started": result.started, "rate_ladder": ladder,
                 "achieved_trades_per_s": trades["achieved_per_s"], "trades": trades["sent"],
                 "load_average_before": result.load_before, "minio_node_killed": MINIO_VICTIM,
                 "down_s": down_s, "lost_whole_run": result.lost, "duplicated_whole_run": result.duplicated,
                 "baseline": {k: base.get(k) for k in ("detect_s", "takeover_s", "takeover_path", "catch_up_s",
                                                         "max_gap_s", "p99_ms")}}
        result.details = {
            "offered_trades_per_s": rate, "trades": trades, "orders": orders, "producer_processes": producers,
            "components": list(components), "down_s": down_s, "slots_s": lengths, "alerts_expected": len(ids),
            "max_offsets_per_trigger": platform.max_offsets, "auditors_started": len(platform.auditors),
            "batches_committed": samples[-1][1] if samples else 0, "settled_s_after_load": round(settled_s, 1),
            "alerts_topic": topic, "recipients": recipients, "baseline": base, "faults": entries,
            "rate_ladder": ladder, "unexpected_exits": platform.deaths, "handovers": platform.handovers, "failures": failures,
            "results": section(entries, offered_rate=rate, baseline_p99_ms=baseline_p99, **about),
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
            kadmin.delete_topics(ws.kafka, [bus_topic])
        finally:
            ws.cleanup()
