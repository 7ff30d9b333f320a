"""The shuffle plan: the fallback for a topic whose producers do not key by order id (plans.decide picks it).

    parsed in the JVM (jvmparse) ─ repartition(shards, order_id) ─ mapInArrow: ShardStore.apply(valid) ─▶ alerts
                                                                               (state delta durable first)
                                   invalid rows passed through ────────────────────────────────────────▶ DLQ

Why it stays beside the co-partitioned plan: that plan sends an event whose order another partition owns
back to the trades topic, to be audited there in a later batch. A stream gets to it; a bounded run (a
replay, ``--trigger available-now``, expire-at-end) stops at offsets fixed before that copy was written,
so an unkeyed topic, whose events are mostly misrouted, must be sharded by the order id in Spark instead.

Python runs once per shard per batch; parsing, routing and the shuffle by key stay in the JVM. Invalid
rows ride along with the valid ones (all in the shard of the null key, bytes only for them) and that
shard's task produces them to the DLQ as they stream past, flushed before it returns: the batch is read
and parsed once, and rejected bytes never travel to the driver. A shard's books live in whichever
Spark Python worker runs its task (the store's per-process cache).
"""

from __future__ import annotations

from aldebaran.model import Event
from aldebaran.kafka.io import dlq_headers
from aldebaran.audit.sparkjob.rows import (
    DLQ_FIELDS, EVENT_FIELDS, BatchContext, arrow_schema, dlq_sink, shard_rows, store_for,
)


def sharded(parsed, shards: int):
    """The batch's JVM-parsed rows, repartitioned by order id into `shards` shards in Kafka order (an invalid
    row keeps its bytes and reason; a valid one only its event fields)."""
    from pyspark.sql import functions as F

    invalid = F.col("reason_code").isNotNull()
    rows_in = parsed.select(*EVENT_FIELDS, "reason_code",
                            *[F.when(invalid, F.col(c)).alias(c) for c in DLQ_FIELDS if c not in
                              ("reason_code", "partition", "offset")])
    return rows_in.repartition(shards, "order_id").sortWithinPartitions("partition", "offset")


def shard_function(ctx: BatchContext, batch_id: int):
    """The mapInArrow body over `sharded` rows: applies one shard's slice of the batch. Runs on the executors."""

    def run(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        shard_id = TaskContext.get().partitionId()
        store = store_for(ctx, shard_id)
        sink = None

        def reject(bad) -> None:
            # Invalid rows (already in source order within this shard): straight to the producer.
            nonlocal sink
            if sink is None:
                if ctx.kafka is None:
                    raise RuntimeError("shard task: invalid rows but no Kafka settings for the DLQ")
                sink = dlq_sink(ctx.kafka)
            sink.add((key, value if value is not None else b"", dlq_headers(code, reason, topic, part, offset, ts))
                     for key, value, code, reason, topic, part, offset, ts in zip(
                         *[bad.column(c).to_pylist() for c in DLQ_FIELDS]))

        def rows():
            for rb in batches:
                codes = rb.column("reason_code")
                if codes.null_count < len(codes):  # invalid rows in this Arrow batch
                    reject(rb.filter(codes.is_valid()))
                    rb = rb.filter(codes.is_null())
                yield from map(Event._make, zip(*[rb.column(c).to_pylist() for c in EVENT_FIELDS]))

        out = store.apply(batch_id, rows(), expire_all=ctx.expire_all)
        # Every DLQ record acknowledged before the task reports the batch done (and Spark commits it).
        dlq = sink.flush() if sink is not None else 0
        yield pa.RecordBatch.from_pylist(shard_rows(out, shard_id, ctx.trades_topic, dlq=dlq), schema=arrow_schema())

    return run


def expire_all_function(ctx: BatchContext, batch_id: int):
    """RDD mapPartitions body for the end pass (endpass.py): each listed shard, no events, every book
    expires. Returns the same rows as the shard tasks."""

    def run(shard_ids):
        for shard_id in shard_ids:
            out = store_for(ctx, shard_id).apply(batch_id, iter(()), expire_all=True)
            yield from shard_rows(out, shard_id, ctx.trades_topic)

    return run
