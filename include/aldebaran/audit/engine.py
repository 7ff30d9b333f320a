"""The auditor's micro-batch: one read of Kafka, one parse in the JVM, then per batch
(foreachBatch, keyed by batch_id so every write converges on retry):

    parsed ─┬─ invalid ─────────────────────────────▶ trades.dlq (original bytes + reason headers)
            └─ valid ─ repartition(shards, order_id) ─ mapInArrow: ShardStore.apply ─▶ alerts
                                                                   (state delta durable first)
    alerts ─▶ Kafka `alerts` (key = alert_id) ─▶ archive object keyed by batch id ─▶ Spark commits

Python runs once per shard per batch (never per row in the JVM plan); parsing, routing and the
shuffle by key stay in the JVM.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from aldebaran.audit.books import Config, ShardStore
from aldebaran.audit.rules import EventRow

log = logging.getLogger(__name__)

TICK_TOPIC = "__aldebaran_tick__"

OUTPUT_SCHEMA = (
    "row_type string, alert_id string, kind string, order_id string, alert_json string, "
    "shard int, open_books long, opened long, expired long, applied long, duplicates long, state_ms double"
)


@dataclass(frozen=True)
class BatchContext:
    """What every shard task needs; pickled into the mapInPandas closure."""

    state_root: str
    rule_names: tuple[str, ...]
    ttl_ms: int
    grace_ms: int
    snapshot_every: int
    snapshot_delta_ratio: float = 1.0


def shard_function(ctx: BatchContext, batch_id: int):
    """The mapInArrow body: applies one shard's slice of the batch. Runs on the executors."""

    def run(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        from aldebaran.audit.rules import resolve

        shard_id = TaskContext.get().partitionId()
        store = ShardStore(
            Config(ctx.state_root, resolve(list(ctx.rule_names)), ctx.ttl_ms, ctx.grace_ms, ctx.snapshot_every,
                   ctx.snapshot_delta_ratio),
            shard_id,
        )

        def rows():
            for rb in batches:
                cols = [rb.column(c).to_pylist() for c in EVENT_FIELDS]
                for kind, event_id, order_id, shares, client, stock, ts in zip(*cols):
                    yield EventRow(kind, event_id, order_id, shares, client, stock, ts)

        out = store.apply(batch_id, rows())
        records = [
            {"row_type": "alert", "alert_id": a["alert_id"], "kind": a["kind"], "order_id": a["order_id"],
             "alert_json": json.dumps(a, separators=(",", ":")), "shard": shard_id}
            for a in out.alerts
        ]
        records.append({"row_type": "stats", "shard": shard_id, "open_books": out.open_books, "opened": out.opened,
                        "expired": out.expired, "applied": out.applied, "duplicates": out.duplicates,
                        "state_ms": out.state_ms})
        yield pa.RecordBatch.from_pylist(records, schema=_arrow_schema())

    return run


EVENT_FIELDS = ("kind", "event_id", "order_id", "shares", "client", "stock", "event_ts")


def _arrow_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "double": pa.float64()}
    return pa.schema([(name, types[typ]) for name, typ in (c.split() for c in OUTPUT_SCHEMA.split(", "))])


def dlq_records(invalid_df, source_topic_col: str = "topic"):
    """Invalid rows → Kafka records for the DLQ: original key and bytes, reason and origin in headers."""
    from pyspark.sql import functions as F

    def header(name: str, value):
        return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))

    return invalid_df.select(
        F.col("key"),
        F.coalesce(F.col("value"), F.lit(b"").cast("binary")).alias("value"),
        F.array(
            header("aldebaran.reason_code", F.col("reason_code")),
            header("aldebaran.reason", F.col("reason")),
            header("aldebaran.source.topic", F.col(source_topic_col)),
            header("aldebaran.source.partition", F.col("partition").cast("string")),
            header("aldebaran.source.offset", F.col("offset").cast("string")),
            header("aldebaran.source.timestamp", F.col("kafka_ts").cast("string")),
        ).alias("headers"),
    )


class BatchWriter:
    """foreachBatch sink. Order per batch: state deltas (in the shard tasks) → alerts to Kafka →
    archive object → DLQ records → return (Spark then commits the batch's offsets)."""

    def __init__(self, settings, kafka, archive, on_batch=None) -> None:
        from aldebaran.kafka_io import AlertSink

        self.settings = settings
        self.kafka = kafka
        self.alert_sink = AlertSink(kafka)
        self.archive = archive  # aldebaran.audit.archive.Archive | None
        self.on_batch = on_batch
        self.ctx = BatchContext(
            state_root=settings.checkpoint.rstrip("/") + "/books",
            rule_names=tuple(settings.rule_names()),
            ttl_ms=int(settings.ttl_seconds * 1000),
            grace_ms=int(settings.idle_grace_seconds * 1000),
            snapshot_every=settings.snapshot_every,
            snapshot_delta_ratio=settings.snapshot_delta_ratio,
        )
        self.last: dict = {}
        self.recent: dict[int, dict] = {}  # batch id → figures, for the heartbeat listener

    def __call__(self, batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        batch_df.persist()
        try:
            real = batch_df.where(F.col("topic") != F.lit(TICK_TOPIC))
            valid = real.where(F.col("reason_code").isNull())
            invalid = real.where(F.col("reason_code").isNotNull())

            events = valid.select("kind", "event_id", "order_id", "shares", "client", "stock", "event_ts",
                                  "partition", "offset")
            sharded = events.repartition(self.settings.shards, "order_id").sortWithinPartitions("partition", "offset")
            out = sharded.mapInArrow(shard_function(self.ctx, batch_id), OUTPUT_SCHEMA)
            rows = out.collect()  # runs the shard tasks: state deltas are durable after this
            steps = {"parse_shards": _ms_since(t0)}
            alerts = [r for r in rows if r.row_type == "alert"]
            stats = [r for r in rows if r.row_type == "stats"]
            if alerts:
                # The alerts are already on the driver: produce them from here (idempotent
                # producer, flushed) rather than recompute the shard tasks for a Spark write.
                t = time.perf_counter()
                self.alert_sink.send([(r.alert_id, r.alert_json) for r in alerts])
                steps["alerts"] = _ms_since(t)
                if self.archive is not None:
                    t = time.perf_counter()
                    self.archive.write(batch_id, [r.alert_json for r in alerts])
                    steps["archive"] = _ms_since(t)
            t = time.perf_counter()
            dlq_count = invalid.count()
            if dlq_count:
                (dlq_records(invalid).write.format("kafka")
                 .option("kafka.bootstrap.servers", self.kafka.bootstrap_servers)
                 # The original bytes go to the DLQ whole: up to the topics' largest message plus headers
                 # (the Kafka producer's own default, 1 MB, would fail the batch on one big message).
                 .option("kafka.max.request.size", str(self.kafka.dlq_record_bytes))
                 .option("topic", self.kafka.dlq_topic).save())
            steps["dlq"] = _ms_since(t)
            self.last = {
                "batch_id": batch_id,
                "alerts": len(alerts),
                "alert_kinds": _count(a.kind for a in alerts),
                "dlq": dlq_count,
                "open_books": sum(s.open_books for s in stats),
                "opened": sum(s.opened for s in stats),
                "expired": sum(s.expired for s in stats),
                "applied": sum(s.applied for s in stats),
                "duplicates": sum(s.duplicates for s in stats),
                "state_ms_max": max((s.state_ms for s in stats), default=0.0),
                "batch_ms": (time.perf_counter() - t0) * 1000,
                # Where the batch's time went inside foreachBatch (ms): the Spark job that parses, shuffles
                # and runs the shard tasks; producing the alerts; the archive PUT; the DLQ count + write.
                "steps_ms": steps,
            }
            self.recent[batch_id] = self.last
            for old in [b for b in self.recent if b < batch_id - 20]:
                del self.recent[old]
            log.info("batch %d: %s", batch_id, json.dumps(self.last))
            if self.on_batch:
                self.on_batch(self.last)
        finally:
            batch_df.unpersist()


def _ms_since(t: float) -> float:
    return round((time.perf_counter() - t) * 1000, 1)


def _count(items) -> dict:
    out: dict = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out
