"""`aldebaran bench all [--quick]` (make bench / make bench-quick) and the capacity_test DAG: every
measurement of aldebaran_capacity.bench.harness plus the dispatch benchmark, one report.

    aldebaran bench all            # full: writes docs/benchmarks.md (its capacity section) + docs/img/*.png
    aldebaran bench all --quick    # everything small (< 5 min); asserts correctness only; report under .run/bench/

The report keeps every other section of docs/benchmarks.md (see aldebaran_capacity.bench.report).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aldebaran.runtime.progress import track
from aldebaran_capacity.loadgen import Mix

log = logging.getLogger(__name__)


SECTIONS = ("drain", "plans", "latency", "books", "churn", "dispatch", "e2e", "low_latency")
# low_latency submits the lane on the Spark 4.3 runtime (its own venv): the capacity_test DAG's sections
# (bench.capacity.SECTIONS) leave it out until the image carries that runtime.


@dataclass
class Config:
    """What one suite run measures. `full()` is the report's configuration, `quick()` the smoke run."""

    drain_orders: int = 600_000  # × 5 events (original-like custom mix) = 3M events
    drain_repeats: int = 2
    plans_orders: int = 200_000  # × 5 events: each plan/parser/host variant drains the same 1M-event topic
    plans_repeats: int = 2
    rates: list[int] = field(default_factory=lambda: [5_000, 20_000, 50_000, 100_000])
    latency_seconds: float = 20.0
    book_sizes: list[int] = field(default_factory=lambda: [100_000, 1_000_000, 10_000_000])
    churn_orders: int = 300_000
    dispatch_alerts: int = 50_000  # per channel (SMS: 1 %, at least 100; it writes two records per message)
    dispatch_repeats: int = 1
    # Empty: every channel the dispatch bench knows. The quick size (the capacity_test DAG, bench-quick) keeps
    # to the core channels, whose recipients need nothing beyond the platform (no Alertmanager binary).
    dispatch_channels: tuple[str, ...] = ()
    # The fast dispatcher's own latency at these paced alerts/s (dispatch.fast.paced; none in the quick run).
    dispatch_steady_rates: list[int] = field(default_factory=lambda: [100, 1_000])
    e2e_rates: list[int] = field(default_factory=lambda: [5_000, 10_000, 20_000, 50_000])  # trades/s, ramped
    e2e_seconds: float = 20.0
    # Alerts per webhook POST in the e2e run. One alert per POST tops out at the dispatch section's
    # single-POST rate (× ~11 trades per alert in the original mix), which would measure that receiver, not
    # the platform; the dispatch section reports both modes.
    e2e_webhook_batch: int = 100
    # The target's channels. An SMS channel on every alert (2 ledger writes per message, a rate-limited
    # provider) costs the 2-core machine the CPU the auditor needs; the dispatch section measures it.
    e2e_channels: tuple[str, ...] = ("webhook", "bus")
    # The real-time-mode lane: paced rates of the original mix, seconds each.
    low_latency_rates: list[int] = field(default_factory=lambda: [1_000, 10_000, 50_000])
    low_latency_seconds: float = 20.0
    low_latency_runs: int = 3  # each rate once per run, interleaved (BRIEF §4: the median of ≥ 3 runs)
    mix: Mix = field(default_factory=lambda: Mix(overfill_fraction=0.5, purchase_first=0.05, duplicate_fraction=0.01,
                                                 malformed_fraction=0.001, open_orders=1000))
    sections: tuple[str, ...] = SECTIONS
    quick: bool = False

    @classmethod
    def full(cls) -> "Config":
        return cls()

    @classmethod
    def quick_config(cls) -> "Config":
        from aldebaran_capacity.bench.dispatch import CORE_CHANNELS

        return cls(drain_orders=5_000, drain_repeats=1, plans_orders=5_000, plans_repeats=1, rates=[500, 2_000], latency_seconds=3.0,
                   book_sizes=[2_000, 10_000], churn_orders=3_000, dispatch_alerts=200, dispatch_repeats=1,
                   dispatch_channels=CORE_CHANNELS, dispatch_steady_rates=[],
                   e2e_rates=[500], e2e_seconds=5.0, low_latency_rates=[1_000], low_latency_seconds=5.0, low_latency_runs=1,
                   quick=True)

    def override(self, item: str) -> None:
        """`key=value` from the command line: ints, floats, or comma-separated int lists."""
        key, sep, value = item.partition("=")
        current = getattr(self, key, None) if sep else None
        if current is None or key in ("mix", "sections", "quick", "e2e_channels"):
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with KEY one of drain_orders, drain_repeats, "
                             "plans_orders, plans_repeats, rates, "
                             "latency_seconds, book_sizes, churn_orders, dispatch_alerts, dispatch_repeats, dispatch_channels, "
                             "dispatch_steady_rates, "
                             "e2e_rates, e2e_seconds, e2e_webhook_batch, low_latency_rates, low_latency_seconds, low_latency_runs")
        if isinstance(current, list):
            setattr(self, key, [int(v) for v in value.split(",") if v])
        elif isinstance(current, tuple):
            setattr(self, key, tuple(v.strip() for v in value.split(",") if v.strip()))
        else:
            setattr(self, key, type(current)(value))

    def describe(self) -> dict:
        out = asdict(self)
        out["mix"] = asdict(self.mix)
        return out


def run(config: Config, spark=None) -> dict:
    """Run the configured measurements; returns the results (with machine and per-section load average)."""
    from aldebaran_capacity.bench import dispatch, e2e, harness, machine

    results: dict = {"machine": machine.describe(), "config": config.describe(),
                     "command": "aldebaran " + " ".join(sys.argv[1:]) if sys.argv and "aldebaran" in sys.argv[0] else None}
    needs_spark = any(s in config.sections for s in ("drain", "plans", "latency", "books", "churn", "e2e"))
    own_spark = False
    if spark is None and needs_spark:
        from pyspark.sql import SparkSession

        from aldebaran.runtime import spark as sparkmod

        # Reuse a session this process already has (a test's, a task's); stop only one we started.
        own_spark = SparkSession.getActiveSession() is None
        spark = sparkmod.session("aldebaran-bench", master="local[2]", shuffle_partitions=2,
                                 conf={"spark.sql.adaptive.enabled": "false", "spark.driver.memory": "4g"})
    t_all = time.monotonic()
    try:
        # Sections differ a lot in length: the ETA is rough, the count and elapsed time exact.
        for section in track(config.sections, "bench", unit="sections", logger=log):
            t0, load0 = time.monotonic(), os.getloadavg()
            log.info("bench: %s (load average %.2f %.2f %.2f)", section, *load0)
            if section == "drain":
                backlog = harness.Backlog(Mix(**{**asdict(config.mix), "orders": config.drain_orders}),
                                          int(time.time() * 1000), events_per_second=20_000.0)
                out = harness.drain(spark, backlog, repeats=config.drain_repeats)
            elif section == "plans":
                from aldebaran_capacity.bench import plans

                backlog = harness.Backlog(Mix(**{**asdict(config.mix), "orders": config.plans_orders}),
                                          int(time.time() * 1000), events_per_second=20_000.0)
                out = plans.compare(spark, backlog, repeats=config.plans_repeats)
            elif section == "latency":
                out = harness.latency(spark, config.rates, config.latency_seconds, mix=config.mix)
            elif section == "books":
                out = harness.books(spark, config.book_sizes)
            elif section == "churn":
                out = harness.churn(spark, config.churn_orders)
            elif section == "dispatch":
                from aldebaran_capacity.bench import fast_paced

                out = fast_paced.add_to(dispatch.run(
                    alerts=config.dispatch_alerts, repeats=config.dispatch_repeats,
                    sms_alerts=max(100, config.dispatch_alerts // 100),
                    **({"channels": config.dispatch_channels} if config.dispatch_channels else {})),
                    config.dispatch_steady_rates, config.dispatch_repeats)
                out["correct"] = out["all_correct"]
            elif section == "e2e":
                out = e2e.run(spark, config.e2e_rates, config.e2e_seconds, webhook_batch=config.e2e_webhook_batch,
                              channels=config.e2e_channels)
                if "drain" in results:  # the auditor alone, same run: what the target compares with
                    out["auditor_drain_eps"] = results["drain"]["auditor_eps"]
            elif section == "low_latency":
                from aldebaran_capacity.bench import low_latency

                out = low_latency.run(config.low_latency_rates, config.low_latency_seconds,
                                      warmup_seconds=0.0 if config.quick else low_latency.WARMUP_SECONDS,
                                      fast_webhook=not config.quick, repeats=config.low_latency_runs)["low_latency"]
            else:
                raise ValueError(f"unknown bench section {section!r}")
            out["seconds"] = time.monotonic() - t0
            out["load_avg_start"] = list(load0)
            out["load_avg_end"] = list(os.getloadavg())
            results[section] = out
            log.info("bench: %s done in %.0fs, correct=%s", section, out["seconds"], out.get("correct"))
    finally:
        if own_spark:
            spark.stop()
    results["seconds"] = time.monotonic() - t_all
    results["correct"] = all(results[s].get("correct") for s in config.sections if s in results)
    return results


def main(args) -> int:
    """`aldebaran bench all [--quick] [--out DIR] [--sections a,b]`: run, write the report, exit 1 if any
    run's alerts differ from the reference model."""
    from aldebaran.runtime import paths
    from aldebaran_capacity.bench import report

    config = Config.quick_config() if args.quick else Config.full()
    if args.sections:
        config.sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    for item in args.set or []:
        config.override(item)
    out = Path(args.out) if args.out else (paths.run_dir() / "bench" / "quick" if args.quick else paths.ROOT / "docs")
    results = run(config)
    results["command"] = "aldebaran bench all" + (" --quick" if args.quick else "") + (
        f" --sections {args.sections}" if args.sections else "") + "".join(f" --set {i}" for i in args.set or []) + (
        " --merge" if getattr(args, "merge", False) else "")
    if getattr(args, "merge", False):
        results = merge(results, out / "img" / "bench-results.json")
    written = report.write(results, out)
    if "low_latency" in config.sections:  # its own section of the same document
        from aldebaran_capacity.bench import lane_report

        lane_report.write_report({"low_latency": results["low_latency"], "command": results["command"],
                                  "machine": results["machine"]}, out)
    log.info("report: %s", written["markdown"])
    if not results["correct"]:
        bad = [s for s in config.sections if not results[s].get("correct")]
        log.error("bench: alerts differ from the reference model in: %s", ", ".join(bad))
        return 1
    log.info("bench: every run's alerts equal the reference model's")
    return 0


def merge(results: dict, previous_path: Path) -> dict:
    """`--merge`: keep the previous report's sections this run did not measure (each marked with the run it
    came from), and its open-books rows for sizes this run did not measure. Lets a long measurement (10M
    open books) be run on its own and still land in the one report."""
    if not previous_path.exists():
        raise SystemExit(f"--merge: no previous results at {previous_path}")
    previous = json.loads(previous_path.read_text())
    origin = {"command": previous.get("command"), "date": previous.get("machine", {}).get("date")}
    merged = dict(results)
    for section in SECTIONS:
        old = previous.get(section)
        if old is None:
            continue
        if section not in results:
            merged[section] = {**old, "from_run": old.get("from_run") or origin}
        elif section == "books":
            sizes = {r["books"] for r in results["books"]["rows"]}
            # A kept row names the run that measured it: its own mark, else that of the section it sat in
            # (itself merged from an earlier run), else the previous report's.
            kept = [{**r, "from_run": r.get("from_run") or old.get("from_run") or origin}
                    for r in old["rows"] if r["books"] not in sizes]
            rows = sorted(kept + results["books"]["rows"], key=lambda r: r["books"])
            correct = all(r["correct"] for r in rows if not r.get("skipped"))
            merged["books"] = {**results["books"], "rows": rows, "correct": correct}
        elif section == "dispatch":
            merged["dispatch"] = merge_dispatch(results["dispatch"], old, origin)
    merged["config"] = {**previous.get("config", {}), **results["config"]}
    merged["correct"] = all(merged[s].get("correct") for s in SECTIONS if s in merged)
    return merged


def merge_dispatch(new: dict, old: dict, origin: dict) -> dict:
    """The channels this run measured, and the previous report's others, each marked with its run: lets
    a channel added later (or re-measured) land beside the others without re-running them all."""
    kept = {name: {**c, "from_run": c.get("from_run") or old.get("from_run") or origin}
            for name, c in old.get("channels", {}).items() if name not in new["channels"]}
    from aldebaran_capacity.bench.dispatch import FAST_KINDS, IN_DOUBT_KINDS, fast_summary

    channels = {**kept, **new["channels"]}
    correct = all(c["correct"] for c in channels.values())
    # The fast designs carry their own figure (dispatch.fast): a candidate's markers are not the platform's writes.
    writes = [c["ledger_writes_per_delivery"] or 0 for k, c in channels.items()
              if k not in IN_DOUBT_KINDS and k not in FAST_KINDS]
    fast = {FAST_KINDS[k]: c for k, c in channels.items() if k in FAST_KINDS}
    return {**new, "channels": channels, "all_correct": correct, "correct": correct,
            "ledger_writes_per_delivery": max(writes, default=None),
            **({"fast": fast_summary(fast)} if fast else {})}
