"""What every shard task shares, whichever plan runs it: its context (pickled to the executors), the rows it
returns to the driver (one Arrow schema for alerts and figures), and the Kafka sinks it writes through
before it returns (DLQ records, and alerts when shards produce them).

The bottom of aldebaran.audit.sparkjob: it imports no other module of the package, so the plans' shard
code (copartitioned, shuffle), the shard hosts and the batch writer all import it and never each other
upward.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from aldebaran.audit.state.store import Config, ShardStore
from aldebaran.runtime.checkpoint import Checkpoint

OUTPUT_SCHEMA = (
    "row_type string, alert_id string, kind string, order_id string, alert_json string, sources string, "
    "shard int, open_books long, opened long, expired long, applied long, duplicates long, dlq long, "
    "state_ms double, loaded string, worker_rss_mib double, misrouted long, parsed_fast long, parsed_slow long, "
    "input_ms double, host_ms double"
)

# A valid event's fields as the JVM parse gives them (the shuffle plan), in aldebaran.model.Event order.
EVENT_FIELDS = ("kind", "event_id", "order_id", "shares", "client", "stock", "event_ts", "partition", "offset")
# An invalid row's fields (null for valid rows, so the shuffle carries no bytes for them).
DLQ_FIELDS = ("key", "value", "reason_code", "reason", "topic", "partition", "offset", "kafka_ts")


@dataclass(frozen=True)
class BatchContext:
    """What every shard task needs; pickled into the mapInArrow closure."""

    state_root: str  # the books: Checkpoint.books
    rule_names: tuple[str, ...]
    ttl_ms: int
    grace_ms: int
    snapshot_every: int
    snapshot_delta_ratio: float = 1.0
    kafka: object = None  # aldebaran.settings.KafkaSettings: where the shard tasks send rejected input
    limits: object = None  # aldebaran.audit.parse.Limits: the parse's limits
    host_idle_seconds: float = 600.0  # a shard host stops after this long without work
    expire_all: bool = False  # the end pass of a bounded run with expire-at-end (sparkjob/endpass.py)
    partitioner: str = "murmur2"  # co-partitioned: who owns an order (aldebaran.audit.partitioning)

    @property
    def trades_topic(self) -> str:
        return self.kafka.trades_topic if self.kafka is not None else ""


def batch_context(settings, kafka) -> BatchContext:
    """The shard tasks' context for an auditor's settings (AuditorSettings) and Kafka settings."""
    from aldebaran.audit.parse import Limits

    return BatchContext(
        state_root=Checkpoint(settings.checkpoint).books,
        rule_names=tuple(settings.rule_names()),
        ttl_ms=int(settings.ttl_seconds * 1000),
        grace_ms=int(settings.idle_grace_seconds * 1000),
        snapshot_every=settings.snapshot_every,
        snapshot_delta_ratio=settings.snapshot_delta_ratio,
        kafka=kafka,
        limits=Limits(settings.max_message_bytes, settings.max_id_length, settings.max_shares),
        host_idle_seconds=settings.shard_host_idle_seconds,
    )


def store_for(ctx: BatchContext, shard_id: int) -> ShardStore:
    """Shard `shard_id`'s books (the store caches them per process: built per task, loaded once)."""
    from aldebaran.audit.rules import resolve

    return ShardStore(Config(ctx.state_root, resolve(list(ctx.rule_names)), ctx.ttl_ms, ctx.grace_ms,
                             ctx.snapshot_every, ctx.snapshot_delta_ratio), shard_id)


def arrow_schema():
    """OUTPUT_SCHEMA as an Arrow schema (the shard tasks' record batches)."""
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "double": pa.float64(),
             "binary": pa.binary()}
    return pa.schema([(name, types[typ]) for name, typ in (c.split() for c in OUTPUT_SCHEMA.split(", "))])


def alert_records(out, shard_id: int, topic: str) -> list[dict]:
    """A shard's alert rows: the alert JSON (the contract) and, apart from it, the value of its
    aldebaran.sources header (its book's trail, aldebaran.audit.provenance; None if the book kept none)."""
    from aldebaran.audit.findings import alert_json
    from aldebaran.audit.provenance import encode

    records = []
    for a, kept in zip(out.alerts, out.trails, strict=True):  # the store keeps them aligned
        sources = encode(topic, kept)
        records.append({"row_type": "alert", "alert_id": a.alert_id, "kind": a.kind, "order_id": a.order_id,
                        "alert_json": alert_json(a), "shard": shard_id,
                        "sources": sources.decode() if sources else None})
    return records


def shard_rows(out, shard_id: int, topic: str, dlq: int = 0, misrouted: int = 0, parsed_fast: int = 0,
               parsed_slow: int = 0) -> list[dict]:
    """A shard's rows for one batch: its alerts, then one row of figures."""
    records = alert_records(out, shard_id, topic)
    records.append({"row_type": "stats", "shard": shard_id, "open_books": out.open_books, "opened": out.opened,
                    "expired": out.expired, "applied": out.applied, "duplicates": out.duplicates, "dlq": dlq,
                    "state_ms": out.state_ms, "loaded": out.loaded, "worker_rss_mib": rss_mib(),
                    "misrouted": misrouted, "parsed_fast": parsed_fast, "parsed_slow": parsed_slow})
    return records


def sources_header(sources: str | None) -> list[tuple[str, bytes]] | None:
    from aldebaran.audit.provenance import HEADER

    return [(HEADER, sources.encode())] if sources else None


# One producer per process and Kafka settings, reused across batches: a shard task runs many times in one
# long-lived process (a shard host, a Python worker), and a producer's start costs more than a batch's sends.
_DLQ_SINKS: dict = {}


def dlq_sink(kafka):
    """This process's DLQ producer for `kafka`, its counts reset for a new task."""
    from aldebaran.kafka.io import DlqSink

    key = kafka.model_dump_json()
    sink = _DLQ_SINKS.get(key)
    if sink is None:
        sink = _DLQ_SINKS[key] = DlqSink(kafka)
    sink.reset()
    return sink


def rss_mib() -> float:
    """This process's resident memory in MiB (Linux /proc; elsewhere its peak, from getrusage)."""
    try:
        with open("/proc/self/statm") as fh:
            return round(int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
