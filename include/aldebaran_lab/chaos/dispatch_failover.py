"""`aldebaran chaos dispatch-failover`: a streaming dispatcher dies and is **not** restarted; the other one
takes its partitions over through the consumer group, fenced by the partition owner epochs in the ledger.
The same kill is measured at several consumer session timeouts in one run.

    1. alerts are published to a fresh alerts topic (4 partitions) at a steady `rate` for the whole run;
    2. `kills` rounds; in each, for each session timeout in `timeouts_ms` in turn
       (ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS; the broker's group.min.session.timeout.ms, 6 s by default, is
       the floor), a fresh pair of streaming dispatchers (``aldebaran dispatch --follow``, channels `webhook`
       and `bus`, consumer groups of the campaign's own) splits each channel's partitions. Round robin: the
       ledger grows during the run, and a new owner reads its recent runs back, so each timeout is measured
       at every age of it;
    3. stalls (first round): one of the pair is frozen for each of `stalls_s` (SIGSTOP of its process group:
       librdkafka's heartbeat thread stops too, as in a VM pause or a swapping host), then resumed. A stall
       longer than the session is a *false failover*: the broker expels the frozen member, the other one
       takes its partitions (a higher owner epoch), and the resumed one is fenced from writing under its old
       epoch;
    4. kill: one of the pair is SIGKILLed at a random moment and not restarted. The survivor must learn of it
       (the session expires at the broker; the survivor hears of the rebalance at its next heartbeat),
       rejoin (classic protocol, eager assignors: it is assigned every partition again, its own included),
       take each partition's owner epoch in the ledger, read back the recent runs of each partition (the
       dedupe window) and send the first run. Measured per channel: kill → the survivor owns each dead
       partition (the owner object's ``since``), kill → the first alert of a dead partition received, kill
       → every dead partition delivered again, and the longest stretch without any receipt at the
       recipient in between; with the run objects stored at the kill (what the window reads back);
    5. verdict per recipient over the whole run: the webhook receiver (deduplicates by Idempotency-Key,
       counts requests) accepted each published alert exactly once and nothing else; the bus topic holds
       each alert under its own key; on both, copies under the same key are resends their promise allows,
       reported as `resent_same_key` (chaos.receipts); every ledger record DELIVERED.
"""

from __future__ import annotations

import json
import logging
import random
import re
import secrets
import socket
import time
from typing import Iterable

from aldebaran.delivery.records import DELIVERED
from aldebaran.exceptions import NotFound
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.runtime.progress import Progress
from aldebaran.settings import KafkaSettings, load
from aldebaran_capacity.receivers import WebhookReceiver
from aldebaran_lab.chaos.common import (
    CampaignResult, ChaosError, DispatcherProcess, Workspace, bus_connection, bus_verdict, campaign_ledger,
    channel_connections, delivery_env, delivery_verdict, unsettled,
)
from aldebaran_lab.chaos.failover_figures import Owner, details, epochs, owned_by, rows, split_between
from aldebaran_lab.chaos.kill_dispatch import Publisher, make_alerts

log = logging.getLogger(__name__)

BUS = "bus"  # a Kafka-bus channel (its connection: AIRFLOW_CONN_ALDEBARAN_<NAME>, conn_type kafka)
CHANNELS = ("webhook", BUS)
PARTITIONS = 4
LEASE_SECONDS = 3.0
TIMEOUTS_MS = (6000, 10000, 20000)


# --- the ledger's partition owners ---------------------------------------------------------------------
def read_owners(ledger, topic: str, channels: Iterable[str] = CHANNELS, partitions: int = PARTITIONS) -> dict:
    out: dict[str, dict[int, Owner | None]] = {}
    for ch in channels:
        out[ch] = {}
        for p in range(partitions):
            try:
                body = json.loads(ledger.store.get(ledger.owner_key(ch, topic, p)).body)
            except NotFound:
                out[ch][p] = None
                continue
            out[ch][p] = Owner(body["owner"], int(body["epoch"]), float(body["since"]))
    return out


def owner_of(proc: DispatcherProcess) -> str:
    """The ledger owner a dispatcher process writes as (``Dispatcher.owner``: host:pid)."""
    return f"{socket.gethostname()}:{proc.pid}"


class Run:
    """The campaign's moving parts: the workspace, the ledger, the two dispatcher slots."""

    def __init__(self, ws: Workspace, ledger, env: dict, rng: random.Random) -> None:
        self.ws, self.ledger, self.env, self.rng = ws, ledger, env, rng
        self.slots: list[DispatcherProcess] = []
        self.events: list[dict] = []
        self.starts = 0

    def owners(self) -> dict:
        return read_owners(self.ledger, self.ws.kafka.alerts_topic)

    def start_pair(self, timeout_ms: int) -> None:
        for d in self.slots:
            d.stop()
            d.forget()
        env = {**self.env, "ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS": str(timeout_ms)}
        self.slots = [DispatcherProcess(f"chaos-{self.ws.name}-{i}", env, self.ws.logs / f"dispatcher-{i}.log",
                                        CHANNELS, self.ws.store) for i in range(2)]
        for d in self.slots:
            d.start()
            self.starts += 1

    def await_split(self, timeout: float = 180.0) -> float:
        """Wait until the two dispatchers split every channel's partitions and no rebalance is under way (the
        owner epochs unchanged over 1.5 s); the seconds it took."""
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < timeout:
            for d in self.slots:
                if not d.alive():
                    raise ChaosError(f"dispatcher {d.name} exited {d.returncode()}: {d.tail(5)}")
            owners = self.owners()
            if split_between(owners, owner_of(self.slots[0]), owner_of(self.slots[1])):
                if epochs(owners) == last:
                    return time.monotonic() - t0
                last = epochs(owners)
            else:
                last = None
            time.sleep(1.5)
        raise ChaosError(f"the two dispatchers did not split the partitions within {timeout:.0f}s")

    def stall(self, timeout_ms: int, victim: int, seconds: float) -> dict:
        """Freeze one dispatcher for `seconds`, then resume it. Nothing else changes the group's membership, so
        a rebalance (owner epochs taken again) means the broker expelled the frozen member: a false failover.
        Also noted: which of its partitions the other one took while it was frozen."""
        proc, other = self.slots[victim], self.slots[1 - victim]
        before = self.owners()
        mine = owned_by(before, owner_of(proc))
        moved: dict[str, set[int]] = {ch: set() for ch in mine}
        frozen_at = time.time()
        proc.pause()
        try:
            while time.time() - frozen_at < seconds:
                time.sleep(min(0.5, max(0.0, seconds - (time.time() - frozen_at))))
                for ch, parts in owned_by(self.owners(), owner_of(other)).items():
                    moved[ch] |= parts & mine[ch]
        finally:
            proc.resume()
        resumed_at = time.time()
        resplit = self.await_split()
        rebalanced = epochs(self.owners()) != epochs(before)
        event = {"kind": "stall", "timeout_ms": timeout_ms, "stall_s": seconds, "dispatcher": proc.name,
                 "owned": {ch: sorted(v) for ch, v in mine.items()},
                 "taken_while_frozen": {ch: sorted(v) for ch, v in moved.items()}, "false_failover": rebalanced,
                 "frozen_at": frozen_at, "resumed_at": resumed_at, "split_again_s": round(resplit, 1)}
        log.info("session %d ms, %.0f s freeze of %s: %s", timeout_ms, seconds, proc.name,
                 f"expelled (taken while frozen: {event['taken_while_frozen']})" if rebalanced else "no rebalance")
        self.events.append(event)
        return event

    def runs_stored(self) -> dict[str, dict[int, int]]:
        """Run objects per channel and partition: what a new owner reads back to rebuild its dedupe window
        (``ChannelDispatcher._load_recent``: every run of the last ALDEBARAN_DELIVERY_DEDUPE_WINDOW_OFFSETS)."""
        topic = self.ws.kafka.alerts_topic
        return {ch: {p: sum(1 for _ in self.ws.store.list(self.ledger.run_prefix(ch, topic, p)))
                     for p in range(PARTITIONS)} for ch in CHANNELS}

    def kill(self, timeout_ms: int, victim: int, margin_s: float) -> dict:
        """SIGKILL one dispatcher and do not restart it; wait until the survivor owns all its partitions."""
        proc, survivor = self.slots[victim], self.slots[1 - victim]
        time.sleep(self.rng.uniform(0.5, 2.0))  # a random moment of the flow
        runs = self.runs_stored()
        before = self.owners()
        dead = owned_by(before, owner_of(proc))
        heir = owner_of(survivor)
        proc.kill()
        killed_at = time.time()
        taken: dict[str, dict[int, float]] = {ch: {} for ch in dead}
        deadline = time.monotonic() + 3 * timeout_ms / 1000 + 60
        while any(len(taken[ch]) < len(parts) for ch, parts in dead.items()):
            if time.monotonic() > deadline:
                raise ChaosError(f"the survivor took only {taken} of {dead} in time")
            if not survivor.alive():
                raise ChaosError(f"the survivor {survivor.name} exited {survivor.returncode()}: {survivor.tail(5)}")
            now = self.owners()
            for ch, parts in dead.items():
                for p in parts - taken[ch].keys():
                    o = now[ch][p]
                    if o and o.owner == heir and o.epoch > before[ch][p].epoch:
                        taken[ch][p] = o.since
            time.sleep(0.25)
        time.sleep(margin_s)  # the survivor delivers the dead partitions' backlog meanwhile
        event = {"kind": "kill", "timeout_ms": timeout_ms, "dispatcher": proc.name, "killed_at": killed_at,
                 "dead": {ch: sorted(v) for ch, v in dead.items()}, "taken_at": taken,
                 "runs_stored": {ch: sum(n.values()) for ch, n in runs.items()},
                 "runs_stored_dead": {ch: sum(runs[ch][p] for p in dead[ch]) for ch in CHANNELS}}
        log.info("session %d ms: %s SIGKILLed, the survivor owns its partitions %.1f s later", timeout_ms, proc.name,
                 max((t for v in taken.values() for t in v.values()), default=killed_at) - killed_at)
        self.events.append(event)
        return event


def run(timeouts_ms: Iterable[int] = TIMEOUTS_MS, kills: int = 3, stalls_s: Iterable[float] = (8.0, 15.0),
        rate: float = 50.0, seed: int = 1, mode: str = "full", margin_s: float = 4.0, settle_timeout: float = 300.0,
        cleanup: bool = True) -> CampaignResult:
    t0 = time.monotonic()
    timeouts_ms, stalls_s = list(timeouts_ms), list(stalls_s)
    ws = Workspace.create("dispatch-failover", s3a=False, kafka=load(KafkaSettings).model_copy(update={"partitions": PARTITIONS}))
    result = CampaignResult("dispatch-failover", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    rng = random.Random(seed)
    secret = secrets.token_urlsafe(24)
    prefix = f"{ws.prefix}/deliveries"
    group = f"chaos-{ws.name}"
    bus_topic = f"chaos-{ws.name}-bus"
    faults = Progress("dispatch-failover", len(timeouts_ms) * (kills + len(stalls_s)), unit="faults", logger=log)
    state: Run | None = None
    try:
        kadmin.ensure_topics(ws.kafka, [bus_topic], partitions=2)
        with WebhookReceiver(secret) as webhook:
            # Enough alerts for the longest run; the publisher stops when the measurements are done.
            budget_s = sum(t / 1000 * 3 + 40 for t in timeouts_ms) * (kills + len(stalls_s)) + 300
            stream = make_alerts(int(rate * budget_s), ws.name)
            env = ws.env(ALDEBARAN_CHANNELS=",".join(CHANNELS), **channel_connections(webhook, secret),
                         **{f"AIRFLOW_CONN_ALDEBARAN_{BUS.upper()}": json.dumps(bus_connection(ws.kafka.bootstrap_servers,
                                                                                                 bus_topic))},
                         **delivery_env(prefix, LEASE_SECONDS, ALDEBARAN_DELIVERY_GROUP=group))
            ledger = campaign_ledger(ws.store, prefix, LEASE_SECONDS)
            state = Run(ws, ledger, env, rng)
            publisher = Publisher(ws, stream, kills=1, rate=rate)
            publisher.start()
            faults.start()
            wall0 = time.time()
            victim = 0
            # Round robin over the timeouts, a fresh pair each time: the ledger grows during the run (the runs a new
            # owner reads back), so every timeout is measured at each age of it.
            for round_ in range(kills):
                for timeout_ms in timeouts_ms:
                    state.start_pair(timeout_ms)
                    log.info("session %d ms: the pair split the partitions in %.1f s", timeout_ms, state.await_split())
                    for seconds in stalls_s if round_ == 0 else ():
                        state.stall(timeout_ms, victim, seconds)
                        victim = 1 - victim
                        faults.advance()
                    state.kill(timeout_ms, victim, margin_s)  # the survivor goes on alone until the next pair
                    victim = 1 - victim
                    faults.advance()
                    if publisher.error is not None:
                        raise ChaosError(f"publisher failed: {publisher.error!r}")
            faults.close()
            publisher.stop.set()
            publisher.join(60)
            published = stream[:publisher.sent]
            ids = {a["alert_id"] for a in published}
            settle_deadline = time.monotonic() + settle_timeout
            left: dict = {"all": "not checked yet"}
            t_settle = time.monotonic()
            while time.monotonic() < settle_deadline:
                left = unsettled(ws.kafka, ledger, CHANNELS, group=group)
                if not left:
                    break
                time.sleep(2.0)
            else:
                failures.append(f"not settled {settle_timeout:.0f}s after the last kill: {left}")
            result.recovery_s.append(time.monotonic() - t_settle)
            for d in state.slots:
                if not d.alive():  # the one killed last (on purpose)
                    d.forget()
                    continue
                rc = d.stop()
                if rc not in (0, None):
                    failures.append(f"dispatcher {d.name}: clean stop exited {rc}")
                d.forget()
            states = {ch: ledger.states(ch) for ch in CHANNELS}
            with webhook.lock:
                received = {"webhook": dict(webhook.received_at)}
            web = delivery_verdict(  # (no SMS channel in this campaign: the verdict's SMS half is not used)
                published, webhook_accepted=list(webhook.accepted), webhook_statuses=webhook.statuses,
                webhook_requests_per_key=webhook.requests_per_key, webhook_bad_signatures=webhook.rejected_signatures,
                webhook_incomplete_requests=webhook.incomplete_requests, sms_bodies=[], sms_sends={},
                ledger_states={"webhook": states["webhook"], "sms": {}})
            failures.extend(web.failures())
            bus, received["bus"] = bus_verdict(ws.kafka, bus_topic, ids)
            bus_open = sum(1 for i in ids if states["bus"].get(i) != DELIVERED)
            if bus["unexpected"]:
                failures.append(f"{bus['unexpected']} unexpected keys on the bus")
            partition_of = {(m.key() or b"").decode(): m.partition()
                            for m in kio.read_topic(ws.kafka, ws.kafka.alerts_topic, timeout=300)}
            lost = {"webhook": len(web.lost_webhook),
                    "bus": len((ids - set(received["bus"])) | {i for i in ids if states["bus"].get(i) != DELIVERED})}
            duplicated = {"webhook": web.webhook_duplicated, "bus": bus["duplicated"]}
            resent = {"webhook": web.resent_same_key, "bus": bus["resent_same_key"]}
            result.lost, result.duplicated = sum(lost.values()), sum(duplicated.values())
            result.resent_same_key = sum(resent.values())
            result.faults = len(state.events)
            result.runs = state.starts
            result.details = details(state.events, received, partition_of, wall0, timeouts_ms, stalls_s, CHANNELS)
            result.details.update({
                "alerts_published": len(published), "rate_per_s": rate, "partitions": PARTITIONS,
                "lease_s": LEASE_SECONDS, "dispatcher_starts": state.starts, "fenced": _fenced(ws), "settled_after_s": round(result.recovery_s[0], 1),
                "webhook": {**web.details()["webhook"], "lost": lost["webhook"]},
                "bus": {**bus, "ledger_not_delivered": bus_open, "lost": lost["bus"]},
                "failures": failures,
            })
            result.rows = rows(result.details, lost, duplicated, state.starts, CHANNELS, resent)
            return result.finish(t0)
    except ChaosError as exc:
        return result.aborted(failures, exc, t0)
    finally:
        faults.close()
        for d in state.slots if state else []:
            if d.alive():
                d.resume()
                d.kill()
            d.forget()
        if cleanup:
            kadmin.delete_topics(ws.kafka, [bus_topic])
            ws.cleanup()


def _fenced(ws: Workspace) -> list[str]:
    """The dispatchers' log lines of a partition stopped by the fence (a resumed one writing under its old epoch)."""
    return [line.strip()[:200] for path in sorted(ws.logs.glob("dispatcher-*.log"))
            for line in path.read_text(errors="replace").splitlines() if re.search(r": partition \d+ stopped: ", line)]
