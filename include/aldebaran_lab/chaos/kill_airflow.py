"""`aldebaran chaos kill-triggerer` and `aldebaran chaos kill-api-server`: SIGKILL an Airflow component
(with every process under it) while alerts flow and the real `alert_dispatch` DAG delivers them, restart
it after a pause, and check that every alert still reaches its recipient exactly once.

The shared Airflow is never touched. As kill-scheduler (whose private stack this reuses:
``kill_scheduler.private_airflow``), the campaign starts a Kafka and a MinIO of its own and an Airflow 3
(SQLite, LocalExecutor) run as separate processes — api-server, dag-processor, scheduler **and
triggerer** — on ports found free at start (common.private_ports), with a DAG folder holding only
dags/alert_dispatch.py. Unlike kill-scheduler, nothing triggers DAG runs through the REST API: the
DAG's Kafka AssetWatcher (the provider's AwaitMessageTrigger, run by the triggerer, in its own consumer
group) wakes `alert_dispatch` when alerts arrive, as in production; kill-api-server keeps its 5-minute
schedule as the fallback, kill-triggerer moves it out of the campaign's window (below). Channels:
`webhook` (deduplicates), `sms` (cannot; IN_DOUBT for an operator after a crash)
and `sms_lookup` (cannot; the provider's lookup settles IN_DOUBT).

kill-triggerer, per kill, alternately:
    idle  once no DAG run is active, the triggerer is SIGKILLed and a wave of alerts is published while
          it is down: nothing wakes the DAG until it is back — measured: restart → its first heartbeat
          (/api/v2/monitor/health), restart → the first asset-triggered run (the watcher resumed), wave
          published → first and last alert of the wave received (how long dispatch paused), and which DAG
          run delivered it. The private Airflow's sweep cron (ALDEBARAN_DISPATCH_SWEEP_CRON) is moved out of
          the campaign's window, so only the watcher can deliver the wave: an idle kill whose wave was not
          delivered by an asset-triggered run queued after the restart fails the campaign;
    busy  while a `dispatch` task instance delivers a wave being published: the triggerer runs no task,
          so the run in flight should deliver on.
kill-api-server, per kill: while a `dispatch` task instance delivers a wave being published, the
    api-server — which the task processes report to (the Execution API) — is SIGKILLed and restarted
    after alternately a short pause (under the task supervisor's 3 failed heartbeats) and a long one
    (beyond them). Measured: restart → /monitor/health answers, the first receipt after the kill (did
    dispatch pause?), receipts during the outage, and what became of the task instances running at the
    kill (their tries, from the REST API afterwards).

Then the last wave, and the campaign waits until every delivery is settled (consumer groups caught up,
no retry pending, the lookup channel's doubts settled). Verdict per recipient as kill-dispatch.

The private Airflow shortens two intervals as kill-scheduler does (orphaned-task check 10 s, task
heartbeat timeout 60 s); delivery leases 10 s; a dispatch task returns after 15 s without alerts.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import secrets
import threading
import time
from dataclasses import dataclass, field

from aldebaran.delivery.records import DELIVERED, IN_DOUBT
from aldebaran.kafka import io as kio
from aldebaran.runtime.progress import track
from aldebaran_lab.chaos.common import (
    CampaignResult, ChaosError, DeliveryVerdict, Workspace, campaign_ledger, channel_connections, delivery_env,
    first_receipt_after, lookup_settled, private_ports, recovery_text, settled, sms_verdict_of, unsettled, wait_for,
)
from aldebaran_lab.chaos.kill_dispatch import make_alerts
from aldebaran_lab.chaos.kill_scheduler import ACTIVE_RUN_STATES, DAG_ID, fate, fate_summary, private_airflow, ti_key
from aldebaran_lab.chaos.watcher import watcher_assigned, watcher_committed, watcher_failures

log = logging.getLogger(__name__)

KILL_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LEASE_SECONDS = 10.0
IDLE_SECONDS = 15.0
CHANNELS = ("webhook", "sms", "sms_lookup")
WANTED = {"webhook": (DELIVERED,), "sms": (DELIVERED, IN_DOUBT), "sms_lookup": (DELIVERED,)}
COMPONENTS = ("triggerer", "api-server")
# kill-triggerer's private sweep cron: once a year (its first run, the one catchup=False makes at the start, comes
# before the warm-up), so that every run during the kills is the watcher's.
CAMPAIGN_SWEEP_CRON = "0 0 1 1 *"
# --short (the test suite): one kill of each kind, small waves, short pauses.
SHORT = {"triggerer": {"pause": (3.0, 6.0), "wave_seconds": 10.0, "settle_timeout": 600.0},
         "api-server": {"pause": ((3.0, 5.0), (25.0, 30.0)), "wave_seconds": 10.0, "settle_timeout": 600.0}}


@dataclass
class Kill:
    n: int
    mode: str  # triggerer: idle | busy; api-server: short | long
    pause: float
    delay: float
    wave: int = 0  # alerts published in this kill's wave
    running_at_kill: list = field(default_factory=list)
    killed_at: dt.datetime | None = None
    killed_wall: float = 0.0
    processes: int = 0
    down_s: float = 0.0
    to_healthy_s: float | None = None  # restart → healthy (heartbeat / health endpoint)
    watcher_resumed_s: float | None = None  # restart → the first asset-triggered run queued after it
    published_wall: float = 0.0
    wave_first_s: float | None = None  # wave published → first of its alerts received at the webhook
    wave_all_s: float | None = None  # → all of them
    next_receipt_s: dict = field(default_factory=dict)
    received_while_down: dict = field(default_factory=dict)
    runs_after_restart: list = field(default_factory=list)  # (run id, run type) created after the restart


def plan(component: str, kills: int, rng: random.Random, pause: tuple, delay: tuple[float, float]) -> list[Kill]:
    """Alternate the two modes, starting with the harsher one (triggerer: idle, api-server: long).
    `pause`: the triggerer's range of seconds down; for the api-server (short range, long range)."""
    out = []
    for i in range(kills):
        if component == "triggerer":
            mode, span = ("idle", "busy")[i % 2], pause
        else:
            mode = ("long", "short")[i % 2]
            span = pause[1] if mode == "long" else pause[0]
        out.append(Kill(i + 1, mode, round(rng.uniform(*span), 2), round(rng.uniform(*delay), 2)))
    return out


class WavePublisher(threading.Thread):
    """Publishes one wave of alerts evenly over `seconds` (a stream, not a burst)."""

    def __init__(self, producer, topic: str, wave: list[dict], seconds: float) -> None:
        super().__init__(daemon=True, name="wave")
        self.producer, self.topic, self.wave, self.seconds = producer, topic, wave, seconds
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            step = max(1, len(self.wave) // max(1, int(self.seconds * 4)))
            for i in range(0, len(self.wave), step):
                chunk = self.wave[i:i + step]
                kio.produce_all(self.producer, self.topic, [(a["alert_id"], json.dumps(a)) for a in chunk])
                time.sleep(0.25)
        except BaseException as exc:  # noqa: BLE001 - reported by the campaign
            self.error = exc


def run(component: str, alerts: int = 3000, kills: int = 4, seed: int = 1, mode: str = "full",
        pause: tuple | None = None, delay: tuple[float, float] = (1.0, 5.0), wave_seconds: float = 20.0,
        settle_timeout: float = 900.0) -> CampaignResult:
    """`component`: "triggerer" or "api-server". `pause`: seconds down (default: triggerer 5-20 s;
    api-server (short, long) = ((3, 8), (30, 45)): under and beyond the task supervisor's 3 failed
    heartbeats)."""
    from aldebaran_capacity.receivers import SmsProvider, WebhookReceiver
    from aldebaran_lab.chaos.outages import private_services

    if component not in COMPONENTS:
        raise ValueError(f"component must be one of {COMPONENTS}, not {component!r}")
    campaign = f"kill-{component}"
    t0 = time.monotonic()
    result = CampaignResult(campaign, mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    rng = random.Random(seed)
    if pause is None:
        pause = (5.0, 20.0) if component == "triggerer" else ((3.0, 8.0), (30.0, 45.0))
    kill_plan = plan(component, kills, rng, pause, delay)
    secret = secrets.token_urlsafe(24)
    try:
        ports = private_ports()
        with private_services(ports=ports) as svcs, WebhookReceiver(secret) as webhook, SmsProvider() as sms, \
                SmsProvider() as sms_lookup:
            ws = Workspace.create(campaign, s3a=False)
            batch = make_alerts(alerts, ws.name)
            repeats = rng.sample(batch, max(1, alerts // 10))
            stream = batch + repeats
            rng.shuffle(stream)
            # A warm-up wave, one per kill, a last one. The warm-up is delivered before the first kill, so the
            # watcher's consumer group has committed offsets (in steady state it has: with none, a watcher
            # started after alerts arrived would skip them — its auto.offset.reset is "latest").
            waves = [stream[len(stream) * i // (kills + 2):len(stream) * (i + 1) // (kills + 2)]
                     for i in range(kills + 2)]
            prefix = f"{ws.prefix}/deliveries"
            sweep = {"ALDEBARAN_DISPATCH_SWEEP_CRON": CAMPAIGN_SWEEP_CRON} if component == "triggerer" else {}
            env_extra = ws.env(
                **sweep,
                ALDEBARAN_CHANNELS=",".join(CHANNELS),
                **delivery_env(prefix, LEASE_SECONDS, ALDEBARAN_DELIVERY_IDLE_SECONDS=str(IDLE_SECONDS)),
                **channel_connections(webhook, secret, sms, sms_lookup),
            )
            producer = kio.producer(ws.kafka)

            def publish(wave: list[dict], seconds: float) -> WavePublisher:
                pub = WavePublisher(producer, ws.kafka.alerts_topic, wave, seconds)
                pub.start()
                return pub

            def webhook_times() -> list[float]:
                with webhook.lock:
                    return list(webhook.received_at.values())

            first_wave: dict[str, int] = {}
            for n, w in enumerate(waves):
                for a in w:
                    first_wave.setdefault(a["alert_id"], n)

            def wave_received(wave: list[dict]) -> tuple[float | None, float | None]:
                """First and last receipt at the webhook of the alerts first published in `wave` (a repeat of
                an earlier wave's alert was received before); the last only once all of them arrived."""
                n = waves.index(wave)
                ids = {a["alert_id"] for a in wave if first_wave[a["alert_id"]] == n}
                with webhook.lock:
                    times = [t for i, t in webhook.received_at.items() if i in ids]
                    complete = ids <= webhook.received_at.keys()
                return (min(times) if times else None), (max(times) if complete and times else None)

            with private_airflow(svcs["run_dir"], env_extra, ports["airflow_api"], triggerer=True) as airflow:
                api = airflow.api
                target = airflow.triggerer if component == "triggerer" else airflow.api_server
                result.runs = 1

                def running_dispatch() -> list[dict]:
                    return [t for t in api.task_instances() if t["task_id"] == "dispatch" and t["state"] == "running"]

                def active_runs() -> list[dict]:
                    return [r for r in api.runs() if r["state"] in ACTIVE_RUN_STATES]

                def queued_events() -> int:
                    """Asset events waiting to start a run (max_active_runs=1 holds them while a run is active)."""
                    try:
                        return int(api.call("GET", f"/api/v2/dags/{DAG_ID}/assets/queuedEvents")["total_entries"])
                    except ChaosError as exc:
                        if "HTTP 404" in str(exc):
                            return 0
                        raise

                def idle() -> bool:
                    return not active_runs() and not queued_events()

                # The watcher's group must hold the topic's partitions before the warm-up: a group that never
                # committed starts at the log end ("latest") and would skip a wave published before it joined.
                wait_for(lambda: watcher_assigned(ws.kafka), 300, 1.0, "the alert watcher's consumer group assigned")
                t_warm = time.time()
                publish(waves[0], wave_seconds).join(300)
                try:
                    wait_for(lambda: wave_received(waves[0])[1] is not None, 900, 1.0, "the warm-up wave received")
                except ChaosError as exc:
                    failures.append(str(exc))
                warmup_s = (wave_received(waves[0])[1] or t_warm) - t_warm
                log.info("warm-up wave of %d alerts delivered %.1fs after it began", len(waves[0]), warmup_s)
                if not watcher_committed(ws.kafka):
                    failures.append("the alert watcher's group committed no offset during the warm-up")
                for k in track(kill_plan, campaign, unit="kills", logger=log):
                    wave = waves[k.n]
                    k.wave = len(wave)
                    pub = None
                    if k.mode == "idle":
                        wait_for(idle, 900, 2.0, f"kill {k.n}: no DAG run active or queued")
                    else:
                        pub = publish(wave, wave_seconds)
                        k.published_wall = time.time()
                        # a try seen running may end within the delay (a short wave, or an older run's last
                        # try): look again after the delay and kill only while one still runs
                        for _ in range(20):
                            wait_for(lambda: running_dispatch(), 900, 0.5,
                                     f"kill {k.n}: a dispatch task instance running")
                            time.sleep(k.delay)
                            k.running_at_kill = running_dispatch()
                            if k.running_at_kill:
                                break
                            k.delay = round(k.delay / 2, 2)
                    k.killed_at, k.killed_wall = dt.datetime.now(dt.UTC), time.time()
                    k.processes = len(target.kill_tree())
                    result.faults += 1
                    t_kill = time.monotonic()
                    log.info("kill %d (%s): SIGKILL %s with %d process(es), %d dispatch task instance(s) running; "
                             "down %.1fs", k.n, k.mode, target.name, k.processes, len(k.running_at_kill), k.pause)
                    if k.mode == "idle":
                        pub = publish(wave, 1.0)
                        k.published_wall = time.time()
                    time.sleep(k.pause)
                    restart = dt.datetime.now(dt.UTC)
                    k.down_s = time.monotonic() - t_kill
                    t_restart = time.monotonic()
                    target.start()
                    result.runs += 1
                    k.to_healthy_s = time.monotonic() - t_restart
                    pub.join(300)
                    if pub.error is not None:
                        raise ChaosError(f"kill {k.n}: publishing the wave failed: {pub.error!r}")
                    try:
                        wait_for(lambda: wave_received(wave)[1] is not None, 900, 1.0,
                                 f"kill {k.n}: the wave received at the webhook")
                    except ChaosError as exc:
                        failures.append(str(exc))
                    first, last = wave_received(wave)
                    k.wave_first_s = None if first is None else round(first - k.published_wall, 1)
                    k.wave_all_s = None if last is None else round(last - k.published_wall, 1)
                    times = {"webhook": webhook_times(), "sms": _times(sms), "sms_lookup": _times(sms_lookup)}
                    k.next_receipt_s = {ch: first_receipt_after(t, k.killed_wall) for ch, t in times.items()}
                    restart_wall = k.killed_wall + k.down_s
                    k.received_while_down = {ch: sum(1 for x in t if k.killed_wall <= x < restart_wall)
                                             for ch, t in times.items()}
                    after = [(r, _ts(r.get("queued_at") or r.get("run_after")) or KILL_EPOCH) for r in api.runs()]
                    k.runs_after_restart = [(r["dag_run_id"], r.get("run_type")) for r, at in after if at >= restart]
                    woken = sorted(at for r, at in after if at >= restart and r.get("run_type") == "asset_triggered")
                    k.watcher_resumed_s = round((woken[0] - restart).total_seconds(), 1) if woken else None
                    failures.extend(watcher_failures(k.n, k.mode, k.runs_after_restart))
                    log.info("kill %d: %s healthy %.1fs after the restart; wave first/all received %s/%s s after "
                             "publishing; next receipt after the kill %s", k.n, target.name, k.to_healthy_s,
                             k.wave_first_s, k.wave_all_s, k.next_receipt_s)
                    result.recovery_s.append(k.to_healthy_s)
                last_restart = time.monotonic()

                publish(waves[-1], wave_seconds).join(300)
                ledger = campaign_ledger(ws.store, prefix, LEASE_SECONDS)
                ids = [a["alert_id"] for a in batch]
                left: dict = {}

                def all_settled() -> bool:
                    left.clear()
                    left.update(unsettled(ws.kafka, ledger, CHANNELS, lookup=("sms_lookup",)))
                    return not left

                try:
                    wait_for(all_settled, settle_timeout, 5.0, "every delivery settled")
                except ChaosError:
                    failures.append(f"not settled {settle_timeout:.0f}s after the last restart: {left}")
                settle_after_restart = time.monotonic() - last_restart
                states = {ch: ledger.states(ch) for ch in CHANNELS}
                if settled(states, ids, WANTED) and not left:
                    failures.append(f"the consumer groups said settled, the ledger says not: {settled(states, ids, WANTED)}")
                wait_for(lambda: not active_runs(), 600, 2.0, "the last DAG run finished")
                final_tis = {ti_key(t): t for t in api.task_instances()}
                runs = api.runs()
                fates = [[fate(t, final_tis.get(ti_key(t)), api.tries(t), k.killed_at) for t in k.running_at_kill]
                         for k in kill_plan]
                health = api.health()

            verdict = DeliveryVerdict.from_receivers(batch, webhook, sms, states)
            lookup = sms_verdict_of(batch, sms_lookup, states.get("sms_lookup", {}), "sms_lookup")
            failures.extend(verdict.failures())
            unfinished = [f for fs in fates for f in fs if f["final_state"] != "success"]
            if unfinished and component == "triggerer":  # the triggerer runs no task: nothing may fail
                failures.append(f"{len(unfinished)} task instance(s) running at a kill did not end in success")
            # An api-server outage fails the tries in flight (they cannot report to the Execution API); enough
            # kills within one DAG run use up its retries and fail it — reported, not a campaign failure: the
            # verdict is about the alerts, which the next runs deliver (the ledger makes a re-run safe).
            result.lost = verdict.lost + len(lookup.lost)
            result.duplicated = verdict.duplicated + lookup.sent_twice
            result.resent_same_key = verdict.resent_same_key
            run_types: dict[str, int] = {}
            for r in runs:
                run_types[r.get("run_type") or "?"] = run_types.get(r.get("run_type") or "?", 0) + 1
            result.details = {
                "alerts": alerts, "repeats_on_topic": len(repeats), "waves": [len(w) for w in waves],
                "component": component, "component_starts": result.runs,
                "warmup_wave_delivered_s": round(warmup_s, 1), "dag_runs": len(runs),
                "dag_runs_by_type": run_types,
                "kills": [_kill_details(k, fs) for k, fs in zip(kill_plan, fates)],
                "task_instances_running_at_a_kill_not_successful_in_the_end": len(unfinished),
                "settled_s_after_last_restart": round(settle_after_restart, 1),
                **verdict.details(),
                "sms_lookup": {**lookup.details(), "settled_by_lookup": lookup_settled(ledger, "sms_lookup", ids)},
                "health_at_end": {p: v.get("status") for p, v in health.items() if isinstance(v, dict)},
                "private_airflow": {"executor": "LocalExecutor", "database": "SQLite", "parallelism": 4,
                                    "triggerer": "runs the alert_dispatch AssetWatcher (AwaitMessageTrigger)",
                                    "dag_runs_triggered_through_the_api": 0, "delivery_lease_s": LEASE_SECONDS,
                                    "ports": ports,
                                    "dispatch_idle_s": IDLE_SECONDS},
                "failures": failures,
            }
            for k, fs in zip(kill_plan, fates):
                result.rows.append({"scenario": _scenario(component, k, fs), "runs": 1, "faults": 1, "lost": "–",
                                    "duplicated": "–", "recovery": _recovery(component, k)})
            settle = f"{settle_after_restart:.1f} s from the last restart to all deliveries settled"
            rows = verdict.rows(result.runs, result.faults, settle)
            rows.append(lookup.row(result.runs, result.faults, settle,
                                   f"sms_lookup (cannot dedupe, provider lookup; {len(lookup.in_doubt)} left IN_DOUBT)"))
            result.rows.extend(rows)
            log.info("%s: healthy after restart %s", campaign, recovery_text(result.recovery_s))
            ws.cleanup()
    except ChaosError as exc:
        failures.append(str(exc))
        result.details["failures"] = failures
        result.lost = -1
    return result.finish(t0)


def _times(receiver) -> list[float]:
    with receiver.lock:
        return list(receiver.received_at.values())


def _ts(value: str | None) -> dt.datetime | None:
    from aldebaran_lab.chaos.kill_scheduler import parse_ts

    return parse_ts(value)


def _kill_details(k: Kill, fates: list[dict]) -> dict:
    return {"n": k.n, "mode": k.mode, "delay_s": k.delay, "pause_s": k.pause, "down_s": round(k.down_s, 1),
            "processes_killed": k.processes, "wave": k.wave, "restart_to_healthy_s": round(k.to_healthy_s or 0, 1),
            "restart_to_watcher_run_s": k.watcher_resumed_s,
            "wave_published_to_first_received_s": k.wave_first_s, "wave_published_to_all_received_s": k.wave_all_s,
            "next_receipt_after_kill_s": k.next_receipt_s, "received_while_down": k.received_while_down,
            "dag_runs_after_restart": k.runs_after_restart, "running_at_kill": fates}


def _scenario(component: str, k: Kill, fates: list[dict]) -> str:
    if component == "triggerer":
        what = ("no DAG run active, a wave of alerts published while it was down" if k.mode == "idle"
                else "while a dispatch task instance delivered")
        return f"kill {k.n}: SIGKILL triggerer {what}, down {k.down_s:.0f} s"
    return (f"kill {k.n}: SIGKILL api-server while dispatch task instances ran, down {k.down_s:.0f} s ({k.mode}) — "
            + fate_summary(fates))


def _recovery(component: str, k: Kill) -> str:
    part = "heartbeat" if component == "triggerer" else "health endpoint answers"
    text = f"restart → {part} {k.to_healthy_s:.1f} s"
    if k.mode == "idle":
        text += (f"; restart → the watcher's run {k.watcher_resumed_s} s"
                 f"; wave published → first alert at the webhook {k.wave_first_s} s, all {k.wave_all_s} s "
                 f"(delivered by {', '.join(sorted({t for _, t in k.runs_after_restart})) or 'no new run'})")
    else:
        text += (f"; next webhook receipt after the kill {k.next_receipt_s.get('webhook')} s, "
                 f"{k.received_while_down.get('webhook', 0)} received while it was down; "
                 f"wave all received {k.wave_all_s} s after it began")
    return text
