"""`aldebaran chaos kill-dispatch`: SIGKILL dispatch workers mid-batch, also between a send and its record.

    1. `alerts` alerts (plus ~10% repeats: the topic is at-least-once) are published to a fresh topic;
    2. dispatch workers (python -m aldebaran.chaos.dispatch_worker: the real Dispatcher, channels
       `webhook` and `sms` configured through AIRFLOW_CONN_ALDEBARAN_*) are started one after another;
       odd cycles run with a failure injection that SIGKILLs the worker right after a send and before its
       record, even cycles are SIGKILLed from outside at a random moment — until `kills` kills landed;
    3. clean workers then run until every delivery record is settled (short leases: stranded claims are
       rescued after 2 s);
    4. verdict: the webhook receiver (deduplicates by Idempotency-Key, counts requests) accepted each alert
       exactly once and nothing else; the SMS provider (cannot deduplicate) got no text twice, and each
       alert's SMS record is DELIVERED (text received) or IN_DOUBT (for an operator) — never lost.
"""

from __future__ import annotations

import json
import logging
import os
import random
import secrets
import signal
import subprocess
import sys
import time

from aldebaran import kafka_io
from aldebaran.audit.rules import alert_id
from aldebaran.chaos.common import CampaignResult, ChaosError, DeliveryVerdict, Workspace, channel_connections
from aldebaran.delivery.backends import S3Backend
from aldebaran.delivery.ledger import DELIVERED, IN_DOUBT, Ledger
from aldebaran_lab.receivers import SmsProvider, WebhookReceiver

log = logging.getLogger(__name__)

LEASE_SECONDS = 2.0


def make_alerts(n: int, tag: str) -> list[dict]:
    now = int(time.time() * 1000)
    out = []
    for i in range(n):
        order = f"{tag}-{i}"
        out.append({"alert_id": alert_id("OVERFILL", order), "kind": "OVERFILL", "order_id": order,
                    "client": "Goldman", "stock": "AAPL", "requested": 100, "purchased": 101 + i % 50,
                    "purchase_count": 2, "trigger_event_id": f"{order}-p", "trigger_event_ts": now,
                    "detected_at": now})
    return out


def _worker(ws: Workspace, env: dict, group: str, log_path, kill_after_send: float, seed: int) -> subprocess.Popen:
    out = open(log_path, "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "aldebaran.chaos.dispatch_worker", "--prefix", f"{ws.prefix}/deliveries",
             "--group", group, "--lease", str(LEASE_SECONDS), "--kill-after-send", str(kill_after_send),
             "--seed", str(seed), "--idle-timeout", "3"],
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        out.close()


def run(alerts: int = 5000, kills: int = 20, seed: int = 1, mode: str = "full",
        kill_delay: tuple[float, float] = (1.5, 4.0), self_kill_probability: float = 0.01,
        cleanup: bool = True, max_cycles: int | None = None) -> CampaignResult:
    t0 = time.monotonic()
    ws = Workspace.create("kill-dispatch", s3a=False)
    result = CampaignResult("kill-dispatch", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    rng = random.Random(seed)
    secret = secrets.token_urlsafe(24)
    try:
        with WebhookReceiver(secret) as webhook, SmsProvider() as sms:
            batch = make_alerts(alerts, ws.name)
            repeats = rng.sample(batch, max(1, alerts // 10))
            kafka_io.produce_all(kafka_io.producer(ws.kafka), ws.kafka.alerts_topic,
                                 [(a["alert_id"], json.dumps(a)) for a in batch + repeats])
            env = ws.env(
                ALDEBARAN_CHANNELS="webhook,sms",
                **channel_connections(webhook, secret, sms),
            )
            group = f"chaos-{ws.name}"
            log_path = ws.logs / "dispatch-workers.log"
            kinds = {"between_send_and_record": 0, "external_mid_batch": 0}
            cycle = 0
            drained_early = 0
            while sum(kinds.values()) < kills and cycle < (max_cycles or kills * 4):
                cycle += 1
                self_kill = cycle % 2 == 1
                proc = _worker(ws, env, group, log_path, self_kill_probability if self_kill else 0.0, seed + cycle)
                result.runs += 1
                delay = rng.uniform(*kill_delay)
                try:
                    rc = proc.wait(60 if self_kill else delay)
                except subprocess.TimeoutExpired:
                    rc = None
                if rc is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
                    kinds["external_mid_batch"] += 1
                elif rc == -signal.SIGKILL:
                    kinds["between_send_and_record"] += 1
                elif rc == 0:
                    drained_early += 1
                    if drained_early >= 2:
                        failures.append(f"the topic was drained after {sum(kinds.values())} kills (wanted {kills}): "
                                        "use more alerts")
                        break
                else:
                    failures.append(f"worker exited {rc} by itself")
                log.info("cycle %d: kills so far %s", cycle, kinds)
            result.faults = sum(kinds.values())
            last_kill = time.monotonic()

            # Clean workers until every record is settled (stranded claims are rescued after their lease).
            ledger = Ledger(S3Backend(ws.store), prefix=f"{ws.prefix}/deliveries", lease_seconds=LEASE_SECONDS)
            ids = {a["alert_id"] for a in batch}
            settled_states = {"webhook": {DELIVERED}, "sms": {DELIVERED, IN_DOUBT}}
            for attempt in range(8):
                time.sleep(LEASE_SECONDS + 0.5)
                proc = _worker(ws, env, group, log_path, 0.0, 0)
                result.runs += 1
                rc = proc.wait(600)
                if rc != 0:
                    failures.append(f"clean worker exited {rc}")
                records = {ch: {r.alert_id: r for r in ledger.records(ch)} for ch in settled_states}
                if all(records[ch].get(i) is not None and records[ch][i].state in ok
                       for ch, ok in settled_states.items() for i in ids):
                    break
            result.recovery_s.append(time.monotonic() - last_kill)

            verdict = DeliveryVerdict.from_receivers(batch, webhook, sms, records)
            failures.extend(verdict.failures())
            result.lost = verdict.lost
            result.duplicated = verdict.duplicated
            result.details = {
                "alerts": alerts, "repeats_on_topic": len(repeats), "kills": kinds, "worker_runs": result.runs,
                **verdict.details(),
                "failures": failures,
            }
            result.rows = verdict.rows(result.runs, result.faults,
                                       f"{result.recovery_s[0]:.1f} s to settle all after the last kill")
            return result.finish(t0)
    except ChaosError as exc:
        failures.append(str(exc))
        result.details["failures"] = failures
        result.lost = -1
        return result.finish(t0)
    finally:
        if cleanup:
            ws.cleanup()
