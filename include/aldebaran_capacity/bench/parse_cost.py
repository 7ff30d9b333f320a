"""Where the Spark batch ceiling goes (`aldebaran bench parse-cost`): one preloaded Kafka topic, read as
a batch job four ways, each a single action, so each stage's cost shows as the step between rows:

- `read`: the Kafka source alone (sum of the values' lengths: every record fetched, nothing parsed);
- `from_json`: `from_json` with the trade schema and no validation at all — what a hand-written job
  that trusts its input would do (it cannot tell `100` from `100.0` or `"100"`, nor reject trailing
  garbage: not the contract, a yardstick);
- `parse`: the shipped parse and validation (aldebaran.audit.sparkjob.jvmparse.parse_events: messages in the
  publisher's shape proved valid by one regex and read with `from_json`, the rest through the VARIANT
  parse with exact JSON types and every DLQ reason), counting the valid events;
- `batch`: the shipped parse + dedupe + aggregate per order (aldebaran_capacity.bench.harness.spark_batch), the
  ceiling `bench state-designs` and `bench all` compare the auditor with.

One untimed warm-up read first (JIT, Kafka connections), then `repeats` rounds; the median per stage
is reported."""

from __future__ import annotations

import logging
import os
import statistics
import time

from aldebaran_capacity import loadgen
from aldebaran_capacity.bench import harness, sections
from aldebaran_capacity.loadgen import Mix

log = logging.getLogger(__name__)

BEGIN = "<!-- parse-cost:begin -->"
END = "<!-- parse-cost:end -->"
TRADE_SCHEMA = "id string, initial_order_id string, `#shares` long, client string, stock string, ts long"
STAGES = {
    "read": "Kafka source only (values fetched, nothing parsed)",
    "from_json": "`from_json` with the trade schema, no validation (yardstick, not the contract)",
    "parse": "shipped parse + validation (`parse_events`: regex-proved fast path, else VARIANT; every DLQ reason)",
    "batch": "shipped parse + dedupe + aggregate per order (the batch ceiling of the other sections)",
}


def _stage_jobs(spark, kafka):
    from pyspark.sql import functions as F

    from aldebaran.audit.sparkjob.jvmparse import parse_events

    def raw():
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                .option("subscribe", kafka.trades_topic).option("startingOffsets", "earliest")
                .option("endingOffsets", "latest").load())

    return {
        "read": lambda: raw().agg(F.sum(F.length("value"))).collect(),
        "from_json": lambda: raw().select(F.from_json(F.col("value").cast("string"), TRADE_SCHEMA).alias("j"))
        .agg(F.count("j.id"), F.sum("j.`#shares`")).collect(),
        "parse": lambda: parse_events(raw()).where(F.col("reason_code").isNull())
        .agg(F.count(F.lit(1)), F.sum("shares")).collect(),
        "batch": lambda: harness.spark_batch(spark, kafka),
    }


def run(spark, orders: int = 200_000, repeats: int = 3, seed: int = 5) -> dict:
    mix = Mix(orders=orders, purchases_per_order=4, overfill_fraction=0.3, duplicate_fraction=0.01,
              open_orders=orders, seed=seed)
    with harness.bench_topics(harness.tag()) as kafka:
        sent = loadgen.send(harness.Backlog(mix, int(time.time() * 1000), 20_000.0).records(), kafka.trades_topic,
                            total=None, progress_every=500_000)
        jobs = _stage_jobs(spark, kafka)
        jobs["read"]()  # warm-up, untimed
        seconds: dict[str, list[float]] = {name: [] for name in jobs}
        for rnd in range(repeats):
            for name, job in jobs.items():
                t0 = time.monotonic()
                job()
                seconds[name].append(time.monotonic() - t0)
                log.info("parse cost: round %d/%d %s %.2f s (%.0f events/s)", rnd + 1, repeats, name,
                         seconds[name][-1], sent.count / seconds[name][-1])
    rows = {name: {"median_s": statistics.median(s), "eps": sent.count / statistics.median(s), "runs_s": s}
            for name, s in seconds.items()}
    return {"events": sent.count, "orders": orders, "repeats": repeats, "rows": rows,
            "load_avg": os.getloadavg()[0]}


def render(result: dict, machine: dict, command: str) -> str:
    rows = result["rows"]
    base = rows["read"]["eps"]
    lines = [
        BEGIN,
        "## Where the batch ceiling goes: parse cost",
        "",
        f"Command: `{command}` — {machine['date']}; {machine['cores']} cores, {machine['memory_gib']:.1f} GiB RAM; "
        f"pyspark {machine['pyspark']}, Spark `local[2]`, Kafka broker on the same cores; load average at the end "
        f"{result['load_avg']:.2f}. "
        f"{result['events']:,} events ({result['orders']:,} orders) preloaded once; each stage is one batch "
        f"job over the whole topic; median of {result['repeats']} rounds after a warm-up read. "
        "See `aldebaran_capacity.bench.parse_cost` for the stages.",
        "",
        "| stage | events/s | × Kafka read | median s | runs s |",
        "|---|---:|---:|---:|---|",
    ]
    for name, label in STAGES.items():
        r = rows[name]
        lines.append(f"| {label} | {r['eps']:,.0f} | {r['eps'] / base:.2f} | {r['median_s']:.2f} | "
                     + ", ".join(f"{s:.2f}" for s in r["runs_s"]) + " |")
    lines += ["", END]
    return "\n".join(lines)


def splice(existing: str, section: str) -> str:
    return sections.splice(existing, section, BEGIN, END)


def main(args) -> int:
    import json
    import sys
    from pathlib import Path

    from aldebaran.runtime import paths
    from aldebaran.runtime import spark as sparkmod
    from aldebaran_capacity.bench import machine

    spark = sparkmod.session("aldebaran-bench-parse", master="local[2]", shuffle_partitions=2,
                             conf={"spark.sql.adaptive.enabled": "false", "spark.driver.memory": "4g"})
    try:
        orders = int(str(args.orders).split(",")[0])
        result = run(spark, orders=orders, repeats=args.repeats)
    finally:
        spark.stop()
    section = render(result, machine.describe(), "aldebaran " + " ".join(sys.argv[1:]))
    print(json.dumps(result, indent=2, default=str))
    if args.out != "-":
        doc = Path(args.out or paths.ROOT / "docs" / "benchmarks.md")
        doc.write_text(splice(doc.read_text() if doc.exists() else "# Benchmarks\n", section))
        log.info("parse cost: section written to %s", doc)
    return 0
