"""`aldebaran chaos kill-dispatch`: SIGKILL streaming dispatchers while alerts flow, also between a send
and its record.

    1. `alerts` alerts (plus ~10% repeats: the topic is at-least-once) are published to a fresh alerts
       topic while the campaign runs, paced so that the flow lasts until the last kill;
    2. `dispatchers` streaming dispatchers (``aldebaran dispatch --follow``, the process the
       dispatch_supervisor DAG starts; one consumer group per channel, so they split the partitions)
       deliver to three channels configured through AIRFLOW_CONN_ALDEBARAN_*: `webhook` (deduplicates
       by Idempotency-Key: ledger runs), `sms` (a provider that cannot deduplicate: runs of one send
       window, IN_DOUBT for an operator after a crash) and `sms_lookup` (the same kind of provider with
       the connection extra ``lookup: true``: IN_DOUBT is settled by asking the provider);
    3. each dispatcher is killed in turn, alternately by a failure injection that SIGKILLs it right
       after a send and before its record (``python -m aldebaran_lab.chaos.dispatch_worker``: the same
       streaming dispatcher, channels wrapped), and with SIGKILL from outside at a random moment once it
       owns partitions; a killed dispatcher is restarted at once (as its supervisor would), until `kills`
       kills landed;
    4. then every dispatcher runs clean until every delivery is settled (short leases: a stranded claim
       is adopted or put in doubt after a few seconds);
    5. verdict per recipient: the webhook receiver (deduplicates by Idempotency-Key, counts requests)
       accepted each alert exactly once and nothing else; neither SMS provider got a text twice; each
       `sms` record is DELIVERED (text received) or IN_DOUBT; each `sms_lookup` record DELIVERED — never
       lost. Also measured: after each kill, how long until the next receipt at each recipient (the
       pause), and the longest stretch without a receipt.
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field

from aldebaran.audit.rules import alert_id
from aldebaran.delivery.records import DELIVERED, IN_DOUBT
from aldebaran.kafka import io as kio
from aldebaran.runtime.progress import Progress
from aldebaran_capacity.receivers import SmsProvider, WebhookReceiver
from aldebaran_lab.chaos.common import (
    CampaignResult, ChaosError, DeliveryVerdict, DispatcherProcess, Workspace, campaign_ledger, channel_connections,
    delivery_env, first_receipt_after, longest_pause, lookup_settled, recovery_text, settled, sms_verdict_of,
    unsettled,
)

log = logging.getLogger(__name__)

LEASE_SECONDS = 3.0
CHANNELS = ("webhook", "sms", "sms_lookup")
WANTED = {"webhook": (DELIVERED,), "sms": (DELIVERED, IN_DOUBT), "sms_lookup": (DELIVERED,)}
KINDS = ("between_send_and_record", "external_mid_run")


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


class Publisher(threading.Thread):
    """Publishes the alert stream while the kills go on, paced so that it lasts about as long as they do:
    every 0.25 s, the rest spread over the kills still to land at the pace they have landed so far. Until the
    last kill it also holds back a share of the stream per kill still to land (released as each lands), so a
    restarted dispatcher that carries the injection always has alerts to send: a stream that ran dry before
    the kills did left it idle until the injection timeout (90 s each, on a busy box)."""

    def __init__(self, ws: Workspace, stream: list[dict], kills: int, rate: float | None = None,
                 first_guess_s: float = 8.0) -> None:
        super().__init__(name="kill-dispatch-publisher", daemon=True)
        self.ws, self.stream, self.kills, self.rate = ws, stream, kills, rate
        self.first_guess_s = first_guess_s
        self.landed = 0
        self.t0 = time.monotonic()
        self.sent = 0
        self.flush = threading.Event()  # publish the rest at once
        self.stop = threading.Event()  # publish no more (what was sent is stream[:sent])
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = kio.producer(self.ws.kafka)
            while self.sent < len(self.stream) and not self.stop.is_set():
                if self.flush.is_set():
                    n = len(self.stream) - self.sent
                else:
                    rate = self.rate or self._rate()
                    n = min(max(1, int(rate * 0.25)), self.allowed() - self.sent)
                    if n <= 0:  # this kill's share is out: wait for the kill
                        self.flush.wait(0.25)
                        continue
                chunk = self.stream[self.sent:self.sent + n]
                kio.produce_all(producer, self.ws.kafka.alerts_topic,
                                     [(a["alert_id"], json.dumps(a)) for a in chunk])
                self.sent += len(chunk)
                self.flush.wait(0.25)
        except BaseException as exc:  # noqa: BLE001 - reported by the campaign
            self.error = exc

    def allowed(self) -> int:
        """How much of the stream may be out now: a share per kill landed, plus one; all of it after the last."""
        if self.landed >= self.kills:
            return len(self.stream)
        return len(self.stream) * (self.landed + 1) // (self.kills + 1)

    def _rate(self) -> float:
        elapsed = time.monotonic() - self.t0
        per_kill = elapsed / self.landed if self.landed else self.first_guess_s
        left_s = max(5.0, (self.kills - self.landed) * per_kill)
        return (len(self.stream) - self.sent) / left_s


@dataclass
class Slot:
    """One dispatcher position, restarted after each kill; its kills alternate between the kinds."""

    proc: DispatcherProcess
    kills: int = 0
    injected: bool = False
    kill_at: float | None = None  # external kill: when (monotonic), once it owns partitions
    events: list = field(default_factory=list)

    @property
    def next_kind(self) -> str:
        return KINDS[self.kills % 2]


def run(alerts: int = 5000, kills: int = 20, seed: int = 1, mode: str = "full", dispatchers: int = 2,
        kill_delay: tuple[float, float] = (1.0, 4.0), self_kill_probability: float = 0.1,
        rate: float | None = None, settle_timeout: float = 600.0, injection_timeout: float = 90.0,
        cleanup: bool = True) -> CampaignResult:
    t0 = time.monotonic()
    ws = Workspace.create("kill-dispatch", s3a=False)
    result = CampaignResult("kill-dispatch", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    rng = random.Random(seed)
    secret = secrets.token_urlsafe(24)
    prefix = f"{ws.prefix}/deliveries"
    slots: list[Slot] = []
    faults = Progress("kill-dispatch", kills, unit="kills", logger=log)
    try:
        with WebhookReceiver(secret) as webhook, SmsProvider() as sms, SmsProvider() as sms_lookup:
            batch = make_alerts(alerts, ws.name)
            repeats = rng.sample(batch, max(1, alerts // 10))
            stream = batch + repeats
            rng.shuffle(stream)
            env = ws.env(ALDEBARAN_CHANNELS=",".join(CHANNELS), **channel_connections(webhook, secret, sms, sms_lookup),
                         **delivery_env(prefix, LEASE_SECONDS))
            log_path = ws.logs / "dispatchers.log"
            for i in range(dispatchers):
                slot = Slot(DispatcherProcess(f"chaos-{ws.name}-{i}", env, log_path, CHANNELS, ws.store))
                slot.injected = slot.next_kind == KINDS[0]
                slot.proc.start(self_kill_probability if slot.injected else 0.0, seed * 1000 + i)
                slots.append(slot)
            publisher = Publisher(ws, stream, kills, rate)
            publisher.start()
            kinds = dict.fromkeys(KINDS, 0)
            events: list[dict] = []
            wall0 = time.time()

            def restart(slot: Slot, why: str) -> None:
                slot.kills += 1
                kinds[why] += 1
                faults.advance()
                events.append({"n": sum(kinds.values()), "dispatcher": slot.proc.name, "kind": why,
                               "at": time.time(), "after_start_s": round(time.monotonic() - slot.proc.started_at, 1)})
                publisher.landed = sum(kinds.values())
                slot.kill_at = None
                slot.injected = slot.next_kind == KINDS[0] and sum(kinds.values()) < kills
                slot.proc.start(self_kill_probability if slot.injected else 0.0, seed * 1000 + slot.proc.starts)

            deadline = time.monotonic() + max(600.0, kills * 60.0)
            faults.start()
            while sum(kinds.values()) < kills:
                if time.monotonic() > deadline:
                    raise ChaosError(f"only {sum(kinds.values())} of {kills} kills landed in time: {kinds}")
                if publisher.error is not None:
                    raise ChaosError(f"publisher failed: {publisher.error!r}")
                # Both dispatchers may die by their injections in one pass: each death is a kill that happened
                # and is counted, so the total can exceed `kills` by one; outside kills stop at the quota.
                for slot in slots:
                    proc = slot.proc
                    if not proc.alive():
                        rc = proc.returncode()
                        if slot.injected and rc == -signal.SIGKILL:
                            log.info("kill %d: %s died between a send and its record", sum(kinds.values()) + 1,
                                     proc.name)
                            restart(slot, KINDS[0])
                        else:
                            raise ChaosError(f"dispatcher {proc.name} exited {rc} by itself: {proc.tail(5)}")
                    elif sum(kinds.values()) >= kills:
                        continue  # the quota landed earlier in this pass: no more outside kills
                    elif slot.injected:
                        if time.monotonic() - proc.started_at > injection_timeout:
                            log.warning("%s: the injection did not fire in %.0fs; killing it from outside",
                                        proc.name, injection_timeout)
                            proc.kill()
                            restart(slot, KINDS[1])
                    elif slot.kill_at is None:
                        if proc.assigned():
                            slot.kill_at = time.monotonic() + rng.uniform(*kill_delay)
                    elif time.monotonic() >= slot.kill_at:
                        proc.kill()
                        log.info("kill %d: SIGKILL %s from outside, %.1fs after its start", sum(kinds.values()) + 1,
                                 proc.name, time.monotonic() - proc.started_at)
                        restart(slot, KINDS[1])
                time.sleep(0.2)
            result.faults = sum(kinds.values())
            faults.close()
            last_kill = time.monotonic()
            last_kill_wall = time.time()
            published_at_last_kill = publisher.sent
            publisher.flush.set()
            publisher.join(120)
            # No more kills: a dispatcher still carrying the injection is replaced by a clean one.
            for slot in slots:
                if slot.injected or not slot.proc.alive():
                    slot.proc.stop()
                    slot.injected = False
                    slot.proc.start()

            # Settle: every dispatcher runs clean until each alert's delivery is settled on every channel.
            ledger = campaign_ledger(ws.store, prefix, LEASE_SECONDS)
            ids = [a["alert_id"] for a in batch]
            settle_deadline = time.monotonic() + settle_timeout
            left: dict = {"all": "not checked yet"}
            while time.monotonic() < settle_deadline:
                time.sleep(2.0)
                dead = [s.proc.name for s in slots if not s.proc.alive()]
                if dead:
                    failures.append(f"dispatcher(s) {dead} exited during the settle phase")
                    break
                left = unsettled(ws.kafka, ledger, CHANNELS, lookup=("sms_lookup",))
                if not left:
                    break
            else:
                failures.append(f"not settled {settle_timeout:.0f}s after the last kill: {left}")
            result.recovery_s.append(time.monotonic() - last_kill)
            states = {ch: ledger.states(ch) for ch in CHANNELS}  # one scan, for the verdict
            still_open = settled(states, ids, WANTED)
            if still_open and not left:
                failures.append(f"the consumer groups and indexes said settled, the ledger says not: {still_open}")
            for slot in slots:
                rc = slot.proc.stop()
                if rc not in (0, None):
                    failures.append(f"dispatcher {slot.proc.name}: clean stop exited {rc}")
                slot.proc.forget()
            result.runs = sum(s.proc.starts for s in slots)

            verdict = DeliveryVerdict.from_receivers(batch, webhook, sms, states)
            lookup = sms_verdict_of(batch, sms_lookup, states.get("sms_lookup", {}), "sms_lookup")
            failures.extend(verdict.failures())
            result.lost = verdict.lost + len(lookup.lost)
            result.duplicated = verdict.duplicated + lookup.sent_twice
            result.resent_same_key = verdict.resent_same_key
            received = {"webhook": _times(webhook), "sms": _times(sms), "sms_lookup": _times(sms_lookup)}
            for e in events:
                e["next_receipt_s"] = {ch: first_receipt_after(t, e["at"]) for ch, t in received.items()}
                e["at"] = round(e["at"] - wall0, 1)
            # From the first start to the recipient's last receipt: the kills, and the catching up after them.
            pauses = {ch: longest_pause(t, wall0, max(t, default=last_kill_wall)) for ch, t in received.items()}
            gaps = {ch: [e["next_receipt_s"][ch] for e in events if e["next_receipt_s"][ch] is not None]
                    for ch in CHANNELS}
            settle_s = result.recovery_s[0]
            details = verdict.details()
            result.details = {
                "alerts": alerts, "repeats_on_topic": len(repeats), "dispatchers": dispatchers,
                "published_by_last_kill": published_at_last_kill, "kills": kinds, "dispatcher_starts": result.runs,
                "self_kill_probability_per_send": self_kill_probability, "lease_s": LEASE_SECONDS,
                "next_receipt_after_kill_s": {ch: recovery_text(g) for ch, g in gaps.items()},
                "longest_pause_s": {ch: p[0] for ch, p in pauses.items()},
                "webhook": details["webhook"], "sms": details["sms"],
                "sms_lookup": {**lookup.details(), "settled_by_lookup": lookup_settled(ledger, "sms_lookup", ids)},
                "ledger_objects": {ch: sum(1 for _ in ws.store.list(f"{prefix}/{ch}/")) for ch in CHANNELS},
                "kill_events": events,
                "failures": failures,
            }
            recovery = {ch: f"next receipt after a kill {recovery_text(gaps[ch])}; longest pause {pauses[ch][0]:.1f} s; "
                            f"all settled {settle_s:.1f} s after the last kill" for ch in CHANNELS}
            rows = verdict.rows(result.runs, result.faults, "")
            rows[0]["recovery"], rows[1]["recovery"] = recovery["webhook"], recovery["sms"]
            rows.append(lookup.row(result.runs, result.faults, recovery["sms_lookup"],
                                   f"sms_lookup (cannot dedupe, provider lookup; {len(lookup.in_doubt)} left IN_DOUBT)"))
            result.rows = rows
            result.details["failures"] = failures
            return result.finish(t0)
    except ChaosError as exc:
        failures.append(str(exc))
        result.details["failures"] = failures
        result.lost = -1
        return result.finish(t0)
    finally:
        faults.close()
        for slot in slots:
            if slot.proc.alive():
                slot.proc.kill()
            slot.proc.forget()
        if cleanup:
            ws.cleanup()


def _times(receiver) -> list[float]:
    with receiver.lock:
        return list(receiver.received_at.values())
