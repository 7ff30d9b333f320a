"""`aldebaran bench e2e`: trades in, each alert received once at every recipient, as fast as the
auditor finds them.

    aldebaran bench e2e [--rates 5000,10000,20000,50000] [--seconds 20] [--mix original|custom] [--overfill-fraction F]

This process produces trades (loadgen; the original publisher's mix by default) at a rate to a fresh
trades topic and runs the auditor (micro-batch, processing-time trigger 0 s, as :func:`harness.latency`);
one streaming dispatcher process per channel, launched as the dispatch_supervisor DAG launches them
(``aldebaran dispatch --follow --channel C --name N``, own env), delivers into a webhook receiver
process, a Kafka bus topic (read back: :class:`~aldebaran_capacity.bench.dispatch.BusReader`) and an SMS provider.

Ramp: a warm-up, then each rate for `seconds`. A rate is **sustained** when, within `catch_up_s` after
the producer stops, every expected alert of the segment reached every channel of :data:`SUSTAINED`
(webhook + bus) and none of their backlogs (consumer-group lag, sampled every second) grew along the
segment (:func:`backlog_growing`). The ramp stops at the first rate not sustained. SMS (one ledger
record per alert, a provider that cannot deduplicate) is measured, not required.

Expected alerts: the reference model over each segment's records before it is produced, with the
record index as event time (which alerts fire does not depend on time while no book expires: TTL
10 min ≫ the run, no orphans in either mix), so a trigger's produce stamp is ``stamps[index]`` — the
alert's ``trigger_event_ts`` (the trades carry no ``ts``; loadgen stamps the Kafka timestamp as sent).
Latency = receipt (receiver clock; bus: the timestamp the dispatcher's producer set) − that stamp.

Counts at the end, per recipient: expected, received once, duplicates, missing — split into *lost*
(below the channel's committed offset: its dispatcher settled it) and *not reached* (in the channel's
backlog, or not emitted yet, when the bench stopped: an SMS provider behind). Correct = no duplicate,
nothing lost or unexpected anywhere, nothing missing at webhook and bus, the auditor's alerts equal
the reference's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

from aldebaran_capacity import loadgen
from aldebaran_capacity.bench.harness import auditor_settings, bench_topics, compare, expected_of, percentile, tag
from aldebaran_capacity.loadgen import Mix

log = logging.getLogger(__name__)

CHANNELS = ("webhook", "bus", "sms")
SUSTAINED = ("webhook", "bus")  # the target's channels: a rate is sustained only if both keep up
GROUP = "aldebaran-dispatcher"  # a channel's dispatchers consume as group <GROUP>-<channel name>
DEFAULT_RATES = (5_000, 10_000, 20_000, 50_000)
NO_EXPIRY_MS = 10**12


def custom_mix(overfill_fraction: float) -> Mix:
    return Mix(overfill_fraction=overfill_fraction, open_orders=100, duplicate_fraction=0.01, malformed_fraction=0.001)


# --- pure parts (tests/unit/aldebaran_capacity/bench/test_bench_e2e.py) -----
def latency_ms(received_at: dict[str, float], trigger_ms: dict[str, int]) -> dict:
    """p50/p95/p99/max of receipt (epoch s) − trigger stamp (epoch ms), over the alerts in both."""
    lat = [received_at[a] * 1000 - ts for a, ts in trigger_ms.items() if a in received_at]
    return {"p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95), "p99_ms": percentile(lat, 99),
            "max_ms": max(lat) if lat else float("nan"), "timed": len(lat)}


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y); 0 with fewer than two distinct t."""
    try:
        return statistics.linear_regression([t for t, _ in points], [y for _, y in points]).slope
    except statistics.StatisticsError:
        return 0.0


def backlog_growing(samples: list[tuple[float, int]], start: float, stop: float, alert_rate: float,
                    tolerance: float = 0.1) -> bool:
    """Did a backlog grow without bound while the producer ran? Its lag samples (t, lag) over the second
    half of [start, stop] rise faster than `tolerance` × the alert rate (micro-batches make the lag saw-
    toothed; a backlog that keeps up returns to its level, one that does not climbs by the shortfall)."""
    mid = (start + stop) / 2
    half = [(t, lag) for t, lag in samples if mid <= t <= stop]
    return len(half) >= 3 and slope(half) > tolerance * max(alert_rate, 1.0)


def segment_sustained(caught_up: dict[str, bool], growing: dict[str, bool], channels=SUSTAINED) -> bool:
    return all(caught_up.get(c, False) and not growing.get(c, True) for c in channels)


def recipient_counts(expected: set[str], received: set[str], duplicates: int, backlog: set[str]) -> dict:
    """Counts at one recipient. `backlog`: expected alerts its dispatcher had not settled when stopped."""
    missing = expected - received
    not_reached = missing & backlog
    return {"expected": len(expected), "received": len(expected & received),
            "received_once": len(expected & received) - duplicates, "duplicates": duplicates,
            "missing": len(missing), "lost": len(missing - not_reached), "not_reached": len(not_reached),
            "unexpected": len(received - expected)}


def headline(segments: list[dict], counts: dict[str, dict]) -> dict:
    """The stable keys (bench-results.json `e2e.*`): the highest sustained segment's achieved rate and
    per-channel figures at it (the first segment's when none was sustained); whole-run counts."""
    ramp = [s for s in segments if not s.get("warmup")]
    ok = [s for s in ramp if s["sustained"]]
    at = max(ok, key=lambda s: s["rate"]) if ok else (ramp[0] if ramp else None)
    channels = {}
    for name, c in counts.items():
        fig = (at or {}).get("channels", {}).get(name, {})
        channels[name] = {"deliveries_eps": fig.get("deliveries_eps"), "p50_ms": fig.get("p50_ms"),
                          "p95_ms": fig.get("p95_ms"), "p99_ms": fig.get("p99_ms"),
                          "duplicates": c["duplicates"], "lost": c["lost"], "counts": c}
    correct = all(c["duplicates"] == 0 and c["lost"] == 0 and c["unexpected"] == 0 for c in counts.values()) and all(
        counts[n]["missing"] == 0 for n in SUSTAINED if n in counts)
    return {"sustained_trades_eps": at["achieved_rate"] if ok else 0.0, "sustained_offered_rate": at["rate"] if ok else 0,
            "figures_at_rate": at["rate"] if at else None, "correct": correct, "channels": channels}


# --- processes ----------------------------------------------------------------------------------------
class Dispatchers:
    """One `aldebaran dispatch --follow` process per channel, launched as dispatch_supervisor does."""

    def __init__(self, store, tagname: str, env: dict[str, str]) -> None:
        self.store, self.tag, self.env = store, tagname, env
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def name(self, channel: str) -> str:  # not the supervisor's names: never overwrite a live heartbeat
        return f"bench-e2e-{self.tag}-{channel}"

    def channel_name(self, channel: str) -> str:
        """The run's own channel name: a dispatcher's consumer group is <GROUP>-<channel name>, whatever the
        topic, so a `webhook` channel here would share its group with every other `webhook` dispatcher on
        the broker (tests, chaos campaigns, the platform's own) and be rebalanced by them mid-measurement."""
        return f"{channel}_{self.tag}"

    def group(self, channel: str) -> str:
        return f"{GROUP}-{self.channel_name(channel)}"

    def start(self, channel: str, conn: dict, timeout: float = 90.0) -> None:
        from aldebaran.runtime import heartbeat, paths

        own = self.channel_name(channel)
        env = {**self.env, "ALDEBARAN_CHANNELS": own, f"AIRFLOW_CONN_ALDEBARAN_{own.upper()}": json.dumps(conn)}
        self.logs[channel] = paths.run_dir() / "logs" / f"{self.name(channel)}.log"
        self.logs[channel].parent.mkdir(parents=True, exist_ok=True)
        cmd = [str(paths.venv_bin("aldebaran")), "dispatch", "--follow", "--name", self.name(channel), "--channel", own]
        with open(self.logs[channel], "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, cwd=str(paths.ROOT))
        self.procs[channel] = proc
        deadline = time.monotonic() + timeout
        while (heartbeat.read(self.store, heartbeat.DISPATCHER, self.name(channel)) or {}).get("pid") != proc.pid:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dispatcher {channel} did not report running (exit {proc.poll()}); "
                                   f"log {self.logs[channel]}:\n{self.logs[channel].read_text()[-2000:]}")
            time.sleep(0.25)

    def alive(self) -> list[str]:
        return [c for c, p in self.procs.items() if p.poll() is None]

    def stop(self) -> None:
        """SIGTERM (finish the runs in hand, commit), SIGKILL after 60 s; heartbeats deleted."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for channel, p in self.procs.items():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                log.warning("dispatcher %s ignored SIGTERM for 60 s: killed", channel)
                p.kill()
                p.wait(10)
            with contextlib.suppress(Exception):
                from aldebaran.runtime.heartbeat import DISPATCHER, key

                self.store.delete(key(DISPATCHER, self.name(channel)))
        self.procs.clear()


class Sampler(threading.Thread):
    """Every `period` s: each channel's consumer-group lag on the alerts topic, and the CPU seconds used
    so far by each part (auditor = this process's Spark JVM and its Python workers) and by the machine."""

    def __init__(self, kafka, groups: dict[str, str], roles, period: float = 1.0) -> None:
        super().__init__(daemon=True, name="e2e-sampler")
        self.kafka, self.groups, self.roles, self.period = kafka, groups, roles, period
        self.lag: list[dict] = []
        self.cpu: list[tuple[float, dict]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        import psutil

        from aldebaran.kafka.admin import consumer_lag

        while not self.stop_event.wait(self.period):
            row = {"t": time.time()}
            for c, group in self.groups.items():
                with contextlib.suppress(Exception):  # a missed sample is a gap in the plot, not an error
                    row[c] = consumer_lag(self.kafka, group, self.kafka.alerts_topic)["lag"]
            self.lag.append(row)
            busy = psutil.cpu_times()
            self.cpu.append((time.time(), {**{r: _cpu_seconds(pids()) for r, pids in self.roles.items()},
                                           "machine (every process)": sum(busy) - busy.idle - busy.iowait}))

    def cpu_percent(self, start: float, stop: float) -> dict:
        inside = [s for s in self.cpu if start <= s[0] <= stop]
        if len(inside) < 2:
            return {}
        (t0, a), (t1, b) = inside[0], inside[-1]
        return {r: round(100 * (b[r] - a.get(r, 0.0)) / (t1 - t0), 1) for r in b}


def _cpu_seconds(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            ct = psutil.Process(pid).cpu_times()
            total += ct.user + ct.system
    return total


def _roles(dispatchers: Dispatchers, receivers: dict) -> dict:
    import psutil

    from aldebaran.runtime import paths

    def spark() -> list[int]:
        with contextlib.suppress(psutil.Error):
            jvms = [c for c in psutil.Process().children() if c.name() == "java"]
            return [p.pid for j in jvms for p in [j, *j.children(recursive=True)]]
        return []

    out = {"auditor": spark, "bench (loadgen, bus reader)": lambda: [os.getpid()]}
    for ch, proc in dispatchers.procs.items():
        out[f"dispatcher {ch}"] = lambda pid=proc.pid: [pid]
    for kind, rp in receivers.items():
        out[f"receiver {kind}"] = lambda pid=rp.pid: [pid]
    for name in ("kafka", "minio"):  # the local services, if `aldebaran services up` runs them
        with contextlib.suppress(FileNotFoundError, ValueError):
            pid = int(paths.pid_file(name).read_text().strip())
            if psutil.pid_exists(pid):
                out[name] = lambda pid=pid: [pid]
    return out


# --- the run --------------------------------------------------------------------------------------------
def _records(mix: Mix | None, index: int, name: str, n_events: int) -> list:
    if mix is None:  # the original publisher: a request and 4 purchases per order, one order after another
        return list(loadgen.records(loadgen.original_mix(max(1, n_events // 5), seed=1000 + index)))
    per_order = mix.purchases_per_order + 1
    return list(loadgen.mix_records(Mix(**{**asdict(mix), "orders": max(1, n_events // per_order),
                                           "id_prefix": f"{name}-", "seed": mix.seed + index})))


def _committed_backlog(kafka, group: str, offsets: dict[str, list[tuple[int, int]]]) -> set[str]:
    """Alert ids whose every copy on the alerts topic is at or past the group's committed offset."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "log_level": 3})
    try:
        parts = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(kafka.alerts_topic, p) for p in {p for v in offsets.values() for p, _ in v}], timeout=10)}
    finally:
        c.close()
    return {a for a, copies in offsets.items() if all(o >= max(parts.get(p, 0), 0) for p, o in copies)}


def run(spark, rates=DEFAULT_RATES, seconds: float = 20.0, mix: Mix | None = None, catch_up_s: float = 10.0,
        final_drain_s: float = 120.0, growth_tolerance: float = 0.1, webhook_batch: int = 1,
        channels=CHANNELS, warmup=(500, 5.0), stop_at_failure: bool = True) -> dict:
    from aldebaran.audit.sparkjob import job
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.kafka import admin as kadmin
    from aldebaran.kafka.io import read_topic
    from aldebaran.settings import load
    from aldebaran.storage.store import open_store
    from aldebaran_capacity.bench.dispatch import BusReader
    from aldebaran_capacity.receivers import ReceiverProcess

    t = tag()
    prefix = f"bench/{t}/deliveries"
    store = open_store(load(DeliverySettings).store)
    plan = [("warmup", *warmup)] + [(f"r{r}", r, seconds) for r in rates]
    segments: list[dict] = []
    expected: dict[str, dict] = {}  # alert id → the reference's alert (trigger_event_ts: its record index)
    trigger_ms: dict[str, int] = {}
    with bench_topics(t) as kafka, tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt, \
            contextlib.ExitStack() as stack:
        stack.callback(store.delete_prefix, f"bench/{t}/")
        receivers = {kind: ReceiverProcess(kind) for kind in ("webhook", "sms") if kind in channels}
        for rp in receivers.values():
            stack.callback(rp.stop)
            rp.start()
        recipients = dict(receivers)
        conns = {"webhook": lambda r: {"conn_type": "http", "host": r.url, "password": r.secret,
                                       "extra": {"endpoint": "/alerts", "batch": webhook_batch}},
                 "sms": lambda r: {"conn_type": "sms", "host": r.url, "login": r.account_sid, "password": r.auth_token,
                                   "extra": {"from": "+15550001111", "to": "+15552223333", "lookup": True}}}
        if "bus" in channels:
            bus_topic = f"bench-{t}-bus"
            kadmin.ensure_topics(kafka, [bus_topic], partitions=2)
            stack.callback(kadmin.delete_topics, kafka, [bus_topic])
            recipients["bus"] = BusReader(kafka, bus_topic).start()
            stack.callback(recipients["bus"].stop)
        dispatchers = Dispatchers(store, t, {**os.environ, "ALDEBARAN_DELIVERY_PREFIX": prefix,
                                             "ALDEBARAN_KAFKA_ALERTS_TOPIC": kafka.alerts_topic})
        stack.callback(_delete_groups, kafka, [dispatchers.group(c) for c in channels])  # after they stop
        stack.callback(dispatchers.stop)
        for ch in channels:
            dispatchers.start(ch, conns[ch](receivers[ch]) if ch in conns else {
                "conn_type": "kafka", "extra": {"topic": bus_topic, "bootstrap.servers": kafka.bootstrap_servers,
                                                "linger.ms": 5}})
        settings = auditor_settings(t, ckpt, trigger="processing-time", trigger_interval="0 seconds",
                                    timeout_seconds=3600)
        runner = threading.Thread(target=job.run, args=(settings,), kwargs={"spark": spark}, daemon=True,
                                  name="bench-auditor")
        runner.start()
        stack.callback(_stop_auditor, spark, settings.query_name, runner)
        sampler = Sampler(kafka, {c: dispatchers.group(c) for c in channels}, _roles(dispatchers, receivers))
        sampler.start()
        stack.callback(sampler.stop_event.set)

        def received() -> dict[str, int]:
            return {c: r.stats()["received"] for c, r in recipients.items()}

        t_begin = time.time()
        for i, (name, rate, duration) in enumerate(plan):
            recs = _records(mix, i, name, int(rate * duration))
            exp = expected_of(recs, list(range(len(recs))), ttl_ms=NO_EXPIRY_MS)
            expected.update((a["alert_id"], a) for a in exp)
            before = received()
            t_start = time.time()
            sent = loadgen.send(recs, kafka.trades_topic, rate=rate, stamp_now=True, progress_every=0)
            t_stop = time.time()
            trigger_ms.update((a["alert_id"], sent.timestamps[a["trigger_event_ts"]]) for a in exp
                              if a["kind"] == "OVERFILL")
            wait = 120.0 if name == "warmup" else catch_up_s  # warm-up: Spark's first batches, group joins
            now = received()
            while time.time() < t_stop + wait and any(now[c] < len(expected) for c in SUSTAINED if c in channels):
                time.sleep(0.25)
                now = received()
            lag = {c: [(r["t"], r[c]) for r in sampler.lag if c in r] for c in channels}
            seg = {"name": name, "rate": rate, "warmup": name == "warmup", "trades": sent.count,
                   "achieved_rate": sent.rate, "alerts": len(exp), "alert_ids": [a["alert_id"] for a in exp],
                   "t_start": t_start, "t_stop": t_stop, "from_s": round(t_start - t_begin, 2),
                   "to_s": round(t_stop - t_begin, 2), "load_avg": os.getloadavg()[0],
                   "growing": {c: backlog_growing(lag[c], t_start, t_stop, len(exp) / max(duration, 1e-9),
                                                  growth_tolerance) for c in channels},
                   "backlog_max": {c: max((v for ts, v in lag[c] if t_start <= ts <= t_stop + wait), default=None)
                                   for c in channels},
                   "cpu_percent": sampler.cpu_percent(t_start, time.time())}  # producing + catching up
            live_ok = all(now[c] >= len(expected) and not seg["growing"][c] for c in SUSTAINED if c in channels)
            log.info("e2e %s: offered %s/s, achieved %.0f/s, %d alerts; delivered %s; backlog max %s; cpu %s; %s",
                     name, f"{rate:,}", sent.rate, len(exp), {c: now[c] - before[c] for c in now},
                     seg["backlog_max"], seg["cpu_percent"], "kept up" if live_ok else "NOT sustained")
            segments.append(seg)
            if not runner.is_alive() or sorted(dispatchers.alive()) != sorted(channels):
                raise RuntimeError(f"e2e: a part stopped (auditor alive: {runner.is_alive()}, dispatchers alive: "
                                   f"{dispatchers.alive()}; logs {dispatchers.logs})")
            if not live_ok and stop_at_failure and name != "warmup":
                break
        # Final drain: everything to webhook + bus; SMS at most 30 s more once they are done.
        t_last = time.time()
        for seg, nxt in zip(segments, segments[1:] + [None]):
            seg["t_next"] = nxt["t_start"] if nxt else t_last + final_drain_s
        done_at = None
        while time.time() < t_last + final_drain_s:
            got = received()
            if all(got[c] >= len(expected) for c in channels):
                break
            if all(got[c] >= len(expected) for c in SUSTAINED if c in channels):
                done_at = done_at or time.time()
                if time.time() - done_at > 30:
                    break
            time.sleep(0.5)
        sampler.stop_event.set()
        sampler.join(10)
        _stop_auditor(spark, settings.query_name, runner)
        dispatchers.stop()  # they finish the runs in hand and commit: receipts first, then committed offsets
        time.sleep(2.0)  # the bus reader's last poll; late repeats (which must not come) show up
        stats = {c: r.stats(summary=False) if c in receivers else dict(r.stats(), received_at=dict(r.received_at))
                 for c, r in recipients.items()}
        on_topic: dict[str, list[tuple[int, int]]] = {}
        topic_alerts, emitted_at = [], {}  # emitted_at: the first copy's Kafka timestamp (the auditor's write)
        for m in read_topic(kafka, kafka.alerts_topic, timeout=120):
            a = json.loads(m.value())
            topic_alerts.append(a)
            on_topic.setdefault(a["alert_id"], []).append((m.partition(), m.offset()))
            emitted_at[a["alert_id"]] = min(emitted_at.get(a["alert_id"], float("inf")), m.timestamp()[1] / 1000)
        # Not reached: past the channel's committed offset, or not emitted yet when the auditor was stopped.
        backlogs = {c: _committed_backlog(kafka, dispatchers.group(c), on_topic) | (set(expected) - set(on_topic))
                    for c in channels}
    auditor = compare(topic_alerts, list(expected.values()))
    ids = set(expected)
    counts = {c: recipient_counts(ids, set(stats[c]["received_at"]), stats[c]["duplicates"], backlogs[c] & ids)
              for c in channels}
    for seg in segments:
        seg_ids = seg.pop("alert_ids")
        seg_trigger = {a: trigger_ms[a] for a in seg_ids if a in trigger_ms}
        seg["alerts_topic"] = {"emitted": sum(1 for a in seg_ids if a in emitted_at),
                               **latency_ms({a: emitted_at[a] for a in seg_ids if a in emitted_at}, seg_trigger)}
        seg["channels"] = {}
        for c in channels:
            at = {a: stats[c]["received_at"][a] for a in seg_ids if a in stats[c]["received_at"]}
            first, last = (min(at.values()), max(at.values())) if at else (None, None)
            seg["channels"][c] = {
                "received": len(at), "caught_up": len(at) == len(seg_ids) and (last or 0) <= seg["t_stop"] + catch_up_s,
                "drain_s": round(last - seg["t_stop"], 2) if last else None,
                "deliveries_eps": len(at) / (last - first) if at and last > first else None,
                **latency_ms(at, seg_trigger)}
        seg["sustained"] = segment_sustained({c: v["caught_up"] for c, v in seg["channels"].items()}, seg["growing"],
                                             [c for c in SUSTAINED if c in channels])
        # CPU while this segment's work was done: from its start to its last receipt at webhook/bus, at most
        # until the next segment started (the live log line covers only up to the catch-up decision).
        done = max([seg["t_stop"]] + [seg["t_stop"] + v["drain_s"] for c, v in seg["channels"].items()
                                      if c in SUSTAINED and v["drain_s"] is not None])
        seg["cpu_percent"] = sampler.cpu_percent(seg["t_start"], min(done, seg.pop("t_next")))
    out = {"tag": t, "mix": "original" if mix is None else {"custom": asdict(mix)}, "rates": list(rates), "seconds": seconds,
           "rate_seconds": seconds,  # "seconds" becomes the section's whole time in the suite
           "catch_up_s": catch_up_s, "growth_tolerance": growth_tolerance, "webhook_batch": webhook_batch,
           "sustained_channels": [c for c in SUSTAINED if c in channels], "segments": segments,
           "backlog": [{"t": round(r["t"] - t_begin, 2), **{c: r[c] for c in channels if c in r}} for r in sampler.lag],
           "auditor": auditor, **headline(segments, counts)}
    out["correct"] = out["correct"] and auditor["correct"]
    return out


def _delete_groups(kafka, groups: list[str]) -> None:
    from aldebaran.kafka.admin import admin

    client = admin(kafka)
    for group in groups:  # one per request: several groups in one DeleteGroups call never completed here
        for fut in client.delete_consumer_groups([group], request_timeout=10).values():
            with contextlib.suppress(Exception):  # never joined (a failed start): nothing to delete
                fut.result(timeout=15)


def _stop_auditor(spark, query_name: str, runner: threading.Thread) -> None:
    for q in spark.streams.active:
        if q.name == query_name:
            q.stop()
    runner.join(60)


def main(args) -> int:
    """`aldebaran bench e2e`: run, print the results as JSON; 1 if a recipient saw a duplicate or lost an alert."""
    from aldebaran.runtime import spark as sparkmod
    from aldebaran_capacity.bench import machine

    rates = [int(r) for r in args.rates.split(",") if r.strip()] if args.rates else list(DEFAULT_RATES)
    mix = custom_mix(args.overfill_fraction) if args.mix == "custom" else None
    channels = tuple(c.strip() for c in args.channels.split(",") if c.strip())
    if not channels or set(channels) - set(CHANNELS):
        raise SystemExit(f"--channels: a subset of {','.join(CHANNELS)}, got {args.channels!r}")
    spark = sparkmod.session("aldebaran-bench-e2e", master="local[2]", shuffle_partitions=2,
                             conf={"spark.sql.adaptive.enabled": "false", "spark.driver.memory": "4g"})
    t0 = time.monotonic()
    try:
        result = run(spark, rates, seconds=args.seconds, mix=mix, webhook_batch=args.webhook_batch, channels=channels)
    finally:
        spark.stop()
    out = {"machine": machine.describe(), "command": "aldebaran " + " ".join(sys.argv[1:]),
           "seconds": round(time.monotonic() - t0, 1), "e2e": result}
    print(json.dumps(out, indent=1, default=str))
    return 0 if result["correct"] else 1
