"""The co-partitioned plan: one stage, no shuffle (issue 16; docs/design.md "Plans").

When producers keep the keying contract (aldebaran.audit.partitioning: keyed by order id, any standard
partitioner, the one in use detected and recorded with the books) and the auditor runs one shard per
Kafka partition, shard p's books only ever need partition p's events. So the task that reads a
partition also runs its shard:

    Kafka partition p ─ read ─ mapInArrow: [parse in Python (aldebaran.audit.pyparse) | JVM-parsed rows]
                                           ─ ShardStore(p).apply ─▶ alerts, figures
                                             invalid → trades.dlq, misrouted → trades partition owner(order, partitioner)

The read and the Python step run in one task, so they overlap (Spark feeds Arrow batches to the Python
worker while it reads the next ones), and nothing is written to or read from a shuffle.

- The shard is the rows' Kafka partition, never the task id: Spark skips empty offset ranges, so task ids
  move between batches. A shard whose partition had no rows in a batch still takes that batch's version
  (expiry runs, the delta is written): :func:`idle_shards_function` runs it, from the driver.
- Before an event opens a new book, the shard asks whether it owns the order; an event that does not map
  to this partition is never applied here. It goes back to the trades topic, to its owner partition, as
  a canonical message carrying its event time (``ts``) and where it came from (headers), durable before
  the batch commits. Its owner audits it in a later batch; duplicates of it are deduplicated by event id
  like any other. Counted as ``misrouted`` in the batch figures.
"""

from __future__ import annotations

import itertools
import json

from aldebaran import events
from aldebaran.audit.state.store import Config, ShardStore
from aldebaran.audit.sparkjob.batch import (
    DLQ_FIELDS, EVENT_FIELDS, BatchContext, _arrow_schema, _dlq_sink, _rss_mib, alert_records, dlq_headers,
    shard_alert_sink, sources_header,
)
from aldebaran.audit.partitioning import owner
from aldebaran.audit.model import EventRow

RAW_FIELDS = ("key", "value", "topic", "partition", "offset", "kafka_ts")


def _store(ctx: BatchContext, shard_id: int) -> ShardStore:
    from aldebaran.audit.rules import resolve

    return ShardStore(Config(ctx.state_root, resolve(list(ctx.rule_names)), ctx.ttl_ms, ctx.grace_ms,
                             ctx.snapshot_every, ctx.snapshot_delta_ratio), shard_id)


def _owns(shard_id: int, partitions: int, partitioner: str):
    return lambda order_id: owner(order_id, partitions, partitioner) == shard_id


def rerouted_record(ev: EventRow, topic: str, partition: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """A misrouted event as its owner partition gets it: keyed by its order id, its fields as a canonical
    message (ids as strings, which is how the contract compares them; its event time as ``ts``)."""
    body = {"id": ev.event_id, "#shares": ev.shares, "client": ev.client, "stock": ev.stock, "ts": ev.event_ts}
    if ev.kind == events.PURCHASE:
        body["initial_order_id"] = ev.order_id
    value = json.dumps({k: v for k, v in body.items() if v is not None}, separators=(",", ":")).encode()
    return ev.order_id.encode(), value, [("aldebaran.rerouted.from", f"{topic}/{partition}".encode()),
                                         ("aldebaran.rerouted.offset", str(ev.offset).encode())]


def copartitioned_function(ctx: BatchContext, batch_id: int, partitions: int, parser: str, host: str = "worker"):
    """The mapInArrow body of the co-partitioned plan. `parser`: "python" (rows are raw Kafka columns,
    RAW_FIELDS) or "jvm" (rows are aldebaran.audit.sparkjob.jvmparse output). `host`: where the shard's books live —
    "worker" (this Python worker's memory; Spark hands a shard to any idle worker, so each worker ends up
    with a copy) or "dedicated" (one long-lived process per shard and executor: aldebaran.audit.sparkjob.shardhost)."""

    def run(batches):
        import pyarrow as pa

        batches = iter(batches)
        first = next((rb for rb in batches if len(rb)), None)
        if first is None:  # an empty task (e.g. the tick stream's, its rows filtered out)
            return
        shard_id = first.column("partition")[0].as_py()
        if host == "dedicated":
            from aldebaran.audit.sparkjob.shardhost import call

            records = call(ctx, batch_id, partitions, parser, shard_id, first.schema,
                           itertools.chain([first], batches))
        else:
            records = process(ctx, batch_id, partitions, parser, shard_id, itertools.chain([first], batches))
        yield pa.RecordBatch.from_pylist(records, schema=_arrow_schema())

    return run


def process(ctx: BatchContext, batch_id: int, partitions: int, parser: str, shard_id: int, batches) -> list[dict]:
    """One shard's batch: the Arrow record batches of its Kafka partition in (none: an idle shard), the
    alert and figure rows out. Invalid rows are produced to the DLQ and misrouted events to their owner
    partition, all acknowledged before this returns."""
    topic = ctx.kafka.trades_topic if ctx.kafka is not None else ""
    store = _store(ctx, shard_id)
    sink = reroute = py = None
    figures = {"fast": 0, "slow": 0}

    def reject(bad: list[tuple]) -> None:
        nonlocal sink
        if sink is None:
            if ctx.kafka is None:
                raise RuntimeError("shard task: invalid rows but no Kafka settings for the DLQ")
            sink = _dlq_sink(ctx.kafka)
        sink.add((key, value if value is not None else b"", dlq_headers(code, reason, t, part, offset, ts))
                 for key, value, code, reason, t, part, offset, ts in bad)

    def jvm_rows(rb):
        codes = rb.column("reason_code")
        if codes.null_count < len(codes):
            bad = rb.filter(codes.is_valid())
            reject(list(zip(*[bad.column(c).to_pylist() for c in DLQ_FIELDS])))
            rb = rb.filter(codes.is_null())
        return map(EventRow._make, zip(*[rb.column(c).to_pylist() for c in EVENT_FIELDS]))

    if parser == "python":
        from aldebaran.audit.pyparse import Parser

        py = Parser(ctx.limits)

        def convert(rb):
            values = rb.column("value").to_pylist()
            invalid: list = []
            offsets = rb.column("offset").to_pylist()
            out = py.parse(values, rb.column("kafka_ts").to_pylist(), invalid, shard_id, offsets)
            if invalid:
                keys, times = (rb.column(c).to_pylist() for c in ("key", "kafka_ts"))
                reject([(keys[i], values[i], bad.code, bad.reason, topic, shard_id, offsets[i], times[i])
                        for i, bad in invalid])
            return out
    else:
        convert = jvm_rows

    def rows():
        for rb in batches:
            if len(rb):
                yield from convert(rb)

    out = store.apply(batch_id, rows(), owns=_owns(shard_id, partitions, ctx.partitioner), expire_all=ctx.expire_all)
    if out.misrouted:
        from aldebaran.kafka_io import DlqSink

        reroute = DlqSink(ctx.kafka, topic=topic)
        by_owner: dict[int, list] = {}
        for ev in out.misrouted:
            by_owner.setdefault(owner(ev.order_id, partitions, ctx.partitioner), []).append(rerouted_record(ev, topic, shard_id))
        for p, records in sorted(by_owner.items()):
            reroute.add_to(p, records)
    # Every DLQ and rerouted record acknowledged before the task reports the batch done.
    dlq = sink.flush() if sink is not None else 0
    if reroute is not None:
        reroute.flush()
    if py is not None:
        figures = {"fast": py.fast, "slow": py.slow}
    records = _records(out, shard_id, dlq, len(out.misrouted), figures, topic)
    if ctx.alerts_in_shard and ctx.kafka is not None:
        # The delta is durable (store.apply wrote it): the alerts may leave now, not after the whole batch.
        # A re-executed batch produces them again with the same ids (the topic is at-least-once; delivery
        # deduplicates by alert id). Acknowledged before the task returns.
        alerts = [(r["alert_id"], r["alert_json"], sources_header(r["sources"]))
                  for r in records if r["row_type"] == "alert"]
        if alerts:
            shard_alert_sink(ctx.kafka).send(alerts)
    return records


def idle_shards_function(ctx: BatchContext, batch_id: int, partitions: int, parser: str, host: str = "worker"):
    """RDD mapPartitions body: run each listed shard with no events for `batch_id` (its expiry, its delta),
    so every shard's version follows the batches. Returns the same rows as the shard tasks."""

    def run(shard_ids):
        for shard_id in shard_ids:
            if host == "dedicated":
                import pyarrow as pa

                from aldebaran.audit.sparkjob.shardhost import call

                yield from call(ctx, batch_id, partitions, parser, shard_id, pa.schema([]), iter(()))
            else:
                yield from process(ctx, batch_id, partitions, parser, shard_id, iter(()))

    return run


def _records(out, shard_id: int, dlq: int, misrouted: int, parsed: dict, topic: str) -> list[dict]:
    records = alert_records(out, shard_id, topic)
    records.append({"row_type": "stats", "shard": shard_id, "open_books": out.open_books, "opened": out.opened,
                    "expired": out.expired, "applied": out.applied, "duplicates": out.duplicates, "dlq": dlq,
                    "state_ms": out.state_ms, "loaded": out.loaded, "worker_rss_mib": _rss_mib(),
                    "misrouted": misrouted, "parsed_fast": parsed["fast"], "parsed_slow": parsed["slow"]})
    return records
