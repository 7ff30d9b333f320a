"""`aldebaran chaos under-load`: SIGKILL the auditor and the streaming dispatchers, again and again, while
the whole platform runs at rate; every alert must reach every recipient once.

    trades (original publisher's mix, ≥ 20k/s) → Kafka → auditor (`aldebaran auditor run`, s3a://
    checkpoint on MinIO) → alerts topic → streaming dispatchers (`aldebaran dispatch --follow`, one per
    channel, as dispatch_supervisor starts them) → a webhook receiver (its own process) and a Kafka
    bus topic [+ an SMS provider with a lookup, --sms]

    1. the expected alerts are computed first (the reference model over the same seeded mix, in
       chunks of orders: no book expires during the run, so orders never interact);
    2. the receiver, the dispatchers and the auditor start; then the trades are produced at `rate`
       trades/s for `seconds` s;
    3. meanwhile `kills` SIGKILLs land at evenly spread moments of the load (± jitter), alternately on
       the auditor (driver and Spark JVM: its process group) and on a dispatcher (webhook and bus in
       turn); each killed process is restarted at once, as its supervisor would (the auditor from its
       checkpoint). Measured: auditor kill → the restarted auditor's first committed batch; dispatcher
       kill → the next alert its recipient received;
    4. after the load: the auditor catches up, the dispatchers settle everything (consumer groups
       caught up, no retry pending), then all stop cleanly;
    5. verdict: the alerts topic against the reference (repeats on the at-least-once topic reported);
       per recipient, from its receipts held to its channel's promise (chaos.receipts): lost (expected,
       never received), duplicated (received twice where the promise forbids it: a second text at the
       SMS provider; on the bus, a copy whose key is not its alert id), resent_same_key (the webhook's
       and the bus's same-key resends, which their promise allows), unexpected.

Backlogs (the auditor's trades lag, each channel's consumer-group lag) are sampled every 2 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from aldebaran.audit import reference
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.runtime.progress import track
from aldebaran_capacity import loadgen
from aldebaran_lab.chaos.common import (
    AuditorProcess, CampaignResult, ChaosError, DispatcherProcess, Workspace, auditor_args, bus_connection, bus_verdict,
    caught_up, campaign_ledger, committed, delivery_env, first_receipt_after, recovery_text, unsettled, wait_for,
)
from aldebaran_lab.chaos.receipts import promise_of, recipient

log = logging.getLogger(__name__)

TTL_SECONDS = 86_400.0  # no book expires during the run
LEASE_SECONDS = 10.0
ORDERS_PER_CHUNK = 20_000
EVENTS_PER_ORDER = 5  # the original publisher: a request and 4 purchases


def mix(orders: int, seed: int, part: tuple[int, int] = (0, 1)):
    """The original publisher's mix, `orders` orders in chunks (deterministic: twice the same records);
    `part` (k, n): only every n-th chunk from the k-th (one of n producers)."""
    k, n = part
    for i, start in enumerate(range(0, orders, ORDERS_PER_CHUNK)):
        if i % n == k:
            yield list(loadgen.records(loadgen.original_mix(min(ORDERS_PER_CHUNK, orders - start), seed * 100_000 + i)))


def expected_keys(orders: int, seed: int, part: tuple[int, int] = (0, 1)) -> dict[str, tuple]:
    """alert id → the reference's alert (as reference.key) for the whole mix, chunk by chunk; `part` (k, n):
    only the chunks of :func:`mix`'s part (n processes can share the work)."""
    from aldebaran.audit.reference import expected_grouped

    out: dict[str, tuple] = {}
    for chunk in mix(orders, seed, part):
        for a in expected_grouped(((r.key, r.value, i) for i, r in enumerate(chunk)), int(TTL_SECONDS * 1000)):
            if a["alert_id"] in out:
                raise ChaosError(f"the reference expects alert {a['alert_id']} twice")
            out[a["alert_id"]] = reference.key(a)
    return out


@dataclass
class KillEvent:
    n: int
    target: str  # auditor | dispatcher webhook | dispatcher bus | dispatcher sms
    at_wall: float
    at_s: float  # seconds into the load
    recovery_s: float | None = None
    note: str = ""


@dataclass
class Sampler:
    """Backlogs every `period` s: the auditor's trades lag and each channel's alerts lag."""

    ws: Workspace
    channels: list[str]
    period: float = 2.0
    rows: list[dict] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        from aldebaran.delivery.dispatcher import GROUP

        t0 = time.time()
        while not self.stop.wait(self.period):
            row: dict = {"t": round(time.time() - t0, 1)}
            with contextlib.suppress(Exception):  # a missed sample is a gap, not an error
                ends = kio.end_offsets(self.ws.kafka, self.ws.kafka.trades_topic)
                _, done = committed(self.ws)
                row["auditor"] = sum(max(0, e - done.get(p, 0)) for p, e in ends.items())
            for c in self.channels:
                with contextlib.suppress(Exception):
                    row[c] = kadmin.consumer_lag(self.ws.kafka, f"{GROUP}-{c}", self.ws.kafka.alerts_topic)["lag"]
            self.rows.append(row)

    def max(self, what: str) -> int | None:
        values = [r[what] for r in self.rows if what in r]
        return max(values) if values else None


def run(rate: float = 20_000, seconds: float = 120.0, kills: int = 8, seed: int = 1, mode: str = "full",
        sms: bool = False, webhook_batch: int = 1, producers: int = 2, max_offsets: int | None = None, jitter: float = 0.25,
        catch_up_timeout: float = 1800.0, cleanup: bool = True) -> CampaignResult:
    from aldebaran_capacity.receivers import ReceiverProcess

    t0 = time.monotonic()
    result = CampaignResult("under-load", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    rng = random.Random(seed)
    orders = max(1, int(rate * seconds) // EVENTS_PER_ORDER)
    ws = Workspace.create("under-load", s3a=True)
    channels = ["webhook", "bus"] + (["sms"] if sms else [])
    bus_topic = f"chaos-{ws.name}-bus"
    auditor: AuditorProcess | None = None
    dispatchers: dict[str, DispatcherProcess] = {}
    receivers: dict[str, ReceiverProcess] = {}
    sampler = Sampler(ws, channels)
    try:
        t_ref = time.monotonic()
        expected = expected_keys(orders, seed)
        log.info("under-load: %d orders (%d trades), %d alerts expected (reference: %.0fs)", orders,
                 orders * EVENTS_PER_ORDER, len(expected), time.monotonic() - t_ref)
        kadmin.ensure_topics(ws.kafka, [bus_topic], partitions=2)
        receivers["webhook"] = ReceiverProcess("webhook").start()
        conns = {"webhook": {"conn_type": "http", "host": receivers["webhook"].url, "password": receivers["webhook"].secret,
                             "extra": {"endpoint": "/alerts", "timeout": 10, "batch": webhook_batch}},
                 "bus": bus_connection(ws.kafka.bootstrap_servers, bus_topic)}
        if sms:
            receivers["sms"] = ReceiverProcess("sms").start()
            r = receivers["sms"]
            conns["sms"] = {"conn_type": "sms", "host": r.url, "login": r.account_sid, "password": r.auth_token,
                            "extra": {"from": "+15550001111", "to": "+15552223333", "timeout": 10, "lookup": True}}
        prefix = f"{ws.prefix}/deliveries"
        for ch in channels:
            env = ws.env(ALDEBARAN_CHANNELS=ch, **{f"AIRFLOW_CONN_ALDEBARAN_{ch.upper()}": json.dumps(conns[ch])},
                         **delivery_env(prefix, LEASE_SECONDS))
            dispatchers[ch] = DispatcherProcess(f"chaos-{ws.name}-{ch}", env, ws.logs / f"dispatcher-{ch}.log", [ch],
                                                ws.store).start()
        for d in dispatchers.values():
            wait_for(d.running, 180, 0.5, f"dispatcher {d.name} running")
        per_trigger = max_offsets or int(rate * 5)
        auditor = AuditorProcess(ws.env(), auditor_args(ws, max_offsets=per_trigger, ttl_seconds=TTL_SECONDS),
                                 ws.logs / "auditor.log")
        auditor.start()
        wait_for(lambda: committed(ws)[0] > 0 or not auditor.alive(), 600, 1.0, "the auditor's first (empty) batch")
        if not auditor.alive():
            raise ChaosError(f"auditor exited at start: {auditor.tail(10)}")
        threading.Thread(target=sampler.run, daemon=True, name="under-load-sampler").start()

        # --- the load, and the kills during it ---
        sent: dict = {}

        def produce() -> None:
            # The producers run in processes of their own (in this one they would share the GIL with the
            # campaign's polling), `producers` of them, each with every producers-th chunk of the mix at
            # rate / producers: one Python producer falls short of 20k/s on a busy 2-core machine.
            procs = []
            with open(ws.logs / "producer.log", "ab") as err:
                for k in range(producers):
                    cmd = [sys.executable, "-m", "aldebaran_lab.chaos.under_load", "--orders", str(orders), "--seed",
                           str(seed), "--rate", str(rate / producers), "--part", f"{k}/{producers}"]
                    procs.append(subprocess.Popen(cmd, env=ws.env(), stdout=subprocess.PIPE, stderr=err,
                                                  stdin=subprocess.DEVNULL))
                outs = [(p, p.communicate()[0]) for p in procs]
            bad = [p.returncode for p, _ in outs if p.returncode != 0]
            if bad:
                sent["error"] = f"producer(s) exited {bad}; see {ws.logs / 'producer.log'}"
                return
            parts = [json.loads(out.decode().strip().splitlines()[-1]) for _, out in outs]
            sent["result"] = loadgen.Sent(sum(p["count"] for p in parts), max(p["seconds"] for p in parts))

        targets = ["auditor" if i % 2 == 0 else f"dispatcher {channels[(i // 2) % 2]}" for i in range(kills)]
        moments = sorted((i + 0.5 + rng.uniform(-jitter, jitter)) * seconds / max(kills, 1) for i in range(kills))
        load = threading.Thread(target=produce, daemon=True, name="under-load-producer")
        wall0, load_t0 = time.time(), time.monotonic()
        load.start()
        events: list[KillEvent] = []
        pending_auditor: list[tuple[KillEvent, int, float]] = []  # (event, batches at restart, monotonic kill)
        deaths: list[str] = []
        for n, (target, moment) in enumerate(track(list(zip(targets, moments)), "under-load", unit="kills",
                                                   logger=log), 1):
            while time.monotonic() - load_t0 < moment and load.is_alive():
                _supervise(auditor, dispatchers, deaths, pending_auditor, ws)
                time.sleep(0.2)
            if not load.is_alive():
                failures.append(f"the load ended before kill {n} ({target}): use more --seconds")
                break
            ev = KillEvent(n, target, time.time(), round(time.monotonic() - load_t0, 1))
            if target == "auditor":
                for item in pending_auditor:  # killed again before the restart committed a batch
                    item[0].note = "killed again while restarting"
                pending_auditor.clear()
                auditor.kill()
                auditor.start()
                pending_auditor.append((ev, committed(ws)[0], time.monotonic()))
            else:
                d = dispatchers[target.split()[1]]
                d.kill()
                d.start()
            events.append(ev)
            result.faults += 1
            log.info("kill %d/%d: SIGKILL %s %.1fs into the load; restarted", n, kills, target, ev.at_s)
        load.join()
        load_s = time.monotonic() - load_t0
        if "error" in sent:
            raise ChaosError(f"producing the trades failed: {sent['error']!r}")
        trades = sent["result"]
        log.info("under-load: %d trades in %.1fs (%.0f/s)", trades.count, trades.seconds, trades.count / trades.seconds)

        # --- catch up, settle, stop ---
        ends = kio.end_offsets(ws.kafka, ws.kafka.trades_topic)
        t_end = time.monotonic()
        wait_for(lambda: caught_up(ws, ends), catch_up_timeout, 2.0, "the auditor caught up",
                 on_tick=lambda: _supervise(auditor, dispatchers, deaths, pending_auditor, ws))
        auditor_caught_up_s = time.monotonic() - t_end
        ledger = campaign_ledger(ws.store, prefix, LEASE_SECONDS)
        left: dict = {}

        def settled() -> bool:
            _supervise(auditor, dispatchers, deaths, pending_auditor, ws)
            left.clear()
            left.update(unsettled(ws.kafka, ledger, channels, lookup=("sms",) if sms else ()))
            return not left

        try:
            wait_for(settled, catch_up_timeout, 3.0, "every channel settled")
        except ChaosError:
            failures.append(f"not settled {catch_up_timeout:.0f}s after the auditor caught up: {left}")
        delivered_s = time.monotonic() - t_end
        for ev, _, _ in pending_auditor:
            ev.note = "no batch committed after the restart before the end"
        if deaths:
            failures.append(f"{len(deaths)} unexpected exit(s), restarted by the campaign: {deaths[:3]}")
        sampler.stop.set()
        rc = auditor.stop()
        if rc not in (0, None):
            failures.append(f"auditor: clean stop exited {rc}: {auditor.tail(5)}")
        for d in dispatchers.values():
            rc = d.stop()
            if rc != 0:
                failures.append(f"dispatcher {d.name}: clean stop exited {rc}")
        time.sleep(1.0)
        result.runs = auditor.starts + sum(d.starts for d in dispatchers.values())

        # --- verdict ---
        topic = _topic_verdict(ws, expected)
        if topic["missing"] or topic["extra"] or topic["changed"]:
            failures.append(f"alerts topic differs from the reference: {topic}")
        ids = set(expected)
        recipients: dict[str, dict] = {}
        stats = {k: r.stats(summary=False) for k, r in receivers.items()}
        received_at: dict[str, list[float]] = {}
        web = stats["webhook"]
        recipients["webhook"] = {**recipient(web, ids, promise_of("webhook")),
                                 "resent_same_key_deduplicated": web["duplicates"],
                                 "incomplete_requests": web["incomplete_requests"]}
        received_at["webhook"] = list(web["received_at"].values())
        bus, first = bus_verdict(ws.kafka, bus_topic, ids)
        received_at["bus"] = list(first.values())
        recipients["bus"] = bus
        if sms:
            s = stats["sms"]
            got = set(s["received_at"])
            states = ledger.states("sms")
            in_doubt = {i for i in ids - got if states.get(i) == "IN_DOUBT"}
            recipients["sms"] = {**recipient(s, ids, promise_of("sms_lookup")), "in_doubt": len(in_doubt),
                                 "lost": len(ids - got - in_doubt)}
            received_at["sms"] = list(s["received_at"].values())
        for ev in events:
            if ev.target.startswith("dispatcher"):
                ch = ev.target.split()[1]
                ev.recovery_s = first_receipt_after(received_at[ch], ev.at_wall)
        for name, r in recipients.items():
            if r["unexpected"]:
                failures.append(f"{name}: {r['unexpected']} alerts received that the reference does not expect")
        result.lost = sum(r["lost"] for r in recipients.values())
        result.duplicated = sum(r["duplicated"] for r in recipients.values())
        result.resent_same_key = sum(r["resent_same_key"] or 0 for r in recipients.values())
        result.recovery_s = [e.recovery_s for e in events if e.recovery_s is not None]
        by_target: dict[str, list[KillEvent]] = {}
        for e in events:
            by_target.setdefault(e.target, []).append(e)
        result.details = {
            "offered_trades_per_s": rate, "seconds": seconds, "orders": orders, "producer_processes": producers,
            "trades": {"sent": trades.count, "elapsed_s": round(trades.seconds, 1),
                       "achieved_per_s": round(trades.count / trades.seconds), "load_s": round(load_s, 1)},
            "alerts_expected": len(expected), "channels": channels, "webhook_batch": webhook_batch,
            "max_offsets_per_trigger": per_trigger,
            "kills": {t: len(v) for t, v in by_target.items()},
            "kill_events": [{"n": e.n, "target": e.target, "at_s": e.at_s,
                             "recovery_s": None if e.recovery_s is None else round(e.recovery_s, 1),
                             **({"note": e.note} if e.note else {})} for e in events],
            "unexpected_exits": deaths,
            "auditor_caught_up_s_after_load": round(auditor_caught_up_s, 1),
            "all_delivered_s_after_load": round(delivered_s, 1),
            "backlog_max": {w: sampler.max(w) for w in ["auditor", *channels]},
            "backlog": sampler.rows[:: max(1, len(sampler.rows) // 60)],
            "alerts_topic": topic,
            "recipients": recipients,
            "failures": failures,
        }
        rows = []
        for target, evs in by_target.items():
            what = ("kill → first batch committed by the restarted auditor" if target == "auditor"
                    else f"kill → next alert received at the {target.split()[1]} recipient")
            rows.append({"scenario": f"SIGKILL {target} at {', '.join(f'{e.at_s:.0f}' for e in evs)} s of the load, "
                                     "restarted at once", "runs": len(evs) + 1, "faults": len(evs), "lost": "–",
                         "duplicated": "–", "resent_same_key": "–",
                         "recovery": f"{what}: {recovery_text([e.recovery_s for e in evs if e.recovery_s is not None])}"})
        labels = {"webhook": "webhook receiver (dedupes by Idempotency-Key)",
                  "bus": "Kafka bus topic (consumers dedupe by key)", "sms": "SMS provider with lookup (cannot dedupe)"}
        for name, r in recipients.items():
            extra = f"; IN_DOUBT: {r['in_doubt']}" if "in_doubt" in r else ""
            rows.append({"scenario": f"{labels[name]}: {r['received']} of {r['expected']} alerts{extra}",
                         "runs": result.runs, "faults": result.faults, "lost": r["lost"], "duplicated": r["duplicated"],
                         "resent_same_key": r["resent_same_key"],
                         "recovery": f"auditor caught up {auditor_caught_up_s:.0f} s, everything delivered "
                                     f"{delivered_s:.0f} s after the load ended"})
        result.rows = rows
        return result.finish(t0)
    except ChaosError as exc:
        failures.append(str(exc))
        result.details["failures"] = failures
        result.lost = -1
        return result.finish(t0)
    finally:
        sampler.stop.set()
        if auditor is not None and auditor.alive():
            auditor.kill()
        for d in dispatchers.values():
            if d.alive():
                d.kill()
            d.forget()
        for r in receivers.values():
            r.stop()
        if cleanup:
            with contextlib.suppress(Exception):
                kadmin.delete_topics(ws.kafka, [bus_topic])
            ws.cleanup()


def _supervise(auditor: AuditorProcess, dispatchers: dict, deaths: list[str], pending: list, ws: Workspace) -> None:
    """Restart what died by itself (counted as a finding), and time the auditor's recoveries."""
    if pending:
        n = committed(ws)[0]
        for item in list(pending):
            ev, at_restart, killed = item
            if n > at_restart:
                ev.recovery_s = time.monotonic() - killed
                pending.remove(item)
    if not auditor.alive():
        deaths.append(f"auditor rc {auditor.returncode()}: {_cause(auditor.tail(200))}")
        log.warning("auditor exited by itself (rc %s); restarting", auditor.returncode())
        auditor.start()
    for d in dispatchers.values():
        if not d.alive():
            deaths.append(f"dispatcher {d.name} rc {d.returncode()}: {_cause(d.tail(200))}")
            log.warning("dispatcher %s exited by itself (rc %s); restarting", d.name, d.returncode())
            d.start()


def _cause(log_tail: str) -> str:
    """The last error line of a log tail (what a process died of), else its last line."""
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    errors = [ln for ln in lines if any(w in ln for w in ("Error:", "Error(", "Exception:", "Lost:", "ERROR"))]
    return ((errors or lines or ["(no log)"])[-1])[:300]


def _topic_verdict(ws: Workspace, expected: dict[str, tuple]) -> dict:
    """The alerts topic against the reference, by alert id (repeats on the topic counted)."""
    seen: dict[str, tuple] = {}
    raw = 0
    for m in kio.read_topic(ws.kafka, ws.kafka.alerts_topic, timeout=300):
        a = json.loads(m.value())
        raw += 1
        seen.setdefault(a["alert_id"], reference.key(a))
    missing = expected.keys() - seen.keys()
    extra = seen.keys() - expected.keys()
    changed = [i for i in expected.keys() & seen.keys() if expected[i] != seen[i]]
    return {"expected": len(expected), "received_raw": raw, "unique": len(seen), "duplicates_raw": raw - len(seen),
            "missing": len(missing), "extra": len(extra), "changed": len(changed),
            "examples": sorted(missing)[:3] + sorted(extra)[:3] + changed[:3]}


def main(argv: list[str] | None = None) -> int:
    """The load of the campaign, in its own process: ``python -m aldebaran_lab.chaos.under_load --orders N --seed S
    --rate R`` produces :func:`mix` to ALDEBARAN_KAFKA_TRADES_TOPIC at R trades/s and prints
    ``{"count", "seconds"}`` as its last line."""
    from aldebaran.runtime import envfile, logs
    from aldebaran.settings import KafkaSettings, load

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--orders", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--part", default="0/1", help="k/n: this producer's share of the chunks (one of n producers)")
    args = p.parse_args(argv)
    k, n = (int(x) for x in args.part.split("/"))
    envfile.load_env()
    logs.setup("chaos-producer")
    kafka = load(KafkaSettings)
    recs = (r for chunk in mix(args.orders, args.seed, (k, n)) for r in chunk)
    sent = loadgen.send(recs, kafka.trades_topic, rate=args.rate, progress_every=500_000, settings=kafka)
    print(json.dumps({"count": sent.count, "seconds": sent.seconds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
