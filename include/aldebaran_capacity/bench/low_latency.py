"""`aldebaran bench low-latency`: trade→alert latency of the real-time-mode lane (issue 19), and its agreement
with the reference model, at paced rates.

    aldebaran bench low-latency [--rates 1000,10000,50000] [--seconds 20] [--micro-batch] [--runtime 4.3|control]
                                [--producer jvm|python] [--no-exact] [--checkpoint-interval '5 minutes']
                                [--conf K=V ...] [--out FILE] [--report]

``--report`` writes its section of docs/benchmarks.md (between its markers) and its ``low_latency`` key into
docs/img/bench-results.json (``segments[]`` {rate, p50_ms, p95_ms, p99_ms, …}, ``agreement``), keeping the rest.

The lane runs as it does in production: spark-submit of the Spark 4.3 runtime (aldebaran.lanes.launch),
reading a fresh trades topic and writing a fresh alerts topic on the shared Kafka. Each segment produces,
from a process of its own, the original publisher's mix (one request, four purchases per order;
loadgen.original_mix) paced at its rate, each trade stamped with the wall clock as it is sent (its Kafka
timestamp, which the lane's parse takes as the event time, as no ``ts`` is sent). The producer is the Java
client (``--producer jvm``, :mod:`aldebaran_capacity.bench.paced`, the default) or confluent-kafka from
Python (``--producer python``, the earlier runs' harness, whose own tail dominated them). An alert's latency is its own Kafka timestamp
(the lane's producer stamps it on send) minus its ``trigger_event_ts``: the produce time of the trade that
put the order over. Both clocks are this machine's.

Agreement, two ways. Per segment, the lane's alerts against the reference model's for the same trades and
stamps, on :data:`aldebaran.reference.KEY_FIELDS` (``segments[].agreement`` = |same| / |union|, with the
missing and extra counts). And against the exact lane itself: after the segments the micro-batch auditor
runs over the same trades topic (available-now, the control venv's Spark), and the two lanes' alerts go
through the reconciliation (:class:`aldebaran.lanes.reconcile.Reconciliation`, TTL unbounded as the exact
lane runs afterwards): ``agreement`` = {confirmed, unconfirmed, missed, …} (``--no-exact`` skips it).
"""

from __future__ import annotations

import json
import logging
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from aldebaran import paths, reference
from aldebaran.lanes.launch import stop as stop_lane
from aldebaran.settings import KafkaSettings, load
from aldebaran_capacity import loadgen
from aldebaran_capacity.bench import harness

log = logging.getLogger(__name__)

DEFAULT_RATES = (1_000, 10_000, 50_000)
BEGIN, END = "<!-- low-latency:begin -->", "<!-- low-latency:end -->"
PROBE = "rtm-probe-"  # order ids of the start-up probes


def _percentile(values: list[float], q: float) -> float | None:
    """harness.percentile, None (JSON null) rather than NaN for an empty segment."""
    return harness.percentile(values, q) if values else None


class _Alerts:
    """A consumer of the lane's alerts topic from its start; keeps every alert with its Kafka timestamp."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        from aldebaran.kafka_io import consumer

        self._c = consumer(kafka, f"rtm-bench-{uuid.uuid4().hex[:8]}", **{"auto.offset.reset": "earliest"})
        self._c.subscribe([topic])
        self.seen: list[tuple[int, dict]] = []

    def poll(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for m in self._c.consume(10_000, 0.2):
                if m.error() is None:
                    self.seen.append((m.timestamp()[1], json.loads(m.value())))

    def close(self) -> None:
        self._c.close()


class _BusFloor(threading.Thread):
    """The segment's trades read back by a plain consumer as they are produced: trade → consumer with no
    Spark in between, on the same machine under the same load — the floor the lane's figures sit on."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        from confluent_kafka import OFFSET_END, TopicPartition

        from aldebaran.kafka_io import consumer

        super().__init__(daemon=True)
        self._c = consumer(kafka, f"rtm-floor-{uuid.uuid4().hex[:8]}")
        parts = self._c.list_topics(topic, timeout=10).topics[topic].partitions
        self._c.assign([TopicPartition(topic, p, OFFSET_END) for p in parts])
        self._done = threading.Event()
        self.lags: list[float] = []

    def run(self) -> None:
        # poll(), not consume(n, timeout): consume waits out its timeout to fill a batch, which would add up
        # to that timeout to every figure.
        while not self._done.is_set():
            m = self._c.poll(0.05)
            if m is not None and m.error() is None:
                self.lags.append(time.time() * 1000 - m.timestamp()[1])

    def stop(self) -> list[float]:
        self._done.set()
        self.join(10)
        self._c.close()
        return self.lags


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


def _probe(kafka: KafkaSettings, topic: str, alerts: _Alerts, timeout: float) -> float:
    """Send an overfilled order every few seconds until one's alert comes back: the lane is up (it starts at
    the topic's latest offsets, so probes sent before its query runs are never read). Returns seconds waited."""
    t0 = time.monotonic()
    probes: set[str] = set()
    while time.monotonic() - t0 < timeout:
        order = f"{PROBE}{uuid.uuid4().hex[:8]}"
        probes.add(order)
        recs = loadgen.records([
            {"id": order, "#shares": 1, "client": "probe", "stock": "P"},
            {"id": order + "-p", "initial_order_id": order, "#shares": 2, "client": "probe", "stock": "P"}])
        loadgen.send(list(recs), topic, stamp_now=True, progress_every=0, settings=kafka)
        alerts.poll(5.0)
        if any(a.get("order_id") in probes for _, a in alerts.seen):
            return time.monotonic() - t0
    raise TimeoutError(f"the lane sent no alert for its probe orders within {timeout:.0f}s")


def _mix(orders: int, seed: int) -> list[loadgen.Record]:
    return list(loadgen.records(loadgen.original_mix(orders, seed)))


def _send_mix(orders: int, seed: int, topic: str, rate: int, kafka: KafkaSettings) -> loadgen.Sent:
    """In the producer's own process: the segment's trades, generated there and paced at `rate`."""
    return loadgen.send(_mix(orders, seed), topic, rate=rate, stamp_now=True, progress_every=0, settings=kafka)


def _produce(orders: int, seed: int, topic: str, rate: int, kafka: KafkaSettings) -> loadgen.Sent:
    """Produce from a process of its own: in the bench's process the producer loop, both consumers and the
    stamps share one interpreter, and a starved producer thread adds its wait to every figure (design.md)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_send_mix, (orders, seed, topic, rate, kafka))


def segment(kafka: KafkaSettings, topic: str, alerts: _Alerts, rate: int, seconds: float, seed: int,
            producer: str = "jvm", lane_pgid: int | None = None) -> dict:
    """One paced run: produce `rate` events/s for `seconds`, then wait for the lane's alerts of it."""
    orders = max(1, int(rate * seconds / 5))
    recs = _mix(orders, seed)
    before = len(alerts.seen)
    floor = _BusFloor(kafka, topic)
    floor.start()
    time.sleep(1.0)  # the floor's consumer has fetched its end offsets before the first trade
    cpu0, wall0 = (group_cpu_seconds(lane_pgid) if lane_pgid else None), time.monotonic()
    try:
        if producer == "jvm":
            from aldebaran_capacity.bench import paced

            sent = paced.send(recs, topic, rate, kafka.bootstrap_servers)
        else:
            sent = _produce(orders, seed, topic, rate, kafka)
        time.sleep(1.0)
    finally:
        bus = floor.stop()
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
    latencies = [ts - int(a["trigger_event_ts"]) for ts, a in got]

    def key(a: dict) -> tuple:
        return tuple(str(a.get(f)) for f in reference.KEY_FIELDS)

    lane_keys = [key(a) for _, a in got]
    ref_keys = {key(a) for a in expected}
    same = ref_keys & set(lane_keys)
    union = ref_keys | set(lane_keys)
    return {
        "rate": rate, "seconds": seconds, "producer": producer, "events": sent.count,
        "achieved_rate": round(sent.rate),
        "alerts": len(got), "expected_alerts": len(expected),
        "missing": len(ref_keys - set(lane_keys)), "extra": len(set(lane_keys) - ref_keys),
        "duplicates": len(lane_keys) - len(set(lane_keys)),
        "agreement": round(len(same) / len(union), 6) if union else 1.0,
        "p50_ms": _percentile(latencies, 50), "p95_ms": _percentile(latencies, 95),
        "p99_ms": _percentile(latencies, 99), "max_ms": max(latencies) if latencies else None,
        # The floor: the same trades through Kafka to a plain consumer, same run (no Spark).
        # CPU the lane's processes used while the segment was produced, in cores (this box has 2).
        "lane_cores": lane_cores,
        "bus_read": len(bus), "bus_p50_ms": _round(_percentile(bus, 50)), "bus_p99_ms": _round(_percentile(bus, 99)),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def exact_agreement(kafka: KafkaSettings, trades: str, lane_alerts: list[tuple[int, dict]], tag: str) -> dict:
    """The exact lane over the same trades (available-now), reconciled with the fast lane's alerts."""
    from aldebaran import kafka_io
    from aldebaran import spark as sparkmod
    from aldebaran.audit.sparkjob import job
    from aldebaran.kafka_admin import delete_topics, ensure_topics
    from aldebaran.lanes.reconcile import Reconciliation

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
                 for m in kafka_io.read_topic(exact_kafka, exact_kafka.alerts_topic, timeout=120)]
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
        checkpoint_interval: str = "5 minutes", start_timeout: float = 180.0, runtime: str | None = "4.3",
        conf: dict[str, str] | None = None, producer: str = "jvm", exact: bool = True) -> dict:
    """Start the lane on fresh topics, run each segment, stop the lane. Returns ``{"low_latency": ...}``."""
    from aldebaran.kafka_admin import delete_topics, ensure_topics
    from aldebaran.lanes.launch import Lane

    kafka = load(KafkaSettings)
    tag = uuid.uuid4().hex[:8]
    trades, alerts_topic = f"rtm-bench-trades-{tag}", f"rtm-bench-alerts-{tag}"
    ensure_topics(kafka, [trades, alerts_topic])
    out_dir = paths.run_dir() / "bench" / "low-latency"
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / f"lane-{tag}.log"
    with tempfile.TemporaryDirectory(prefix="rtm-bench-") as ck:
        lane = Lane(checkpoint=str(Path(ck) / "lane"), trades_topic=trades, alerts_topic=alerts_topic,
                    checkpoint_interval=checkpoint_interval, micro_batch=micro_batch, runtime=runtime,
                    conf=dict(conf or {}))
        alerts = _Alerts(kafka, alerts_topic)
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(lane.argv(), env=lane.env(), stdout=log_file, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            started = _probe(kafka, trades, alerts, start_timeout)
            log.info("low-latency: lane up after %.0fs (log %s)", started, log_path)
            cpu0 = group_cpu_seconds(proc.pid)
            time.sleep(10.0)
            idle_cores = round((group_cpu_seconds(proc.pid) - cpu0) / 10.0, 2)
            log.info("low-latency: the idle lane uses %.2f cores", idle_cores)
            segments = []
            for i, rate in enumerate(rates):
                seg = segment(kafka, trades, alerts, rate, seconds, seed=1_000 + i, producer=producer,
                              lane_pgid=proc.pid)
                log.info("low-latency: %s", seg)
                segments.append(seg)
        finally:
            alerts.close()
            stop_lane(proc)
        try:
            # After the lane stopped: the exact lane gets the machine to itself, as the lane had.
            agreement = exact_agreement(kafka, trades, alerts.seen, tag) if exact else None
        finally:
            delete_topics(kafka, [trades, alerts_topic])
    reference_agreement = min((s["agreement"] for s in segments), default=None)
    return {"low_latency": {
        "mode": "micro-batch (processingTime 0)" if micro_batch else f"real-time (checkpoint every {checkpoint_interval})",
        "runtime": "pyspark 4.3.0 (setup/runtimes/spark-4.3.txt)" if runtime else "pyspark 4.2.0 (the control venv)",
        "master": lane.master, "conf": lane.conf,
        "idle_cores": idle_cores, "segments": segments, "agreement": agreement,
        "reference_agreement": reference_agreement,
        "correct": all(s["missing"] == 0 and s["extra"] == 0 for s in segments)
                   and (agreement is None or (agreement["unconfirmed"] == 0 and agreement["missed"] == 0)),
        "lane_log": str(log_path),
    }}


def main(args) -> int:
    from aldebaran_capacity.bench import machine

    rates = [int(r) for r in args.rates.split(",") if r] if args.rates else list(DEFAULT_RATES)
    runtime = None if args.runtime == "control" else args.runtime
    command = (f"aldebaran bench low-latency --rates {','.join(map(str, rates))} --seconds {args.seconds:g}"
               f" --checkpoint-interval '{args.checkpoint_interval}' --runtime {args.runtime}"
               f" --producer {args.producer}" + (" --no-exact" if args.no_exact else "")
               + (" --micro-batch" if args.micro_batch else "") + "".join(f" --conf {c}" for c in args.conf or []))
    conf = dict(c.split("=", 1) for c in args.conf or [])
    result = {"machine": machine.describe(), "command": command}
    result.update(run(rates, args.seconds, micro_batch=args.micro_batch, checkpoint_interval=args.checkpoint_interval,
                      runtime=runtime, conf=conf, producer=args.producer, exact=not args.no_exact))
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    if args.report:
        write_report(result, paths.ROOT / "docs")
    return 0 if result["low_latency"]["correct"] else 1


def render(result: dict) -> str:
    """The section of docs/benchmarks.md for one run."""
    ll, m = result["low_latency"], result["machine"]
    producer = (ll["segments"] or [{}])[0].get("producer", "python")
    lines = [BEGIN, "## Low-latency lane: trade → alert in real-time mode (issue 19)", "",
             f"`{result['command']}` — {m['date']}, {m['cores']} cores, load average {m['load_avg_at_start']:.1f} "
             f"at start; {ll['runtime']}, {ll['mode']}, `{ll['master']}`; trades paced by the "
             f"{'Java client (bench/paced.py)' if producer == 'jvm' else 'Python producer (confluent-kafka)'}. "
             "The lane and how it is measured: docs/design.md, \"The low-latency lane\"; "
             "`aldebaran_capacity.bench.low_latency`.", "",
             "| rate (events/s) | achieved | alerts | p50 ms | p95 ms | p99 ms | max ms | agreement (reference) "
             "| missing / extra | lane CPU (cores) | floor p50 / p99 ms (Kafka → plain consumer, same run) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for s in ll["segments"]:
        lines.append(f"| {s['rate']:,} | {s['achieved_rate']:,} | {s['alerts']:,} | {s['p50_ms']} | {s['p95_ms']} | "
                     f"{s['p99_ms']} | {s['max_ms']} | {s['agreement']:.4f} | {s['missing']} / {s['extra']} | "
                     f"{s.get('lane_cores')} | {s.get('bus_p50_ms')} / {s.get('bus_p99_ms')} |")
    agreement = ll.get("agreement")
    if isinstance(agreement, dict):
        lines += ["", f"Against the exact lane (the micro-batch auditor over the same trades afterwards, "
                      f"{agreement['exact_seconds']} s): **{agreement['confirmed']:,} confirmed, "
                      f"{agreement['unconfirmed']} unconfirmed, {agreement['missed']} missed** "
                      f"({agreement['fast_alerts']:,} fast-lane alerts, {agreement['exact_overfills']:,} exact-lane "
                      f"OVERFILLs of {agreement['exact_alerts']:,} exact-lane alerts)."]
    if ll.get("idle_cores") is not None:
        lines += ["", f"The lane idle (no trades, 10 s before the first segment): {ll['idle_cores']} cores."]
    lines += ["", END]
    return "\n".join(lines)


def write_report(result: dict, docs: Path) -> None:
    """Splice the section into docs/benchmarks.md and the ``low_latency`` key into bench-results.json."""
    from aldebaran_capacity.bench import sections

    doc = docs / "benchmarks.md"
    doc.write_text(sections.splice(doc.read_text() if doc.exists() else "# Benchmarks\n", render(result), BEGIN, END))
    raw = docs / "img" / "bench-results.json"
    data = json.loads(raw.read_text()) if raw.exists() else {}
    data["low_latency"] = {**result["low_latency"], "command": result["command"], "machine": result["machine"]}
    raw.write_text(json.dumps(data, indent=1, default=str))
    log.info("low-latency: section written to %s, results to %s", doc, raw)
