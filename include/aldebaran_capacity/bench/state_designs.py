"""State designs side by side (`aldebaran bench state-designs`): the same preloaded Kafka backlog, the
same JVM parse (aldebaran.audit.sparkjob.jvmparse), one streaming query per candidate for the per-order books, each
run on its own checkpoint with `Trigger.AvailableNow` and the same maxOffsetsPerTrigger, so the rates
are comparable within the run. Rate = rows / summed batch time after the first batch (Spark progress).

Candidates:
- `auditor`: the shipped design (aldebaran.audit.sparkjob.batch): foreachBatch, shuffle by order id,
  one Python call per shard per batch (a dict loop over the shard's events, not per-row UDFs), books
  in the worker with batch-id-keyed deltas in the checkpoint; cost per batch O(books touched).
- `jvm_agg_update`: `groupBy(order_id).agg(max request, sum purchases)` in update mode, rows
  where purchased > requested — JVM only, but the wrong semantics: no dedupe of event ids, every
  later batch touching an overfilled order emits it again, no expiry, no orphans. Counted re-emits.
- `pandas_buckets` / `pandas_buckets_rocksdb`: `applyInPandasWithState` over hash buckets of the
  order id; a bucket's open books are its state (pickled), read and rewritten whole each batch that
  touches the bucket: cost O(books open in touched buckets). Overfill semantics with event-id dedupe,
  first request wins, one alert per order (no expiry: the run is shorter than the TTL). Second run
  with the RocksDB state store and changelog checkpointing.
- `pandas_per_order`: `applyInPandasWithState` keyed by order id (a Python call per order): run for
  a bounded time on the same topic only, its rate from the batches it finished.
- `spark_batch`: the ceiling, a batch job with the same parse + dedupe + aggregate
  (aldebaran_capacity.bench.harness.spark_batch).

Correctness = the candidate's OVERFILL order ids equal the reference model's, each emitted once."""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time

from aldebaran_capacity import loadgen
from aldebaran_capacity.bench import harness, sections
from aldebaran_capacity.loadgen import Mix

log = logging.getLogger(__name__)

CANDIDATES = ("auditor", "jvm_agg_update", "pandas_buckets", "pandas_buckets_rocksdb", "pandas_per_order",
              "spark_batch")
ROCKSDB = {"spark.sql.streaming.stateStore.providerClass":
           "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
           "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}
HDFS = {"spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}


def _source(spark, kafka, max_offsets: int):
    from aldebaran.audit.sparkjob.jvmparse import parse_events

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
           .option("subscribe", kafka.trades_topic).option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", str(max_offsets)).load())
    return parse_events(raw)


class _Collect:
    """foreachBatch sink keeping the emitted order ids on the driver."""

    def __init__(self) -> None:
        self.order_ids: list[str] = []

    def __call__(self, df, batch_id: int) -> None:
        self.order_ids += [r.order_id for r in df.select("order_id").collect()]


def _run_query(spark, name: str, df, output_mode: str, checkpoint: str, seconds: float | None = None) -> dict:
    listener = harness.make_progress_listener(name)
    spark.streams.addListener(listener)
    sink = _Collect()
    t0 = time.monotonic()
    try:
        writer = (df.writeStream.queryName(name).outputMode(output_mode).option("checkpointLocation", checkpoint)
                  .foreachBatch(sink))
        query = (writer.trigger(processingTime="0 seconds") if seconds else writer.trigger(availableNow=True)).start()
        try:
            if seconds:
                query.awaitTermination(seconds)
            else:
                query.awaitTermination()
        finally:
            query.stop()
        wall = time.monotonic() - t0
        time.sleep(1.0)  # listener events are asynchronous
    finally:
        spark.streams.removeListener(listener)
    return {"wall_s": wall, "batches": list(listener.batches), "emitted": sink.order_ids}


def jvm_agg_update(spark, kafka, max_offsets: int, checkpoint: str) -> dict:
    from pyspark.sql import functions as F

    from aldebaran.audit import parse as events

    valid = _source(spark, kafka, max_offsets).where(F.col("reason_code").isNull())
    books = valid.groupBy("order_id").agg(
        F.max(F.when(F.col("kind") == events.REQUEST, F.col("shares"))).alias("requested"),
        F.sum(F.when(F.col("kind") == events.PURCHASE, F.col("shares"))).alias("purchased"))
    over = books.where(F.col("requested").isNotNull() & (F.col("purchased") > F.col("requested")))
    return _run_query(spark, "sd_jvm_agg_" + harness.tag(), over.select("order_id"), "update", checkpoint)


def _overfill_books(key, pdfs, state):
    """applyInPandasWithState function: the group's books in one pickled dict, updated by each event."""
    import pickle

    import pandas as pd

    books = pickle.loads(state.get[0]) if state.exists else {}
    fired: list[str] = []
    for pdf in pdfs:
        pdf = pdf.sort_values(["partition", "offset"], kind="stable")
        for kind, eid, oid, shares in zip(pdf["kind"], pdf["event_id"], pdf["order_id"], pdf["shares"]):
            book = books.get(oid)
            if book is None:
                book = books[oid] = [None, 0, set(), False]  # requested, purchased, seen ids, alerted
            if eid in book[2]:
                continue
            book[2].add(eid)
            if kind == "PR":
                if book[0] is None:
                    book[0] = int(shares)
            else:
                book[1] += int(shares)
            if not book[3] and book[0] is not None and book[1] > book[0]:
                book[3] = True
                fired.append(oid)
    state.update((pickle.dumps(books, protocol=pickle.HIGHEST_PROTOCOL),))
    yield pd.DataFrame({"order_id": fired}, dtype=object)


def pandas_state(spark, kafka, max_offsets: int, checkpoint: str, buckets: int | None,
                 seconds: float | None = None) -> dict:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from aldebaran.audit import parse as events

    if events.REQUEST != "PR":
        raise AssertionError("update _overfill_books: the request kind changed")
    valid = _source(spark, kafka, max_offsets).where(F.col("reason_code").isNull())
    key = F.pmod(F.xxhash64("order_id"), F.lit(buckets)) if buckets else F.col("order_id")
    grouped = valid.select(key.cast("string").alias("k"), "kind", "event_id", "order_id", "shares", "partition",
                           "offset").groupBy("k")
    out = grouped.applyInPandasWithState(_overfill_books, "order_id string", "books binary", "update",
                                         GroupStateTimeout.NoTimeout)
    name = f"sd_pandas_{'b' if buckets else 'k'}_{harness.tag()}"
    return _run_query(spark, name, out, "update", checkpoint, seconds=seconds)


def _summary(res: dict, expected_over: set[str], events_total: int) -> dict:
    emitted = res["emitted"]
    got = set(emitted)
    partial = res.get("partial", False)
    return {
        "eps": harness.sustained_rate(res["batches"]),
        "batches": len(res["batches"]),
        "rows": sum(r for r, _ in res["batches"]),
        "wall_s": res["wall_s"],
        "emitted": len(emitted),
        "re_emitted": len(emitted) - len(got),
        "missing": None if partial else len(expected_over - got),
        "extra": len(got - expected_over),
        "correct": None if partial else (got == expected_over and len(emitted) == len(got)),
        "partial": partial,
        "events": events_total,
    }


def run(spark, orders: int = 60_000, max_offsets: int = 100_000, buckets: int = 32, per_order_seconds: float = 60.0,
        candidates: tuple[str, ...] = CANDIDATES, seed: int = 5) -> dict:
    """Preload the topic once; run every candidate over it; return the table rows."""
    mix = Mix(orders=orders, purchases_per_order=4, overfill_fraction=0.3, duplicate_fraction=0.01,
              open_orders=orders, seed=seed)
    backlog = harness.Backlog(mix, int(time.time() * 1000), events_per_second=20_000.0)
    ttl_s = 86_400.0  # nothing expires within the run: every design holds every book it opened
    t = harness.tag()
    out: dict = {"mix": {"orders": orders, "purchases_per_order": 4, "overfill_fraction": 0.3,
                         "duplicate_fraction": 0.01, "open_orders": orders, "seed": seed},
                 "max_offsets_per_trigger": max_offsets, "buckets": buckets, "rows": {}}
    with harness.bench_topics(t) as kafka:
        sent = loadgen.send(backlog.records(), kafka.trades_topic, total=None, progress_every=200_000)
        expected = harness.expected_of(backlog.records(), ttl_ms=int(ttl_s * 1000))
        expected_over = {a["order_id"] for a in expected if a["kind"] == "OVERFILL"}
        out["events"], out["expected_overfills"] = sent.count, len(expected_over)
        log.info("state designs: %d events preloaded, %d OVERFILL expected", sent.count, len(expected_over))
        for name in candidates:
            load0 = os.getloadavg()[0]
            log.info("state designs: %s (load average %.2f)", name, load0)
            with tempfile.TemporaryDirectory(prefix="bench-sd-") as ckpt, harness.MemorySampler() as mem:
                if name == "auditor":
                    settings = harness.auditor_settings(f"{t}_sd", ckpt, ttl_seconds=ttl_s,
                                                        max_offsets_per_trigger=max_offsets, idle_ticks=False)
                    res = harness.run_auditor(spark, settings)
                    got = harness.read_alerts(kafka)
                    res["emitted"] = [a["order_id"] for a in got if a["kind"] == "OVERFILL"]
                elif name == "jvm_agg_update":
                    res = jvm_agg_update(spark, kafka, max_offsets, ckpt)
                elif name.startswith("pandas_buckets"):
                    conf = ROCKSDB if name.endswith("rocksdb") else HDFS
                    saved = {k: spark.conf.get(k, None) for k in conf}
                    for k, v in conf.items():
                        spark.conf.set(k, v)
                    try:
                        res = pandas_state(spark, kafka, max_offsets, ckpt, buckets)
                    finally:
                        for k, v in saved.items():
                            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
                elif name == "pandas_per_order":
                    # A Python call per order: bounded in time, small batches; its rate from finished batches.
                    res = pandas_state(spark, kafka, min(max_offsets, 5_000), ckpt, None, seconds=per_order_seconds)
                    res["partial"] = sum(r for r, _ in res["batches"]) < sent.count
                elif name == "spark_batch":
                    sb = harness.spark_batch(spark, kafka)
                    row = {"eps": sb["messages"] / sb["seconds"], "batches": 1, "rows": sb["messages"],
                           "wall_s": sb["seconds"], "emitted": len(sb["overfilled"]), "re_emitted": 0,
                           "missing": len(expected_over - sb["overfilled"]),
                           "extra": len(sb["overfilled"] - expected_over),
                           "correct": sb["overfilled"] == expected_over, "partial": False, "events": sent.count}
                    res = None
                else:
                    raise ValueError(f"unknown state design {name!r}; known: {', '.join(CANDIDATES)}")
                if res is not None:
                    row = _summary(res, expected_over, sent.count)
            row["peak_rss_mib"] = mem.peak / harness.MIB
            row["load_avg"] = load0
            out["rows"][name] = row
            log.info("state designs: %s → %s", name, {k: v for k, v in row.items()})
    ceiling = out["rows"].get("spark_batch", {}).get("eps")
    for row in out["rows"].values():
        row["ratio_to_batch"] = row["eps"] / ceiling if ceiling else None
    out["median_load"] = statistics.median(r["load_avg"] for r in out["rows"].values()) if out["rows"] else None
    return out


BEGIN, END = "<!-- state-design:begin -->", "<!-- state-design:end -->"
LABELS = {
    "auditor": "**auditor** (shipped: one Python call per shard per batch, a dict loop over its events, batch-id keyed deltas)",
    "jvm_agg_update": "JVM groupBy + agg, update mode (wrong semantics)",
    "pandas_buckets": "applyInPandasWithState, {buckets} hash buckets, default state store",
    "pandas_buckets_rocksdb": "applyInPandasWithState, {buckets} hash buckets, RocksDB + changelog",
    "pandas_per_order": "applyInPandasWithState keyed by order id (bounded run)",
    "spark_batch": "Spark batch job, same parse + dedupe + aggregate (ceiling)",
}


def render(results: list[dict], machine: dict, command: str) -> str:
    """The comparison (one block of rows per backlog size) as a markdown section for docs/benchmarks.md."""
    def n(v, d=0):
        return "–" if v is None else f"{v:,.{d}f}"

    def ok(v):
        return "–" if v is None else ("yes" if v else "**NO**")

    first = results[0]
    loads = [r["median_load"] for r in results if r.get("median_load") is not None]
    lines = [
        BEGIN,
        "## State designs side by side",
        "",
        f"Command: `{command}` — {machine['date']}; {machine['cores']} cores, {machine['memory_gib']:.1f} GiB RAM; "
        f"pyspark {machine['pyspark']}, Spark `local[2]`; load average during the runs "
        f"{n(min(loads), 2) if loads else '–'}–{n(max(loads), 2) if loads else '–'} (shared machine).",
        "",
        "Per size: the backlog is preloaded once (orders of the configurable mix, ~5 events each, all open: "
        "nothing expires within the run, so the open books grow to the number of orders); every candidate "
        "reads the same topic through the same JVM parse with maxOffsetsPerTrigger "
        f"{first['max_offsets_per_trigger']:,}; rate = rows / summed batch time after the first batch "
        "(the batch job: rows / wall time). Correct = its OVERFILL order ids equal the reference model's, "
        "each emitted once. See `aldebaran_capacity.bench.state_designs` for what each candidate keeps.",
        "",
        "| open books | design | events/s | × batch ceiling | batches | emitted | re-emitted | missing | extra "
        "| correct | peak RSS MiB | load |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for result in results:
        for name, row in result["rows"].items():
            label = LABELS.get(name, name).format(buckets=result["buckets"])
            if row.get("partial"):
                label += f" — {row['rows']:,} of {row['events']:,} events in the time allowed"
            lines.append(
                f"| {result['mix']['orders']:,} | {label} | {n(row['eps'])} | {n(row.get('ratio_to_batch'), 2)} | "
                f"{row['batches']} | {n(row['emitted'])} | {n(row['re_emitted'])} | {n(row['missing'])} | "
                f"{n(row['extra'])} | {ok(row['correct'])} | {n(row['peak_rss_mib'])} | {n(row['load_avg'], 2)} |")
    lines += ["", END]
    return "\n".join(lines)


def splice(existing: str, section: str) -> str:
    return sections.splice(existing, section, BEGIN, END)


def main(args) -> int:
    import json
    import sys
    from pathlib import Path

    from pyspark.sql import SparkSession

    from aldebaran.runtime import paths
    from aldebaran.runtime import spark as sparkmod
    from aldebaran_capacity.bench import machine

    own = SparkSession.getActiveSession() is None
    spark = sparkmod.session("aldebaran-bench-state", master="local[2]", shuffle_partitions=2,
                             conf={"spark.sql.adaptive.enabled": "false", "spark.driver.memory": "4g"})
    try:
        candidates = tuple(c for c in (args.candidates or ",".join(CANDIDATES)).split(",") if c)
        results = [run(spark, orders=int(o), max_offsets=args.max_offsets, buckets=args.buckets,
                       per_order_seconds=args.per_order_seconds, candidates=candidates)
                   for o in str(args.orders).split(",") if o]
    finally:
        if own:
            spark.stop()
    command = "aldebaran " + " ".join(sys.argv[1:])
    section = render(results, machine.describe(), command)
    print(json.dumps(results, indent=2, default=str))
    if args.out != "-":
        doc = Path(args.out or paths.ROOT / "docs" / "benchmarks.md")
        doc.write_text(splice(doc.read_text() if doc.exists() else "# Benchmarks\n", section))
        log.info("state designs: section written to %s", doc)
    return 0 if all(r["rows"].get("auditor", {}).get("correct", True) for r in results) else 1
