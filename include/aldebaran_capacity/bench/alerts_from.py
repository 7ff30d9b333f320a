"""``aldebaran bench alerts-from``: who should produce the auditor's alerts — each shard task, as soon as its
book delta is durable (``ALDEBARAN_AUDIT_ALERTS_FROM=shard``), or the driver after the whole batch
(``driver``)? Both run the same micro-batch latency segment (harness.latency: paced trades, trade → the
alert record's Kafka timestamp), alternated, `repeats` times each, in one run on one box, with the box's
state per run (boxstate). Writes its section of docs/benchmarks.md and ``alerts_from`` in
docs/img/bench-results.json with ``--report``.
"""

from __future__ import annotations

import json
import logging
import os
import statistics

log = logging.getLogger(__name__)

BEGIN, END = "<!-- alerts-from:begin -->", "<!-- alerts-from:end -->"
MODES = ("shard", "driver")
VAR = "ALDEBARAN_AUDIT_ALERTS_FROM"


def run(rate: int = 5000, seconds: float = 20.0, repeats: int = 3) -> dict:
    from aldebaran.runtime import spark as sparkmod
    from aldebaran_capacity.bench import harness
    from aldebaran_capacity.bench.boxstate import BoxSampler

    spark = sparkmod.session("bench-alerts-from", master="local[2]", shuffle_partitions=2,
                             conf={"spark.sql.adaptive.enabled": "false"})
    runs = []
    before = os.environ.get(VAR)
    try:
        for i in range(repeats):
            for mode in (MODES if i % 2 == 0 else MODES[::-1]):  # alternate which goes first
                os.environ[VAR] = mode
                box = BoxSampler()
                box.start()
                res = harness.latency(spark, [rate], seconds)
                seg = res["segments"][0]
                runs.append({"mode": mode, "repeat": i, "p50_ms": seg["p50_ms"], "p99_ms": seg["p99_ms"],
                             "max_ms": seg["max_ms"], "alerts": seg["alerts"], "correct": res.get("correct"),
                             "box": box.stop()})
                log.info("alerts-from %s #%d: p50 %.0f ms, p99 %.0f ms", mode, i, seg["p50_ms"], seg["p99_ms"])
    finally:
        if before is None:
            os.environ.pop(VAR, None)
        else:
            os.environ[VAR] = before
        spark.stop()
    summary = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        summary[mode] = {"p50_ms_median": round(statistics.median(r["p50_ms"] for r in mine), 1),
                         "p99_ms_median": round(statistics.median(r["p99_ms"] for r in mine), 1),
                         "all_correct": all(r["correct"] for r in mine),
                         "all_quiet": all(r["box"].get("quiet") for r in mine)}
    return {"rate": rate, "seconds": seconds, "repeats": repeats, "runs": runs, "summary": summary}


def render(result: dict) -> str:
    a, m = result["alerts_from"], result["machine"]
    lines = [BEGIN, "## Who produces the alerts: the shard task or the driver (A/B)", "",
             f"`{result['command']}` — {m['date']}, {m['cores']} cores; the micro-batch auditor in isolation "
             f"(local checkpoint, Spark `local[2]`), {a['rate']:,} events/s for {a['seconds']:g} s per run, the two "
             f"modes alternated, {a['repeats']} runs each; latency = the alert record's Kafka timestamp − the "
             "trade's.", "",
             "| mode | p50 ms (median of runs) | p99 ms (median of runs) | runs p99 ms | correct | quiet box |",
             "|---|---:|---:|---|---|---|"]
    for mode, s in a["summary"].items():
        p99s = ", ".join(f"{r['p99_ms']:,.0f}" for r in a["runs"] if r["mode"] == mode)
        lines.append(f"| {mode} | {s['p50_ms_median']:,.0f} | {s['p99_ms_median']:,.0f} | {p99s} | "
                     f"{'yes' if s['all_correct'] else 'no'} | {'yes' if s['all_quiet'] else '**no**'} |")
    lines += ["", END]
    return "\n".join(lines)


def main(args) -> int:
    from aldebaran.runtime import paths
    from aldebaran_capacity.bench import machine, sections

    rate = int((args.rates or "5000").split(",")[0])
    command = f"aldebaran bench alerts-from --rates {rate} --seconds {args.seconds:g} --repeats {args.repeats}"
    result = {"machine": machine.describe(), "command": command,
              "alerts_from": run(rate, args.seconds, args.repeats)}
    print(json.dumps(result, indent=1, default=str))
    if args.report:
        sections.write_report(paths.ROOT / "docs", "alerts_from", result, render(result), BEGIN, END)
    return 0 if all(s["all_correct"] for s in result["alerts_from"]["summary"].values()) else 1
