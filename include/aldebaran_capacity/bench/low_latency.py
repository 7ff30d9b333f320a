"""`aldebaran bench low-latency`: trade→alert latency of the real-time-mode lane, with the same run's floor and the
box's state, at paced rates; its agreement with the reference model and with the exact lane.

    aldebaran bench low-latency [--rates 1000,10000] [--seconds 20] [--repeats 3] [--warmup-seconds 10]
                                [--micro-batch] [--runtime 4.3|control] [--no-exact]
                                [--checkpoint-interval '5 minutes'] [--conf K=V ...]
                                [--fast-webhook [--fast-webhook-batch 100]] [--out FILE] [--report]

``--report`` writes its section of docs/benchmarks.md and its ``low_latency`` key into
docs/img/bench-results.json (:mod:`aldebaran_capacity.bench.lane_report`), keeping the rest.

The lane runs as it does in production: spark-submit of the Spark 4.3 runtime (aldebaran.lanes.launch),
reading a fresh trades topic and writing a fresh alerts topic on the shared Kafka. Once a probe order's alert
comes back, a **warm-up** segment (``--warmup-seconds`` at the highest rate, ≤ 10k/s) runs and is reported
apart, never in the figures: the first seconds of a fresh JVM (class loading, the JIT, RocksDB's first
writes, the shuffle's connections) are a start-up cost, not the lane's steady latency. Then ``--repeats`` runs
(default 3), each measuring every rate in turn; a rate's row in ``segments`` is the median of its runs with the
spread of their p99s (``runs``, ``p99_spread_ms``, ``per_run``: aldebaran_capacity.bench.lane_runs). Each segment
produces the original publisher's mix (one request, four purchases per order; loadgen.original_mix) paced at
its rate by the Java client (bench/paced.py), each trade stamped with the wall clock as it is sent (its Kafka
timestamp, which the lane takes as the event time). An alert's latency is the time a consumer of the lane's
topic receives it (a thread polling for the whole bench) minus its ``trigger_event_ts``: the send time of the
trade that put the order over; the alert's own Kafka timestamp (the lane's send) gives ``sink_p50_ms`` /
``sink_p99_ms`` beside it. Both clocks are this machine's.

With each segment: the **floor** — the same trades read back by a plain Java consumer while they are produced
(bench/floor.py), so the floor is the bus's and not a Python client's tail; the **box's state** —
load, run queue, steal and every process's CPU by role (bench/boxstate.py), ``quiet: false`` when anything
outside the platform, the lane and the bench took more than 0.2 core; the lane's own CPU; and latency per
second over the segment (``series``), plotted in docs/img/bench-low-latency.png. With ``--fast-webhook``, the
1k and 10k rates run once more in each run with a fast channel (a webhook with ``fast: true``) and a fast dispatcher
delivering the lane's alerts to a webhook receiver: their segments get trade → recipient
(``fast_delivery_p50_ms`` / ``_p99_ms``) and the lane's figures while the dispatcher shared the box
(``with_fast``), and the rate the recipient received them at (``fast_deliveries_eps``, first to last receipt:
bounded by the alerts the rate makes, not a ceiling; that is ``dispatch.fast``). ``--fast-webhook-batch`` (default 100, as ``bench deployed``'s webhook) is the channel's
``batch`` extra: up to that many alerts a signed POST; 1 is one POST an alert, which peaks near 600 deliveries/s
on 2 cores (2026-11-30 10:17: trade → recipient p99 13.5 s at 10k events/s that way).

Agreement, two ways. Per segment, the lane's alerts against the reference model's for the same trades and
stamps, on :data:`aldebaran.audit.reference.KEY_FIELDS` (``segments[].agreement`` = |same| / |union|, with the
missing and extra counts). And against the exact lane itself: after the segments the micro-batch auditor
runs over the same trades topic (available-now, the control venv's Spark), and the two lanes' alerts go
through the reconciliation (:class:`aldebaran.lanes.judge.Reconciliation`, TTL unbounded as the exact
lane runs afterwards): ``agreement`` = {confirmed, unconfirmed, missed, …} (``--no-exact`` skips it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from aldebaran.audit import reference
from aldebaran.runtime import paths
from aldebaran.lanes.launch import Lane
from aldebaran.lanes.launch import stop as stop_lane
from aldebaran.settings import KafkaSettings, load
from aldebaran_capacity import loadgen
from aldebaran_capacity.bench import harness

log = logging.getLogger(__name__)

DEFAULT_RATES = (1_000, 10_000, 50_000)
WARMUP_SECONDS = 10.0
WARMUP_MAX_RATE = 10_000
FAST_RATES = (1_000, 10_000)  # where trade → recipient on a fast channel is measured
PROBE = "rtm-probe-"  # order ids of the start-up probes
JVM_OPTS = "spark.driver.extraJavaOptions"
# Roles that only the bench may run on the box while it measures (boxstate.BoxSampler's `foreign`).
FOREIGN = ("auditor", "dispatcher", "lane")
def _percentile(values: list[float], q: float) -> float | None:
    """harness.percentile, None (JSON null) rather than NaN for an empty segment."""
    return harness.percentile(values, q) if values else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def series(points: list[tuple[int, float]], t0_ms: int) -> list[list]:
    """(timestamp ms, latency ms) points → one row per second since `t0_ms`: [second, n, p50, p99, max]."""
    buckets: dict[int, list[float]] = {}
    for ts, lat in points:
        buckets.setdefault(int((ts - t0_ms) // 1000), []).append(lat)
    return [[sec, len(v), _round(_percentile(v, 50)), _round(_percentile(v, 99)), max(v)]
            for sec, v in sorted(buckets.items())]


class _Alerts(threading.Thread):
    """A consumer of the lane's alerts topic from its start, polling in its own thread for the whole bench;
    keeps every alert with the time this consumer received it (the latency a subscriber sees: the lane's
    produce, the broker and the fetch), and each alert's Kafka timestamp (the lane's producer stamps it on send)
    apart, as a breakdown."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        from aldebaran.kafka.io import consumer

        super().__init__(daemon=True, name=f"alerts-{topic}")
        self._c = consumer(kafka, f"rtm-bench-{uuid.uuid4().hex[:8]}", **{"auto.offset.reset": "earliest"})
        self._c.subscribe([topic])
        self._done = threading.Event()
        self.seen: list[tuple[int, dict]] = []  # (received at, epoch ms; the alert)
        self.produced: dict[str, int] = {}  # alert id → its Kafka timestamp
        self.start()

    def run(self) -> None:
        # poll(), not consume(n, timeout): a consume waits out its timeout to fill a batch, which would add up to
        # that timeout to every figure.
        while not self._done.is_set():
            m = self._c.poll(0.05)
            if m is None or m.error() is not None:
                continue
            received = int(time.time() * 1000)
            try:
                alert = json.loads(m.value() or b"")
            except (ValueError, RecursionError):  # any bytes can be on an alerts topic (BRIEF §2): not an alert
                continue
            if not isinstance(alert, dict):
                continue
            self.seen.append((received, alert))
            self.produced.setdefault(alert.get("alert_id"), m.timestamp()[1])

    def poll(self, seconds: float) -> None:
        """Wait `seconds` while the thread reads (the callers' name for it before the thread)."""
        time.sleep(seconds)

    def close(self) -> None:
        self._done.set()
        self.join(10)
        self._c.close()


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of process group `pgid` (the lane's
    spark-submit JVM and its Python driver): the lane's cost in cores is its growth over a wall-clock span."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat, the process group, after the command name
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def _probe(kafka: KafkaSettings, topic: str, alerts: _Alerts, timeout: float, every: float = 1.0) -> float:
    """Send an overfilled order about every `every` seconds until one's alert comes back: the lane is up (it starts
    at the topic's latest offsets, so probes sent before its query runs are never read). Returns the seconds from
    the call to the first probe alert's receipt (its receive stamp, not when this loop looked: a 5 s look had
    added up to 5 s to the lane's start; the cadence still adds up to `every` plus a send)."""
    t0, wall0 = time.monotonic(), time.time() * 1000
    probes: set[str] = set()
    while time.monotonic() - t0 < timeout:
        order = f"{PROBE}{uuid.uuid4().hex[:8]}"
        probes.add(order)
        recs = loadgen.records([
            {"id": order, "#shares": 1, "client": "probe", "stock": "P"},
            {"id": order + "-p", "initial_order_id": order, "#shares": 2, "client": "probe", "stock": "P"}])
        loadgen.send(list(recs), topic, stamp_now=True, progress_every=0, settings=kafka)
        next_probe = time.monotonic() + every
        while time.monotonic() < next_probe:
            got = [ts for ts, a in list(alerts.seen) if a.get("order_id") in probes]
            if got:
                return (min(got) - wall0) / 1000
            time.sleep(0.05)
    raise TimeoutError(f"the lane sent no alert for its probe orders within {timeout:.0f}s")


def _mix(orders: int, seed: int) -> list[loadgen.Record]:
    return list(loadgen.records(loadgen.original_mix(orders, seed)))


GC_LINE = re.compile(r"^\[(?P<time>[^\]]+)\].*?(?P<what>Pause [^(]*(?:\([^)]*\))*).*?(?P<ms>[0-9.]+)ms\s*$")


def gc_pauses(path: Path | None, t0: float, t1: float) -> dict | None:
    """The lane JVM's GC pauses between epoch seconds t0 and t1, from its ``-Xlog:gc:file=…:time`` log:
    {count, total_ms, max_ms}. None without a log."""
    from datetime import datetime

    if path is None or not path.exists():
        return None
    pauses = []
    for line in path.read_text(errors="replace").splitlines():
        m = GC_LINE.match(line)
        if not m:
            continue
        try:
            at = datetime.strptime(m.group("time"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
        except ValueError:
            continue
        if t0 <= at <= t1:
            pauses.append(float(m.group("ms")))
    return {"count": len(pauses), "total_ms": round(sum(pauses), 1), "max_ms": round(max(pauses, default=0.0), 1)}


def segment(kafka: KafkaSettings, topic: str, alerts: _Alerts, rate: int, seconds: float, seed: int,
            lane_pgid: int | None = None, fast=None, gc_log: Path | None = None, linger_ms: int | None = None) -> dict:
    """One paced run: produce `rate` events/s for `seconds` (the floor and the box sampled meanwhile), then
    wait for the lane's alerts of it (and, with `fast`, their deliveries at the fast channel's recipient)."""
    from aldebaran_capacity.bench import paced
    from aldebaran_capacity.bench.boxstate import BoxSampler
    from aldebaran_capacity.bench.floor import JvmFloor

    orders = max(1, int(rate * seconds / 5))
    recs = _mix(orders, seed)
    before = len(alerts.seen)
    # Only the core services, the lane and what this bench starts belong here: a dispatcher or an auditor
    # that something else runs shares the 2 cores, so it is counted against the box's quiet.
    box = BoxSampler(period=1.0, foreign=FOREIGN)
    box.start()
    cpu0, wall0, epoch0 = (group_cpu_seconds(lane_pgid) if lane_pgid else None), time.monotonic(), time.time()
    # The floor reads for the producer's JVM start plus the segment, plus its last records' way back.
    with JvmFloor(kafka.bootstrap_servers, topic, seconds + 6.0) as floor:
        sent = paced.send(recs, topic, rate, kafka.bootstrap_servers,
                          paced.LINGER_MS if linger_ms is None else linger_ms)
    lane_cores = (round((group_cpu_seconds(lane_pgid) - cpu0) / (time.monotonic() - wall0), 2)
                  if lane_pgid else None)
    expected = loadgen.expected(recs, sent.timestamps)
    order_ids = {r.key.decode() for r in recs}
    want = {a["alert_id"] for a in expected}
    deadline = time.monotonic() + max(30.0, seconds)
    got: list[tuple[int, dict]] = []
    while time.monotonic() < deadline:
        alerts.poll(1.0)
        got = [(ts, a) for ts, a in alerts.seen[before:] if a.get("order_id") in order_ids]
        if want <= {a["alert_id"] for _, a in got}:
            alerts.poll(2.0)  # late duplicates, if any, count against agreement
            got = [(ts, a) for ts, a in alerts.seen[before:] if a.get("order_id") in order_ids]
            break
    delivered = fast.wait_for(want, timeout=max(30.0, seconds)) if fast is not None else {}
    state = box.stop()
    latencies = [ts - int(a["trigger_event_ts"]) for ts, a in got]
    # the same alerts by their Kafka timestamp (the lane's send): what this figure was before it was read at the
    # consumer; the difference is the broker write and the fetch
    sink = [alerts.produced[a["alert_id"]] - int(a["trigger_event_ts"]) for _, a in got
            if a.get("alert_id") in alerts.produced]
    triggers = {a["alert_id"]: int(a["trigger_event_ts"]) for _, a in got}
    recipient = [at - triggers[i] for i, at in delivered.items() if i in triggers]
    floor_lags = [lag for _, lag in floor.samples]

    def key(a: dict) -> tuple:
        return tuple(str(a.get(f)) for f in reference.KEY_FIELDS)

    lane_keys = [key(a) for _, a in got]
    ref_keys = {key(a) for a in expected}
    same = ref_keys & set(lane_keys)
    union = ref_keys | set(lane_keys)
    p99, floor_p99 = _percentile(latencies, 99), _percentile(floor_lags, 99)
    t0 = min(sent.timestamps) if sent.timestamps else 0
    return {
        "rate": rate, "seconds": seconds, "events": sent.count, "achieved_rate": round(sent.rate),
        "alerts": len(got), "expected_alerts": len(expected),
        "missing": len(ref_keys - set(lane_keys)), "extra": len(set(lane_keys) - ref_keys),
        "duplicates": len(lane_keys) - len(set(lane_keys)),
        "agreement": round(len(same) / len(union), 6) if union else 1.0,
        "p50_ms": _percentile(latencies, 50), "p95_ms": _percentile(latencies, 95),
        "p99_ms": p99, "max_ms": max(latencies) if latencies else None,
        "sink_p50_ms": _percentile(sink, 50), "sink_p99_ms": _percentile(sink, 99),
        # The floor: the same trades through Kafka to a plain Java consumer, same run (no Spark).
        "floor_read": len(floor_lags), "floor_p50_ms": _round(_percentile(floor_lags, 50)),
        "floor_p99_ms": _round(floor_p99),
        "p99_to_floor": round(p99 / floor_p99, 2) if p99 is not None and floor_p99 else None,
        # Trade → the fast channel's recipient (None: no fast channel in this run).
        "fast_delivered": len(recipient) if fast is not None else None,
        "fast_delivery_p50_ms": _round(_percentile(recipient, 50)) if fast is not None else None,
        "fast_delivery_p99_ms": _round(_percentile(recipient, 99)) if fast is not None else None,
        # The rate the recipient received them at, first to last receipt (bounded by the alerts the rate makes).
        "fast_deliveries_eps": receive_rate(list(delivered.values())) if fast is not None else None,
        # CPU the lane's processes used while the segment was produced, in cores (this box has 2).
        "lane_cores": lane_cores,
        "other_cores": state.get("other_cores_mean"), "quiet": state.get("quiet"), "box": state,
        # The lane JVM's GC pauses over the segment (production, then the wait for its alerts).
        "gc": gc_pauses(gc_log, epoch0, time.time()),
        "series": {"lane": series([(triggers[a["alert_id"]], ts - triggers[a["alert_id"]]) for ts, a in got], t0),
                   "floor": series(floor.samples, t0)},
    }


def receive_rate(times_ms: list[float]) -> float | None:
    """Receipts per second from the first receipt to the last (None: fewer than two, or all at once)."""
    if len(times_ms) < 2 or max(times_ms) == min(times_ms):
        return None
    return round((len(times_ms) - 1) / ((max(times_ms) - min(times_ms)) / 1000.0), 1)


@contextlib.contextmanager
def running_lane(lane: Lane, kafka: KafkaSettings, alerts_topic: str, trades: str, log_path: Path,
                 start_timeout: float = 180.0):
    """Start the lane (its own process group), wait for its first probe alert; yields (process, alerts reader,
    seconds to the first alert); stops the lane after."""
    alerts = _Alerts(kafka, alerts_topic)
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(lane.argv(), env=lane.env(), stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        started = _probe(kafka, trades, alerts, start_timeout)
        log.info("low-latency: lane up after %.0fs (log %s)", started, log_path)
        yield proc, alerts, started
    finally:
        alerts.close()
        stop_lane(proc)


def measure(lane: Lane, kafka: KafkaSettings, trades: str, alerts_topic: str, rates, seconds: float,
            warmup_seconds: float, log_path: Path, seed: int = 1_000, fast=None, fast_rates=FAST_RATES,
            linger_ms: int | None = None, repeats: int = 1) -> dict:
    """One lane start: idle CPU, the warm-up (reported apart), then `repeats` runs, each measuring every rate in
    turn (interleaved, so the box's drift falls on every rate alike); each rate's runs become one row of
    ``segments`` (aldebaran_capacity.bench.lane_runs.combine: medians, the p99s' spread, ``per_run``). The lane's
    JVM logs its GC pauses next to its log (``<log>.gc``), which each segment sums. Waits (up to 2 min) for a quiet
    box first.

    With `fast` (a callable returning a context manager that starts a fast channel's dispatcher and recipient,
    bench/fast_delivery.py), each run measures the rates in `fast_rates` once more with it, after the lane's own
    segments: the lane's figures are taken with only the core services beside it (the targets' condition), and
    each gets its rate's trade → recipient figures and the lane's latency while the fast dispatcher shared the
    box (``with_fast``)."""
    from aldebaran.runtime import spark as sparkmod
    from aldebaran_capacity.bench import lane_runs
    from aldebaran_capacity.bench.boxstate import wait_for_quiet

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    before = wait_for_quiet(FOREIGN, log=log)

    gc_log = log_path.with_suffix(".gc.log")
    options = lane.conf.get(JVM_OPTS, sparkmod.JVM_OPTIONS)
    lane = dataclasses.replace(lane, conf={**lane.conf, JVM_OPTS: f"{options} -Xlog:gc:file={gc_log}:time"})
    with running_lane(lane, kafka, alerts_topic, trades, log_path) as (proc, alerts, started):
        cpu0 = group_cpu_seconds(proc.pid)
        time.sleep(5.0)
        idle_cores = round((group_cpu_seconds(proc.pid) - cpu0) / 5.0, 2)
        warmup = None
        if warmup_seconds > 0:
            warm_rate = min(max(rates), WARMUP_MAX_RATE)
            warmup = segment(kafka, trades, alerts, warm_rate, warmup_seconds, seed=seed - 1, lane_pgid=proc.pid,
                             gc_log=gc_log, linger_ms=linger_ms)
            log.info("low-latency: warm-up at %d/s: p50 %s / p99 %s ms (left out)", warm_rate, warmup["p50_ms"],
                     warmup["p99_ms"])
        own: dict[int, list[dict]] = {rate: [] for rate in rates}
        with_fast: dict[int, list[dict]] = {rate: [] for rate in rates if rate in fast_rates}
        for run_no in range(repeats):
            note = f"run {run_no + 1}/{repeats}" if repeats > 1 else ""
            for i, rate in enumerate(rates):
                seg = segment(kafka, trades, alerts, rate, seconds, seed=seed + 10 * run_no + i, lane_pgid=proc.pid,
                              gc_log=gc_log, linger_ms=linger_ms)
                _log_segment(seg, note)
                own[rate].append(seg)
            if fast is None or not with_fast:
                continue
            with fast() as recipient:
                for i, rate in enumerate(with_fast):
                    got = segment(kafka, trades, alerts, rate, seconds, seed=seed + 100 + 10 * run_no + i,
                                  lane_pgid=proc.pid, fast=recipient, gc_log=gc_log, linger_ms=linger_ms)
                    _log_segment(got, ", ".join(filter(None, [note, "with the fast dispatcher"])))
                    with_fast[rate].append(got)
        seen = list(alerts.seen)
    segments = [lane_runs.combine(rate, own[rate], with_fast.get(rate) if fast is not None else None)
                for rate in rates]
    return {"box_before": before, "started_seconds": round(started, 1), "idle_cores": idle_cores, "warmup": warmup,
            "segments": segments, "seen": seen, "runs": repeats}


def _log_segment(seg: dict, note: str = "") -> None:
    fast = (f", trade → fast recipient p50 {seg['fast_delivery_p50_ms']} / p99 {seg['fast_delivery_p99_ms']} ms"
            if seg.get("fast_delivered") is not None else "")
    log.info("low-latency: %d/s%s: p50 %s / p99 %s ms, floor p99 %s ms%s, other cores %s%s", seg["rate"],
             f" ({note})" if note else "", seg["p50_ms"], seg["p99_ms"], seg["floor_p99_ms"], fast,
             seg["other_cores"], "" if seg["quiet"] else " (NOT QUIET)")


def exact_agreement(kafka: KafkaSettings, trades: str, lane_alerts: list[tuple[int, dict]], tag: str) -> dict:
    """The exact lane over the same trades (available-now), reconciled with the fast lane's alerts."""
    from aldebaran.runtime import spark as sparkmod
    from aldebaran.audit.sparkjob import job
    from aldebaran.kafka import io as kio
    from aldebaran.kafka.admin import delete_topics, ensure_topics
    from aldebaran.lanes.judge import Reconciliation

    exact_kafka = load(KafkaSettings, trades_topic=trades, alerts_topic=f"rtm-bench-exact-{tag}",
                       dlq_topic=f"rtm-bench-dlq-{tag}")
    ensure_topics(exact_kafka, [exact_kafka.alerts_topic, exact_kafka.dlq_topic])
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="rtm-exact-") as ck:
            settings = harness.auditor_settings(f"rtm_exact_{tag}", str(Path(ck) / "auditor"), lease_seconds=0)
            spark = sparkmod.session("aldebaran-bench-exact-lane", master=settings.master,
                                     shuffle_partitions=settings.shards)
            job.run(settings, spark=spark, kafka=exact_kafka)
        exact = [(m.timestamp()[1], json.loads(m.value()))
                 for m in kio.read_topic(exact_kafka, exact_kafka.alerts_topic, timeout=120)]
    finally:
        delete_topics(exact_kafka, [exact_kafka.alerts_topic, exact_kafka.dlq_topic])
    # The start-up probes are not part of the comparison: the lane reads from the latest offsets, so it never
    # saw the probes sent before its query ran, while the exact lane reads the topic from its start.
    def measured(alerts):
        return [(ts, a) for ts, a in alerts if not str(a.get("order_id", "")).startswith(PROBE)]

    ttl = 10 ** 12  # the exact lane ran afterwards: any delay confirms
    rec = Reconciliation(ttl_ms=ttl)
    for ts, a in measured(lane_alerts):
        rec.fast(a["alert_id"], ts)
    exact = measured(exact)
    for ts, a in exact:
        rec.exact(a["alert_id"], str(a.get("kind")), ts)
    end = max([ts for ts, _ in exact] + [ts for ts, _ in lane_alerts] + [0]) + ttl
    rec.caught_up(fast_at=end, exact_at=end)  # both topics were read to their end
    rec.judge()
    counts = vars(rec.counts)
    return {"confirmed": counts["confirmed"], "unconfirmed": counts["unconfirmed"], "missed": counts["missed"],
            "fast_alerts": counts["fast"], "exact_alerts": len(exact), "exact_overfills": counts["exact"],
            "repeats": counts["repeats"], "exact_seconds": round(time.monotonic() - t0, 1)}


def run(rates=DEFAULT_RATES, seconds: float = 20.0, micro_batch: bool = False,
        checkpoint_interval: str = "5 minutes", runtime: str | None = "4.3", conf: dict[str, str] | None = None,
        exact: bool = True, warmup_seconds: float = WARMUP_SECONDS, fast_webhook: bool = False,
        fast_webhook_batch: int = 100, repeats: int = 1) -> dict:
    """Start the lane on fresh topics, run each segment, stop the lane. Returns ``{"low_latency": ...}``."""
    from aldebaran.kafka.admin import delete_topics, ensure_topics

    kafka = load(KafkaSettings)
    tag = uuid.uuid4().hex[:8]
    trades, alerts_topic = f"rtm-bench-trades-{tag}", f"rtm-bench-alerts-{tag}"
    ensure_topics(kafka, [trades, alerts_topic])
    out_dir = paths.run_dir() / "bench" / "low-latency"
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / f"lane-{tag}.log"
    try:
        with tempfile.TemporaryDirectory(prefix="rtm-bench-") as ck:
            lane = Lane(checkpoint=str(Path(ck) / "lane"), trades_topic=trades, alerts_topic=alerts_topic,
                        checkpoint_interval=checkpoint_interval, micro_batch=micro_batch, runtime=runtime,
                        conf=dict(conf or {}))
            fast = None
            if fast_webhook:
                from itertools import count

                from aldebaran_capacity.bench.fast_delivery import FastWebhook

                entered = count(1)
                # a fresh receiver and dispatcher per run (its own log), on this run's lane topic
                fast = lambda: FastWebhook(kafka, alerts_topic, out_dir / f"fast-{tag}-{next(entered)}.log",  # noqa: E731
                                           batch=fast_webhook_batch)
            got = measure(lane, kafka, trades, alerts_topic, rates, seconds, warmup_seconds, log_path, fast=fast,
                          repeats=repeats)
        # After the lane stopped: the exact lane gets the machine to itself, as the lane had.
        seen = got.pop("seen")
        agreement = exact_agreement(kafka, trades, seen, tag) if exact else None
    finally:
        delete_topics(kafka, [trades, alerts_topic])
    segments = got["segments"]
    reference_agreement = min((s["agreement"] for s in segments), default=None)
    return {"low_latency": {
        "mode": "micro-batch (processingTime 0)" if micro_batch else f"real-time (checkpoint every {checkpoint_interval})",
        "runtime": "pyspark 4.3.0 (setup/runtimes/spark-4.3.txt)" if runtime else "pyspark 4.2.0 (the control venv)",
        "master": lane.master, "conf": lane.conf, **got, "agreement": agreement,
        "reference_agreement": reference_agreement,
        "quiet": all(s["quiet"] for s in segments),
        "correct": all(s["missing"] == 0 and s["extra"] == 0 for s in segments)
                   and (agreement is None or (agreement["unconfirmed"] == 0 and agreement["missed"] == 0)),
        "lane_log": str(log_path),
    }}


def main(args) -> int:
    from aldebaran_capacity.bench import lane_report, machine

    rates = [int(r) for r in args.rates.split(",") if r] if args.rates else list(DEFAULT_RATES)
    runtime = None if args.runtime == "control" else args.runtime
    command = (f"aldebaran bench low-latency --rates {','.join(map(str, rates))} --seconds {args.seconds:g}"
               f" --repeats {args.repeats}"
               f" --warmup-seconds {args.warmup_seconds:g} --checkpoint-interval '{args.checkpoint_interval}'"
               f" --runtime {args.runtime}" + (" --no-exact" if args.no_exact else "")
               + (f" --fast-webhook --fast-webhook-batch {args.fast_webhook_batch}" if args.fast_webhook else "")
               + (" --micro-batch" if args.micro_batch else "") + "".join(f" --conf {c}" for c in args.conf or []))
    conf = dict(c.split("=", 1) for c in args.conf or [])
    result = {"machine": machine.describe(), "command": command}
    result.update(run(rates, args.seconds, micro_batch=args.micro_batch, checkpoint_interval=args.checkpoint_interval,
                      runtime=runtime, conf=conf, exact=not args.no_exact, warmup_seconds=args.warmup_seconds,
                      fast_webhook=args.fast_webhook, fast_webhook_batch=args.fast_webhook_batch,
                      repeats=args.repeats))
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps(lane_report.summary(result), indent=2))
    if args.report:
        lane_report.write_report(result, paths.ROOT / "docs")
    if not result["low_latency"]["quiet"]:
        log.warning("low-latency: the box was NOT quiet during some segment (other processes > 0.2 core): "
                    "those figures measure the queue, not the lane")
    return 0 if result["low_latency"]["correct"] else 1
