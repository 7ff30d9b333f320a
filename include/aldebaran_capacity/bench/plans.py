"""The auditor's plans side by side: one backlog on one topic, each variant draining it
from a fresh checkpoint in turn (the order rotates every repeat, so drift on this shared machine does not
favour one), each checked against the reference model; and in the same run the two ceilings that bound
them: Spark's Kafka source alone (read every value, nothing else) and the Spark batch job (JVM parse,
dedupe, aggregate; harness.spark_batch).

    aldebaran bench all --sections plans            # `make bench` runs it with the drain section
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time

from aldebaran.kafka import admin as kadmin
from aldebaran_capacity import loadgen
from aldebaran_capacity.bench import harness

log = logging.getLogger(__name__)

# (plan, parser, shard host), the keys of the results: the auditor's two plans, each with the parser and the
# home of the books it comes with (plans.Plan). Earlier reports also ran the co-partitioned plan with the JVM
# parse and with books in Spark's Python workers; those variants lost (docs/benchmarks.md) and left the product.
VARIANTS = (("shuffle", "jvm", "worker"), ("copartitioned", "python", "dedicated"))


def spark_read(spark, kafka) -> dict:
    """The Kafka source's own ceiling: a Spark batch job that reads every message's value and sums the
    lengths (so no column is pruned away), with no parse and no state."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
           .option("subscribe", kafka.trades_topic).option("startingOffsets", "earliest")
           .option("endingOffsets", "latest").load())
    row = raw.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
    return {"seconds": time.monotonic() - t0, "messages": row["n"], "bytes": row["bytes"]}


def compare(spark, backlog: harness.Backlog, repeats: int = 2, ttl_s: float = 600.0,
            max_offsets: int = 200_000) -> dict:
    t = harness.tag()
    with harness.bench_topics(t) as kafka:
        sent = loadgen.send(backlog.records(), kafka.trades_topic, total=None, progress_every=500_000)
        expected = harness.expected_of(backlog.records(), ttl_ms=int(ttl_s * 1000))
        per_trigger = min(max_offsets, max(10_000, sent.count // 10))
        runs: dict[tuple[str, str, str], list[dict]] = {v: [] for v in VARIANTS}
        reads, batch_jobs = [], []
        # One unmeasured drain first: the first auditor run of a bench process pays the JVM's warm-up (JIT,
        # class loading), which would otherwise land on whichever variant runs first (docs/design.md "What
        # limits throughput").
        with tempfile.TemporaryDirectory(prefix="bench-plan-warmup-") as ckpt:
            harness.run_auditor(spark, harness.auditor_settings(
                f"{t}_warmup", ckpt, ttl_seconds=ttl_s, max_offsets_per_trigger=per_trigger, idle_ticks=False))
        kadmin.delete_topics(kafka, [kafka.alerts_topic])
        time.sleep(1.0)
        kadmin.ensure_topics(kafka, [kafka.alerts_topic])
        for r in range(repeats):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for plan, parser, host in order:
                figures: list[dict] = []
                with tempfile.TemporaryDirectory(prefix="bench-plan-") as ckpt:
                    settings = harness.auditor_settings(
                        f"{t}_{plan}_{parser}_{host}_{r}", ckpt, ttl_seconds=ttl_s,
                        max_offsets_per_trigger=per_trigger, idle_ticks=False, plan=plan, shards=2)
                    res = harness.run_auditor(spark, settings, on_batch=figures.append)
                check = harness.compare(harness.read_alerts(kafka), expected)
                loads: dict[str, int] = {}
                for f in figures:
                    for k, n in f["shard_loads"].items():
                        loads[k] = loads.get(k, 0) + n
                runs[(plan, parser, host)].append({
                    "sustained_eps": harness.sustained_rate(res["batches"]), "overall_eps": sent.count / res["wall_s"],
                    "batches": len(res["batches"]), "shard_loads": loads,
                    "state_ms_max_p50": statistics.median(f["state_ms_max"] for f in figures) if figures else None,
                    **check})
                log.info("plans: %s/%s/%s run %d: %s", plan, parser, host, r + 1, runs[(plan, parser, host)][-1])
                kadmin.delete_topics(kafka, [kafka.alerts_topic])  # the next variant compares a clean topic
                time.sleep(1.0)
                kadmin.ensure_topics(kafka, [kafka.alerts_topic])
            reads.append(spark_read(spark, kafka))
            batch_jobs.append(harness.spark_batch(spark, kafka))
        read_eps = statistics.median(x["messages"] / x["seconds"] for x in reads)
        batch_eps = statistics.median(x["messages"] / x["seconds"] for x in batch_jobs)
        variants = []
        for (plan, parser, host), rs in runs.items():
            eps = statistics.median(x["sustained_eps"] for x in rs)
            variants.append({"plan": plan, "parser": parser, "host": host, "sustained_eps": eps,
                             "overall_eps": statistics.median(x["overall_eps"] for x in rs),
                             "spark_read_ratio": eps / read_eps, "spark_batch_ratio": eps / batch_eps,
                             "correct": all(x["correct"] for x in rs), "runs": rs})
        return {"events": sent.count, "repeats": repeats, "max_offsets_per_trigger": per_trigger,
                "variants": variants, "correct": all(v["correct"] for v in variants),
                "spark_read": {"eps": read_eps, "runs": reads},
                "spark_batch": {"eps": batch_eps, "runs": [{k: v for k, v in x.items() if k != "overfilled"}
                                                           for x in batch_jobs]}}
