"""The co-partitioned plan: one stage, no shuffle (docs/design.md "Plans"). The product's plan for a topic
whose producers keep the keying contract; plans.decide picks it, and the shuffle plan (shuffle.py) for the rest.

When producers key by order id (aldebaran.audit.partitioning: any standard partitioner, the one in use
detected and recorded with the books) and the auditor runs one shard per Kafka partition, shard p's books
only ever need partition p's events. So the task that reads a partition also runs its shard:

    Kafka partition p ─ read ─ mapInArrow ─ relay (shardtasks) ─▶ shard p's host process: :func:`process`
        parse in Python (aldebaran.audit.parse.Parser) ─ ShardStore(p).apply ─▶ alerts, figures
        invalid → trades.dlq, misrouted → trades partition owner(order, partitioner)

The read and the Python step overlap (Spark feeds Arrow batches to the task while it reads the next
ones), and nothing is written to or read from a shuffle.

- The shard is the rows' Kafka partition, never the task id: Spark skips empty offset ranges, so task ids
  move between batches. A shard whose partition had no rows in a batch still takes that batch's version
  (expiry runs, the delta is written): shardtasks.idle_shards_function runs it, from the driver.
- Before an event opens a new book, the shard asks whether it owns the order; an event that does not map
  to this partition is never applied here. It goes back to the trades topic, to its owner partition, as
  a canonical message carrying its event time (``ts``) and where it came from (headers), durable before
  the batch commits. Its owner audits it in a later batch; duplicates of it are deduplicated by event id
  like any other. Counted as ``misrouted`` in the batch figures.
"""

from __future__ import annotations

import json

from aldebaran.audit import parse as events
from aldebaran.model import Event
from aldebaran.audit.partitioning import owner
from aldebaran.kafka.io import dlq_headers
from aldebaran.audit.sparkjob.rows import (
    BatchContext, dlq_sink, shard_rows, store_for,
)

RAW_FIELDS = ("key", "value", "topic", "partition", "offset", "kafka_ts")  # what the JVM hands this plan


def _owns(shard_id: int, partitions: int, partitioner: str):
    return lambda order_id: owner(order_id, partitions, partitioner) == shard_id


def rerouted_record(ev: Event, topic: str, partition: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """A misrouted event as its owner partition gets it: keyed by its order id, its fields as a canonical
    message (ids as strings, which is how the contract compares them; its event time as ``ts``)."""
    body = {"id": ev.event_id, "#shares": ev.shares, "client": ev.client, "stock": ev.stock, "ts": ev.event_ts}
    if ev.kind == events.PURCHASE:
        body["initial_order_id"] = ev.order_id
    value = json.dumps({k: v for k, v in body.items() if v is not None}, separators=(",", ":")).encode()
    return ev.order_id.encode(), value, [("aldebaran.rerouted.from", f"{topic}/{partition}".encode()),
                                         ("aldebaran.rerouted.offset", str(ev.offset).encode())]


def process(ctx: BatchContext, batch_id: int, partitions: int, shard_id: int, batches) -> list[dict]:
    """One shard's batch: the Arrow record batches of its Kafka partition in (RAW_FIELDS; none: an idle
    shard), the alert and figure rows out. Invalid rows are produced to the DLQ and misrouted events to
    their owner partition, all acknowledged before this returns."""
    from aldebaran.audit.parse import Parser

    topic = ctx.trades_topic
    store = store_for(ctx, shard_id)
    parser = Parser(ctx.limits)
    sink = reroute = None

    def convert(rb):
        values = rb.column("value").to_pylist()
        invalid: list = []
        offsets = rb.column("offset").to_pylist()
        out = parser.parse(values, rb.column("kafka_ts").to_pylist(), invalid, shard_id, offsets)
        if invalid:
            nonlocal sink
            if sink is None:
                if ctx.kafka is None:
                    raise RuntimeError("shard task: invalid rows but no Kafka settings for the DLQ")
                sink = dlq_sink(ctx.kafka)
            keys, times = (rb.column(c).to_pylist() for c in ("key", "kafka_ts"))
            sink.add((keys[i], values[i] if values[i] is not None else b"",
                      dlq_headers(bad.code, bad.reason, topic, shard_id, offsets[i], times[i]))
                     for i, bad in invalid)
        return out

    def rows():
        for rb in batches:
            if len(rb):
                yield from convert(rb)

    out = store.apply(batch_id, rows(), owns=_owns(shard_id, partitions, ctx.partitioner), expire_all=ctx.expire_all)
    if out.misrouted:
        from aldebaran.kafka.io import DlqSink

        reroute = DlqSink(ctx.kafka, topic=topic)
        by_owner: dict[int, list] = {}
        for ev in out.misrouted:
            by_owner.setdefault(owner(ev.order_id, partitions, ctx.partitioner), []).append(
                rerouted_record(ev, topic, shard_id))
        for p, records in sorted(by_owner.items()):
            reroute.add_to(p, records)
    # Every DLQ and rerouted record acknowledged before the task reports the batch done.
    dlq = sink.flush() if sink is not None else 0
    if reroute is not None:
        reroute.flush()
    records = shard_rows(out, shard_id, topic, dlq=dlq, misrouted=len(out.misrouted), parsed_fast=parser.fast,
                         parsed_slow=parser.slow)
    return records
