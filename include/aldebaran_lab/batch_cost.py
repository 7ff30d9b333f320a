"""``aldebaran bench batch-cost``: the exact auditor's fixed cost of a micro-batch, Spark settings A/B, on the
running demo platform (docs/design.md "The fixed cost of a batch").

A JFR profile of the deployed auditor at 1,000 events/s (2026-11-28) put 16 % of its JVM's samples in Spark's
purge of old checkpoint files (4 s3a requests a file), 9 % in generating Java source for the projections each
Kafka and mapInArrow task builds, and 4 % in writing the plan's text for the SQL listener. Each variant below
turns one of those off; this bench measures them side by side:

- ``spark-delete``: Spark's own delete (``spark.hadoop.aldebaran.checkpoint.delete=filecontext``), the old path;
- ``bulk-delete``: the platform's checkpoint manager deletes a purged file with one DELETE (the default);
- ``interpreted``: as ``bulk-delete``, plus interpreted projections (``spark.sql.codegen.factoryMode=NO_CODEGEN``)
  and the short plan text (``spark.sql.ui.explainMode=simple``);
- ``c1-only``: as ``bulk-delete``, the JIT's first tier only (``-XX:TieredStopAtLevel=1``): a fresh JVM's
  compilers took 0.2–0.45 core for minutes on this 2-core box (the 16:04 run), C2 being most of it;
- ``c1-serial``: as ``c1-only``, plus the serial collector (``-XX:+UseSerialGC``): no parallel GC threads
  competing with the tasks for two cores;
- ``per-batch-udf``: as ``bulk-delete``, but the shard tasks' function built, pickled and registered anew
  each batch and the expiry clock's rows filtered in the plan (the platform now does both once).

How: ``auditor_supervisor`` is paused and its auditor stopped; for each run, each variant in turn (the order
rotates) starts ``spark_apps/auditor.py`` on the platform's own checkpoint and topics, with the variant's
``spark-defaults.conf`` in a ``SPARK_CONF_DIR`` of its own. After a warm-up it gets paced one-alert orders
(the deployed bench's producer) at each rate; the figures are the CPU of the auditor's processes (its JVM, its
driver and Python workers, the shard hosts) per event, the box's busy cores, and trade → alert latency read by
a consumer of ``alerts``. At the end the supervisor is unpaused and triggered: the platform runs as before.
"""

from __future__ import annotations

import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

VARIANTS: dict[str, dict[str, str]] = {
    "spark-delete": {"spark.hadoop.aldebaran.checkpoint.delete": "filecontext"},
    "bulk-delete": {},
    "interpreted": {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.ui.explainMode": "simple"},
    # The driver's JVM options (local mode: the executors are its threads), merged with the platform's own.
    "c1-only": {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"},
    "c1-serial": {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
    # The shard tasks' function built, pickled and registered per batch, the ticks filtered in the plan (as
    # before the platform kept the function; aldebaran.audit.sparkjob.batch.BatchWriter._shard_tasks).
    "per-batch-udf": {"spark.aldebaran.audit.perBatchUdf": "true"},
}
# The trigger interval (ALDEBARAN_AUDIT_TRIGGER_INTERVAL): how often a batch may start. Spark starts the next
# batch at once when one took longer, so an interval only spaces out small batches.
INTERVALS: dict[str, str] = {"interval-0": "0 seconds", "interval-500ms": "500 milliseconds",
                             "interval-1s": "1 second"}
SUPERVISOR = "auditor_supervisor"
START_TIMEOUT_S = 240.0


def _tree_cpu(pids: set[int]) -> dict[tuple[int, str], float]:
    """(pid, kind) → cpu seconds for `pids`: a JVM's threads split into "jit" (the C1/C2 compiler threads,
    busy for minutes after a start), "gc" and "jvm" (the rest: Spark's own work); "python" for the rest."""
    import psutil

    from aldebaran_capacity.bench.boxstate import jvm_thread_cpu

    out: dict[tuple[int, str], float] = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            t = p.cpu_times()
            if p.name() != "java":
                out[(pid, "python")] = t.user + t.system
                continue
        except psutil.Error:
            continue
        split = jvm_thread_cpu(pid)
        out[(pid, "jit")], out[(pid, "gc")] = split.get("JIT", 0.0), split.get("GC", 0.0)
        out[(pid, "jvm")] = t.user + t.system - out[(pid, "jit")] - out[(pid, "gc")]
    return out


def _auditor_pids(root: int) -> set[int]:
    """The auditor's processes: `root` and its descendants, and the shard hosts (detached by design)."""
    import psutil

    pids = {root}
    try:
        pids |= {c.pid for c in psutil.Process(root).children(recursive=True)}
    except psutil.Error:
        pass
    for p in psutil.process_iter(["pid", "cmdline"]):
        if any("shardhost" in (a or "") for a in (p.info["cmdline"] or [])):
            pids.add(p.info["pid"])
    return pids


def _box_busy() -> float:
    with open("/proc/stat") as f:
        vals = [float(v) for v in f.readline().split()[1:]]
    return sum(vals) - vals[3] - vals[4]  # all but idle and iowait, in ticks


class Auditor:
    """One auditor process with a variant's Spark settings, on the platform's checkpoint."""

    def __init__(self, platform, variant: str, logs_dir: Path) -> None:
        self.platform, self.variant = platform, variant
        self.conf_dir = Path(tempfile.mkdtemp(prefix=f"aldebaran-batch-cost-{variant}-"))
        (self.conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{k} {v}\n" for k, v in VARIANTS.get(variant, {}).items()))
        self.args = ["--trigger-interval", INTERVALS[variant]] if variant in INTERVALS else []
        self.log_path = logs_dir / f"batch-cost-{variant}-{uuid.uuid4().hex[:6]}.log"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Auditor":
        from aldebaran.runtime import paths

        env = {**os.environ, "SPARK_CONF_DIR": str(self.conf_dir)}
        cmd = [sys.executable, str(paths.ROOT / "spark_apps" / "auditor.py"), "--checkpoint", self.platform.checkpoint,
               "--query-name", self.platform.query, "--lease-wait-seconds", "90", *self.args]
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_running()
        return self

    def _wait_running(self) -> None:
        from aldebaran.runtime import heartbeat
        from aldebaran.storage.store import open_store

        store = open_store()
        deadline = time.monotonic() + START_TIMEOUT_S
        started = time.time()
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"batch-cost: auditor ({self.variant}) exited {self.proc.returncode}; "
                                   f"see {self.log_path}")
            hb = heartbeat.read(store, heartbeat.AUDITOR, self.platform.query) or {}
            if (hb.get("pid") in _auditor_pids(self.proc.pid) and hb.get("status") in ("running", "idle")
                    and hb.get("updated_at_ms", 0) / 1000 > started):
                return
            time.sleep(2.0)
        raise RuntimeError(f"batch-cost: auditor ({self.variant}) not running after {START_TIMEOUT_S:.0f} s; "
                           f"see {self.log_path}")

    def batch_id(self) -> int:
        """The auditor's latest batch id (its heartbeat, beaten after every batch)."""
        from aldebaran.runtime import heartbeat
        from aldebaran.storage.store import open_store

        return int((heartbeat.read(open_store(), heartbeat.AUDITOR, self.platform.query) or {}).get("batch_id") or 0)

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def segment(kafka, auditor: Auditor, rate: int, seconds: float, drain_s: float = 60.0) -> dict:
    """Paced one-alert orders at `rate` for `seconds`: the auditor's CPU per event (JVM, Python) over the load,
    the box's busy cores, and trade → alert p50/p99 read on `alerts`."""
    from aldebaran_capacity.taps import TopicTap, percentile
    from aldebaran_lab.deployed_parts import produce_in_process

    prefix = f"bc{uuid.uuid4().hex[:6]}r{rate}"
    tap = TopicTap(kafka, kafka.alerts_topic, lambda o: isinstance(o, str) and o.startswith(prefix + "-"))
    tap.start()
    pids = _auditor_pids(auditor.proc.pid)
    before, busy0, t0, batch0 = _tree_cpu(pids), _box_busy(), time.monotonic(), auditor.batch_id()
    sent = produce_in_process(kafka, rate, seconds, prefix)
    after, busy1, elapsed = _tree_cpu(_auditor_pids(auditor.proc.pid)), _box_busy(), time.monotonic() - t0
    batches = max(1, auditor.batch_id() - batch0)
    deadline = time.monotonic() + drain_s
    while len(tap.seen) < sent["orders"] and time.monotonic() < deadline:
        time.sleep(0.5)
    tap.stop()
    cpu = {"jvm": 0.0, "jit": 0.0, "gc": 0.0, "python": 0.0}
    for (pid, kind), secs in after.items():
        cpu[kind] += secs - before.get((pid, kind), 0.0)
    events = sent["events"]
    lat = [s.at_ms - s.trigger_ms for s in tap.seen.values() if s.trigger_ms is not None]
    return {"variant": auditor.variant, "rate": rate, "orders": sent["orders"], "alerts": len(tap.seen),
            "jvm_cores": round(cpu["jvm"] / elapsed, 3), "jit_cores": round(cpu["jit"] / elapsed, 3),
            "gc_cores": round(cpu["gc"] / elapsed, 3), "python_cores": round(cpu["python"] / elapsed, 3),
            "jvm_us_per_event": round(cpu["jvm"] * 1e6 / events, 1), "batches_per_s": round(batches / elapsed, 2),
            "jvm_ms_per_batch": round(cpu["jvm"] * 1e3 / batches, 1),
            "python_us_per_event": round(cpu["python"] * 1e6 / events, 1),
            "box_busy_cores": round((busy1 - busy0) / os.sysconf("SC_CLK_TCK") / elapsed, 3),
            "alert_p50_ms": _r(percentile(lat, 50)), "alert_p99_ms": _r(percentile(lat, 99))}


def _r(v):
    return None if v is None else round(v, 1)


def run(rates=(1000, 5000), seconds: float = 30.0, runs: int = 3, warmup_s: float = 45.0,
        variants=tuple(VARIANTS), on_segment=None) -> dict:
    from aldebaran.runtime import paths
    from aldebaran.platform import supervisor
    from aldebaran.settings import KafkaSettings, load
    from aldebaran.storage.store import open_store
    from aldebaran_lab.demo_platform import Platform, api_from_env
    from aldebaran_lab.deployed_parts import produce_in_process

    platform = Platform.load()
    platform.require_local()
    kafka = load(KafkaSettings)
    api = api_from_env()
    logs_dir = paths.run_dir() / "logs"
    out = []
    api.set_paused(SUPERVISOR, True)
    try:
        sup = supervisor.settings_with(None)
        supervisor.stop_local(open_store(), platform.query, platform.checkpoint, sup.stop_timeout_seconds,
                              "bench batch-cost")
        for run_no in range(runs):
            order = list(variants[run_no % len(variants):]) + list(variants[:run_no % len(variants)])
            for variant in order:
                log.info("batch-cost: run %d/%d, %s: starting the auditor", run_no + 1, runs, variant)
                with Auditor(platform, variant, logs_dir) as auditor:
                    produce_in_process(kafka, rates[0], warmup_s, f"bcw{uuid.uuid4().hex[:6]}")
                    time.sleep(5.0)
                    for rate in rates:
                        seg = segment(kafka, auditor, rate, seconds)
                        seg["run"] = run_no + 1
                        out.append(seg)
                        if on_segment is not None:
                            on_segment(out)
                        log.info("batch-cost: %s at %d/s: JVM %.3f cores (%.0f µs/event, %.1f batches/s, %.0f ms a "
                                 "batch; JIT %.3f, GC %.3f besides), Python %.3f, box %.3f; alert p50/p99 %s/%s ms "
                                 "(%d/%d)", variant, rate, seg["jvm_cores"], seg["jvm_us_per_event"],
                                 seg["batches_per_s"], seg["jvm_ms_per_batch"], seg["jit_cores"], seg["gc_cores"],
                                 seg["python_cores"], seg["box_busy_cores"],
                                 seg["alert_p50_ms"], seg["alert_p99_ms"], seg["alerts"], seg["orders"])
                        time.sleep(5.0)
    finally:
        api.set_paused(SUPERVISOR, False)
        api.trigger(SUPERVISOR)
    return {"rates": list(rates), "seconds": seconds, "runs": runs, "segments": out, "summary": summarize(out)}


def summarize(segments: list[dict]) -> dict:
    """variant → rate → medians of the runs (and the p99's spread)."""
    out: dict = {}
    for seg in segments:
        out.setdefault(seg["variant"], {}).setdefault(str(seg["rate"]), []).append(seg)
    summary: dict = {}
    for variant, by_rate in out.items():
        for rate, segs in by_rate.items():
            med = {k: round(statistics.median(s[k] for s in segs), 3)
                   for k in ("jvm_cores", "jit_cores", "gc_cores", "python_cores", "jvm_us_per_event",
                             "python_us_per_event", "box_busy_cores", "batches_per_s", "jvm_ms_per_batch",
                             "alert_p50_ms")}
            p99 = [s["alert_p99_ms"] for s in segs if s["alert_p99_ms"] is not None]
            med["alert_p99_ms"] = round(statistics.median(p99), 1) if p99 else None
            med["alert_p99_spread_ms"] = [min(p99), max(p99)] if p99 else None
            med["runs"] = len(segs)
            summary.setdefault(variant, {})[rate] = med
    return summary


BEGIN, END = "<!-- batch-cost:begin -->", "<!-- batch-cost:end -->"
LABELS = {"spark-delete": "Spark's delete of purged checkpoint files (4 requests a file), interval 0",
          "bulk-delete": "one DELETE a purged file (the platform's manager), the shipped settings, interval 0",
          "interpreted": "+ interpreted projections, short plan text, interval 0",
          "c1-only": "one DELETE a file, C1 JIT only, interval 0",
          "c1-serial": "one DELETE a file, C1 JIT only, serial GC, interval 0",
          "per-batch-udf": "one DELETE a file, the shard tasks' function built every batch, interval 0",
          "interval-500ms": "one DELETE a file, trigger interval 500 ms",
          "interval-1s": "one DELETE a file, trigger interval 1 s"}


def render(result: dict) -> str:
    """docs/benchmarks.md's section: per variant and rate, medians of the runs."""
    b, m = result["batch_cost"], result["machine"]
    lines = [BEGIN, "## The exact auditor's cost per batch: Spark settings and the trigger interval (A/B)", "",
             f"`{result['command']}` — {m['date']}, {m['cores']} cores; the demo platform running (Kafka, MinIO, "
             "Airflow, the log dispatcher), `auditor_supervisor` paused and each variant's auditor started in turn "
             f"on the platform's s3a checkpoint, the order rotating; {b['runs']} runs, {b['seconds']:g} s per rate "
             "after a warm-up. JVM = the auditor JVM's threads but the JIT compilers and the GC (listed apart: a "
             "fresh JVM compiles for minutes); latency = trade → a consumer of `alerts`.", "",
             "| variant | events/s | batches/s | JVM ms a batch | JVM cores | JIT cores | Python cores | box busy "
             "(cores) | alert p50 / p99 ms (p99 spread) |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for variant, by_rate in b["summary"].items():
        for rate, f in by_rate.items():
            spread = "–".join(f"{v:,.0f}" for v in f["alert_p99_spread_ms"] or [])
            lines.append(f"| {LABELS.get(variant, variant)} | {int(rate):,} | {f['batches_per_s']} | "
                         f"{f['jvm_ms_per_batch']:.0f} | {f['jvm_cores']:.2f} | {f['jit_cores']:.2f} | "
                         f"{f['python_cores']:.2f} | {f['box_busy_cores']:.2f} | {f['alert_p50_ms']:,.0f} / "
                         f"{f['alert_p99_ms']:,.0f} ({spread}) |")
    lines += ["", END]
    return "\n".join(lines)


def main(args) -> int:
    import json

    from aldebaran.runtime import paths
    from aldebaran_capacity.bench import machine, sections

    rates = [int(r) for r in args.rates.split(",")] if args.rates else [1000, 5000]
    variants = tuple(v for v in args.variants.split(",") if v) if args.variants else tuple(VARIANTS)
    unknown = [v for v in variants if v not in VARIANTS and v not in INTERVALS]
    if unknown:
        raise SystemExit(f"batch-cost: unknown variant(s) {unknown}: choose from {[*VARIANTS, *INTERVALS]}")
    command = (f"aldebaran bench batch-cost --rates {','.join(map(str, rates))} --seconds {args.seconds:g} "
               f"--runs {args.runs} --variants {','.join(variants)}")
    out = Path(args.out) if args.out else None
    if args.render_from:  # a finished run's JSON (--out) → the report, without running again
        result = json.loads(Path(args.render_from).read_text())
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the supervisor is unpaused on the way out

        def save(segments: list[dict]) -> None:  # as it goes: an interrupted run keeps what it measured
            if out:
                out.write_text(json.dumps({"segments": segments, "summary": summarize(segments)}, indent=1))

        result = {"machine": machine.describe(), "command": command,
                  "batch_cost": run(rates, args.seconds, args.runs, variants=variants, on_segment=save)}
        if out:
            out.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, indent=1, default=str))
    if args.report:
        sections.write_report(paths.ROOT / "docs", "batch_cost", result, render(result), BEGIN, END)
    return 0
