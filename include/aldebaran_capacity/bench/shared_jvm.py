"""Should the two lanes share one Spark application (one JVM), or stay apart? Both shapes, measured in one run.

    aldebaran bench shared-jvm [--rates 1000] [--seconds 30] [--rest-seconds 60] [--repeats 3] [--report]

- **apart** (what ships): the exact auditor (spark_apps/auditor.py, the control venv's Spark 4.2, local[2]) and
  the low-latency lane (spark_apps/realtime_lane.py, the Spark 4.3 runtime, local[4]) as two applications;
- **shared**: one application on the Spark 4.3 runtime running both queries on one session, local[6]
  (aldebaran_capacity.bench.shared_app).

Each run starts the shape on private topics (its trades, alerts and fast topics; checkpoints in a temporary
directory), waits until a probe order's alert comes back on both topics (``start_s``), warms both lanes up with
20 s of the first rate (not reported) and lets them settle, samples their CPU at rest (``rest_cores``: the processes of the shape's process groups, nothing else) and
their memory (``rss_mb``), then paces the original publisher's mix at each rate for ``seconds`` and reads both
topics with a consumer (trade → received p50/p99 per lane, ``load_cores``). Shapes alternate run by run
(apart, shared, shared, apart, ...). Run it with nothing else on the box but the core services (Kafka, MinIO):
the platform's own auditor and lane would share the cores. Results under ``lanes_jvm`` in
docs/img/bench-results.json.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.settings import KafkaSettings
from aldebaran_capacity import loadgen
from aldebaran_capacity.bench.low_latency import PROBE, _Alerts, _mix, _percentile, group_cpu_seconds

log = logging.getLogger(__name__)

BEGIN, END = "<!-- shared-jvm:begin -->", "<!-- shared-jvm:end -->"
SHAPES = ("apart", "shared")
DEFAULT_RATES = (1_000,)
SETTLE_S = 20.0  # after the warm-up: its tail is not the resting cost
WARMUP_S = 20.0  # load before anything is measured: a fresh JVM's first minute is the JIT's
START_TIMEOUT_S = 300.0
SHARED_APP = Path(__file__).resolve().with_name("shared_app.py")
AUDITOR_APP = paths.ROOT / "spark_apps" / "auditor.py"
TOPIC_ENV = {"trades_topic": "ALDEBARAN_KAFKA_TRADES_TOPIC", "alerts_topic": "ALDEBARAN_KAFKA_ALERTS_TOPIC",
             "fast_alerts_topic": "ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC", "dlq_topic": "ALDEBARAN_KAFKA_DLQ_TOPIC",
             "alerts_dlq_topic": "ALDEBARAN_KAFKA_ALERTS_DLQ_TOPIC"}


def auditor_args(checkpoint: str, query: str) -> list[str]:
    # The deployed auditor's trigger (processing time, back to back) and rule; books for a day, so nothing
    # expires inside a run; the archive under the bench's own prefix.
    return ["--checkpoint", checkpoint, "--rules", "overfill", "--ttl-seconds", "86400", "--query-name", query,
            "--archive-prefix", f"bench/shared-jvm/{query}/archive"]


# What the auditor's driver and Python workers import beyond the Spark 4.3 runtime's own packages (pyspark,
# pydantic): the shared shape's Python is the runtime plus these, from the setup's wheelhouse.
AUDITOR_WHEELS = ("boto3", "botocore", "s3transfer", "jmespath", "python_dateutil", "six", "urllib3",
                  "confluent_kafka", "prometheus_client", "pandas", "numpy", "pytz", "tzdata", "pyarrow",
                  "tenacity", "rich_argparse", "rich", "markdown_it_py", "mdurl", "pygments")


def shared_python() -> str:
    """A Python for the shared shape: a venv of its own whose site-packages hold the auditor's dependencies and
    a .pth onto the Spark 4.3 runtime's (built once per runtime under the cache, offline from the wheelhouse).
    The shipped runtime holds only what the lane needs; a shared application would need this in production."""
    import glob
    import venv

    from aldebaran.lanes.launch import RUNTIME

    runtime = paths.spark_runtime(RUNTIME)
    home = paths.cache_dir() / "bench-shared" / runtime.name
    python = home / "bin" / "python"
    if (home / ".done").exists():
        return str(python)
    venv.create(home, with_pip=True, clear=True)
    site = next(Path(p) for p in glob.glob(str(home / "lib" / "python3*" / "site-packages")))
    runtime_site = next(Path(p) for p in glob.glob(str(runtime / "lib" / "python3*" / "site-packages")))
    (site / "spark-runtime.pth").write_text(f"{runtime_site}\n")
    wheels = sorted({w for d in glob.glob(str(paths.cache_dir() / "wheels" / "*")) for name in AUDITOR_WHEELS
                     for w in glob.glob(f"{d}/{name}-*.whl")})
    log.info("shared-jvm: building the shared shape's Python (%d wheels) under %s", len(wheels), home)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", *wheels], check=True)
    (home / ".done").write_text("")
    return str(python)


def commands(shape: str, work: Path, query: str, kafka: KafkaSettings) -> list[tuple[list[str], dict[str, str]]]:
    """The spark-submit command line(s) of a shape with their environments (each started as a process group of
    its own). Topics come from the environment for the auditor, from the lane's flags for the lane."""
    from aldebaran.runtime import spark as sparkmod
    from aldebaran.lanes.launch import RUNTIME, STREAMING_CONF, Lane

    topics = {var: getattr(kafka, field) for field, var in TOPIC_ENV.items()}
    lane_checkpoint, auditor_checkpoint = str(work / "lane"), str(work / "auditor")
    audit = auditor_args(auditor_checkpoint, query)
    if shape == "apart":
        lane = Lane(checkpoint=lane_checkpoint, trades_topic=kafka.trades_topic, alerts_topic=kafka.fast_alerts_topic)
        auditor = [sparkmod.spark_submit(None), "--master", "local[2]", "--driver-memory", "1g",
                   "--jars", ",".join(sparkmod.connector_jars())]
        for key, value in sparkmod.submit_conf().items():
            auditor += ["--conf", f"{key}={value}"]
        return [(auditor + [str(AUDITOR_APP), *audit], {**sparkmod.spark_env(None), **topics}),
                (lane.argv(), {**lane.env(), **topics})]
    shared = [sparkmod.spark_submit(RUNTIME), "--master", "local[6]", "--driver-memory", "2g",
              "--jars", ",".join(sparkmod.connector_jars())]
    for key, value in sparkmod.submit_conf(STREAMING_CONF).items():
        shared += ["--conf", f"{key}={value}"]
    python = shared_python()
    return [(shared + [str(SHARED_APP), "--lane-checkpoint", lane_checkpoint, *audit],
             {**sparkmod.spark_env(RUNTIME), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, **topics})]


def group_rss_mb(pgids: list[int]) -> float:
    import psutil

    total = 0
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) in pgids:
                total += p.memory_info().rss
        except (psutil.Error, ProcessLookupError):
            continue
    return round(total / 2**20, 1)


def _probe_both(kafka: KafkaSettings, exact: _Alerts, fast: _Alerts, procs, timeout: float) -> float:
    """A probe order every few seconds until its alert arrives on both topics. Returns seconds waited."""
    t0 = time.monotonic()
    probes: set[str] = set()
    while time.monotonic() - t0 < timeout:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"bench shared-jvm: a process exited (rc {proc.returncode}) before both lanes "
                                   "answered: see its log")
        order = f"{PROBE}{uuid.uuid4().hex[:8]}"
        probes.add(order)
        loadgen.send(list(loadgen.records([
            {"id": order, "#shares": 1, "client": "probe", "stock": "P"},
            {"id": order + "-p", "initial_order_id": order, "#shares": 2, "client": "probe", "stock": "P"}])),
            kafka.trades_topic, stamp_now=True, progress_every=0, settings=kafka)
        time.sleep(5.0)
        if all(any(a.get("order_id") in probes for _, a in r.seen) for r in (exact, fast)):
            return time.monotonic() - t0
    raise TimeoutError(f"bench shared-jvm: no probe alert on both topics within {timeout:.0f} s")


def load_segment(kafka: KafkaSettings, exact: _Alerts, fast: _Alerts, pgids: list[int], rate: int,
                 seconds: float, seed: int) -> dict:
    """The publisher's mix paced at `rate`; both topics read until every expected alert is in (or 60 s)."""
    from aldebaran_capacity.bench import paced

    recs = _mix(max(1, int(rate * seconds / 5)), seed)
    order_ids = {r.key.decode() for r in recs}
    marks = len(exact.seen), len(fast.seen)
    cpu0, wall0 = sum(group_cpu_seconds(g) for g in pgids), time.monotonic()
    sent = paced.send(recs, kafka.trades_topic, rate, kafka.bootstrap_servers, paced.LINGER_MS)
    cores = round((sum(group_cpu_seconds(g) for g in pgids) - cpu0) / (time.monotonic() - wall0), 3)
    want = {a["alert_id"] for a in loadgen.expected(recs, sent.timestamps)}

    def got(reader: _Alerts, mark: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for received, a in reader.seen[mark:]:
            if a.get("order_id") in order_ids:
                out.setdefault(a["alert_id"], received - int(a["trigger_event_ts"]))
        return out

    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and not (want <= set(got(exact, marks[0])) and want <= set(got(fast, marks[1]))):
        time.sleep(1.0)
    out = {"rate": rate, "events": sent.count, "expected": len(want), "load_cores": cores}
    for name, reader, mark in (("exact", exact, marks[0]), ("fast", fast, marks[1])):
        lat = [v for k, v in got(reader, mark).items() if k in want]
        out[name] = {"received": len(lat), "p50_ms": _percentile(lat, 50), "p99_ms": _percentile(lat, 99)}
    return out


def one_run(shape: str, rates, seconds: float, rest_s: float, seed: int) -> dict:
    """Start `shape` on fresh private topics, measure its start, rest and load, stop it, drop the topics."""
    from aldebaran.kafka import admin as kadmin
    from aldebaran.settings import load
    from aldebaran_capacity.bench.boxstate import BoxSampler

    tag = f"bench-shared-{uuid.uuid4().hex[:8]}"
    base = load(KafkaSettings)
    kafka = base.model_copy(update={"trades_topic": f"{tag}-trades", "alerts_topic": f"{tag}-alerts",
                                    "fast_alerts_topic": f"{tag}-fast", "dlq_topic": f"{tag}-dlq",
                                    "alerts_dlq_topic": f"{tag}-alerts-dlq"})
    topics = [kafka.trades_topic, kafka.alerts_topic, kafka.fast_alerts_topic, kafka.dlq_topic]
    kadmin.ensure_topics(kafka, topics)
    work = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=paths.run_dir()))
    logs = paths.run_dir() / "bench" / "shared-jvm"
    logs.mkdir(parents=True, exist_ok=True)
    exact, fast = _Alerts(kafka, kafka.alerts_topic), _Alerts(kafka, kafka.fast_alerts_topic)
    procs: list[subprocess.Popen] = []
    try:
        for i, (argv, env) in enumerate(commands(shape, work, tag.replace("-", "_"), kafka)):
            with open(logs / f"{tag}-{shape}-{i}.log", "wb") as out:
                procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        pgids = [p.pid for p in procs]
        started = _probe_both(kafka, exact, fast, procs, START_TIMEOUT_S)
        log.info("shared-jvm: %s up in %.0f s; warm-up at %d events/s for %.0f s (not reported), then %.0f s settle",
                 shape, started, rates[0], WARMUP_S, SETTLE_S)
        load_segment(kafka, exact, fast, pgids, rates[0], WARMUP_S, seed + 100)
        time.sleep(SETTLE_S)
        # The box beside the shape: its processes are this bench's children (not "other"), the core services
        # are known roles; anything else over 0.2 core flags the run (BRIEF §4).
        box = BoxSampler(period=1.0)
        box.start()
        cpu0, wall0 = sum(group_cpu_seconds(g) for g in pgids), time.monotonic()
        time.sleep(rest_s)
        rest = round((sum(group_cpu_seconds(g) for g in pgids) - cpu0) / (time.monotonic() - wall0), 3)
        result = {"shape": shape, "start_s": round(started, 1), "rest_cores": rest, "rss_mb": group_rss_mb(pgids),
                  "segments": [load_segment(kafka, exact, fast, pgids, rate, seconds, seed + i)
                               for i, rate in enumerate(rates)]}
        state = box.stop()
        result.update(other_cores=state.get("other_cores_mean"), quiet=state.get("quiet"),
                      load1_mean=state.get("load1_mean"))
        log.info("shared-jvm: %s", json.dumps(result))
        return result
    finally:
        exact.close()
        fast.close()
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        kadmin.delete_topics(kafka, topics)
        shutil.rmtree(work, ignore_errors=True)


def _spread(values) -> list | None:
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None


def _median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def summarise(runs: list[dict], rates) -> dict:
    """Medians and spreads per shape (pure)."""
    out: dict = {}
    for shape in SHAPES:
        mine = [r for r in runs if r["shape"] == shape]
        if not mine:
            continue
        entry = {"runs": len(mine), "start_s": _median(r["start_s"] for r in mine),
                 "rest_cores": _median(r["rest_cores"] for r in mine),
                 "rest_cores_spread": _spread(r["rest_cores"] for r in mine),
                 "rss_mb": _median(r["rss_mb"] for r in mine),
                 "other_cores_max": max((r.get("other_cores") or 0.0 for r in mine), default=None),
                 "quiet": all(r.get("quiet") is not False for r in mine), "segments": []}
        for rate in rates:
            segs = [s for r in mine for s in r["segments"] if s["rate"] == rate]
            entry["segments"].append({
                "rate": rate, "load_cores": _median(s["load_cores"] for s in segs),
                **{f"{lane}_{k}": _median(s[lane][k] for s in segs) for lane in ("exact", "fast")
                   for k in ("p50_ms", "p99_ms")},
                **{f"{lane}_p99_spread_ms": _spread(s[lane]["p99_ms"] for s in segs) for lane in ("exact", "fast")},
                "missing": sum(s["expected"] - min(s["exact"]["received"], s["fast"]["received"]) for s in segs)})
        out[shape] = entry
    return out


def run(rates=DEFAULT_RATES, seconds: float = 30.0, rest_s: float = 60.0, repeats: int = 3) -> dict:
    order = [shape for i in range(repeats) for shape in (SHAPES if i % 2 == 0 else SHAPES[::-1])]
    runs = []
    for n, shape in enumerate(order):
        log.info("shared-jvm: run %d/%d: %s", n + 1, len(order), shape)
        runs.append(one_run(shape, rates, seconds, rest_s, seed=7_000 + n))
    return {"rates": list(rates), "seconds": seconds, "rest_seconds": rest_s, "order": order, "runs": runs,
            **summarise(runs, rates)}


def _range(spread) -> str:
    def one(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}"

    return f"{one(spread[0])}–{one(spread[1])}" if spread else "–"


def render(result: dict) -> str:
    r = result["lanes_jvm"]
    lines = [BEGIN, "## Both lanes in one JVM, or apart", "",
             f"`{result['command']}`, {result['machine'].get('date', '')}, {result['machine'].get('cores', '?')} "
             f"cores, runs in the order {', '.join(r['order'])}. "
             "**apart** (shipped): the exact auditor (Spark 4.2, local[2]) and the lane (Spark 4.3 real-time "
             "mode, local[4]) as two applications; **shared**: one Spark 4.3 application running both queries "
             "on one session, local[6]. CPU and memory are the shape's processes only (the JVMs, their Python "
             "drivers and workers); latency is trade → received by a consumer of each topic. Medians of the "
             "runs, p99 spread in brackets; `other` is the most any run's other processes took (quiet ≤ 0.2).", "",
             "| shape | start s | rest cores (spread) | RSS MB | rate | load cores | exact p50 / p99 ms (spread) "
             "| fast p50 / p99 ms (spread) | other |", "|---|---:|---|---:|---:|---:|---|---|---:|"]
    for shape in SHAPES:
        e = r.get(shape)
        if not e:
            continue
        for s in e["segments"]:
            lines.append(f"| {shape} | {e['start_s']:g} | {e['rest_cores']:g} ({_range(e['rest_cores_spread'])}) "
                         f"| {e['rss_mb']:,.0f} | {s['rate']:,} | {s['load_cores']:g} | {s['exact_p50_ms']:,.0f} / "
                         f"{s['exact_p99_ms']:,.0f} ({_range(s['exact_p99_spread_ms'])}) | {s['fast_p50_ms']:,.0f} / "
                         f"{s['fast_p99_ms']:,.0f} ({_range(s['fast_p99_spread_ms'])}) | {e['other_cores_max']:g} |")
    return "\n".join(lines + ["", END])


def rerender() -> str:
    """The section again from docs/img/bench-results.json's ``lanes_jvm`` (after a change to :func:`render`)."""
    data = json.loads((paths.ROOT / "docs" / "img" / "bench-results.json").read_text())["lanes_jvm"]
    result = {"machine": data["machine"], "command": data["command"], "lanes_jvm": data}
    return render(result)


def main(args) -> int:
    from aldebaran_capacity.bench import machine, sections

    rates = tuple(int(x) for x in args.rates.split(",")) if args.rates else DEFAULT_RATES
    result = {"machine": machine.describe(), "command": "aldebaran bench shared-jvm " + " ".join(sys.argv[3:]),
              "lanes_jvm": run(rates, seconds=args.seconds or 30.0, rest_s=args.rest_seconds, repeats=args.repeats)}
    print(render(result))
    if args.report:
        sections.write_report(paths.ROOT / "docs", "lanes_jvm", result, render(result), BEGIN, END)
    return 0
