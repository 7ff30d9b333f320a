"""The auditor's micro-batch: one read of Kafka, one parse in the JVM, then per batch
(foreachBatch, keyed by batch_id so every write converges on retry), one Spark job:

    parsed ─ repartition(shards, order_id) ─ mapInArrow: ShardStore.apply(valid) ─▶ alerts
                                                         (state delta durable first)
                                             invalid rows passed through ─────────▶ DLQ records
    alerts ─▶ Kafka `alerts` (key = alert_id; header aldebaran.sources: the trades that built the book,
              aldebaran.audit.provenance) and, beside it, the archive object keyed by batch id
           ─▶ trades.dlq (original bytes + reason headers) ─▶ Spark commits

Python runs once per shard per batch (never per row in the JVM plan); parsing, routing and the
shuffle by key stay in the JVM. Invalid rows ride along with the valid ones (all in the shard of the
null key, bytes only for them) and that shard's task produces them to the DLQ itself, as they stream
past, and flushes before it returns: the batch is read and parsed once, with no cached copy and no
second job to count and write the DLQ (that was ~1/4 of a 200k-event batch), and rejected bytes never
travel to the driver (a batch of large garbage messages cannot exceed spark.driver.maxResultSize).
Only the counts come back with the alerts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass

from aldebaran.audit.state.store import Config, ShardStore
from aldebaran.audit.model import EventRow

log = logging.getLogger(__name__)

TICK_TOPIC = "__aldebaran_tick__"

OUTPUT_SCHEMA = (
    "row_type string, alert_id string, kind string, order_id string, alert_json string, sources string, "
    "shard int, open_books long, opened long, expired long, applied long, duplicates long, dlq long, "
    "state_ms double, loaded string, worker_rss_mib double, misrouted long, parsed_fast long, parsed_slow long"
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
    kafka: object = None  # aldebaran.settings.KafkaSettings: where the shard tasks send rejected input
    limits: object = None  # aldebaran.audit.sparkjob.jvmparse.Limits: for the Python parser (co-partitioned plan)
    host_idle_seconds: float = 600.0  # a dedicated shard host stops after this long without work
    expire_all: bool = False  # the end pass of a bounded run with expire-at-end (sparkjob/endpass.py)
    partitioner: str = "murmur2"  # co-partitioned: who owns an order (aldebaran.audit.partitioning)
    # co-partitioned: each shard task produces its alerts once its delta is durable (ALDEBARAN_AUDIT_ALERTS_FROM)
    alerts_in_shard: bool = False


def batch_context(settings, kafka) -> BatchContext:
    """The shard tasks' context for an auditor's settings (AuditorSettings) and Kafka settings."""
    from aldebaran.audit.sparkjob.jvmparse import Limits

    return BatchContext(
        state_root=settings.checkpoint.rstrip("/") + "/books",
        rule_names=tuple(settings.rule_names()),
        ttl_ms=int(settings.ttl_seconds * 1000),
        grace_ms=int(settings.idle_grace_seconds * 1000),
        snapshot_every=settings.snapshot_every,
        snapshot_delta_ratio=settings.snapshot_delta_ratio,
        kafka=kafka,
        limits=Limits(settings.max_message_bytes, settings.max_id_length, settings.max_shares),
        host_idle_seconds=settings.shard_host_idle_seconds,
        alerts_in_shard=settings.alerts_from == "shard",
    )


_DLQ_SINKS: dict = {}  # one DLQ producer per Python worker and Kafka settings, reused across batches
_ALERT_SINKS: dict = {}  # the same for the shard tasks' alerts (alerts_in_shard)


def shard_alert_sink(kafka):
    from aldebaran.kafka_io import AlertSink

    key = kafka.model_dump_json()
    sink = _ALERT_SINKS.get(key)
    if sink is None:
        sink = _ALERT_SINKS[key] = AlertSink(kafka)
    return sink


def _dlq_sink(kafka):
    from aldebaran.kafka_io import DlqSink

    key = kafka.model_dump_json()
    sink = _DLQ_SINKS.get(key)
    if sink is None:
        sink = _DLQ_SINKS[key] = DlqSink(kafka)
    sink.reset()
    return sink


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

        sink = None

        def reject(bad) -> None:
            # Invalid rows (already in source order within this shard): straight to the producer.
            nonlocal sink
            if sink is None:
                if ctx.kafka is None:
                    raise RuntimeError("shard task: invalid rows but no Kafka settings for the DLQ")
                sink = _dlq_sink(ctx.kafka)
            sink.add((key, value if value is not None else b"", dlq_headers(code, reason, topic, part, offset, ts))
                     for key, value, code, reason, topic, part, offset, ts in zip(
                         *[bad.column(c).to_pylist() for c in DLQ_FIELDS]))

        def rows():
            for rb in batches:
                codes = rb.column("reason_code")
                if codes.null_count < len(codes):  # invalid rows in this Arrow batch
                    reject(rb.filter(codes.is_valid()))
                    rb = rb.filter(codes.is_null())
                yield from map(EventRow._make, zip(*[rb.column(c).to_pylist() for c in EVENT_FIELDS]))

        out = store.apply(batch_id, rows(), expire_all=ctx.expire_all)
        # Every DLQ record acknowledged before the task reports the batch done (and Spark commits it).
        dlq = sink.flush() if sink is not None else 0
        records = alert_records(out, shard_id, ctx.kafka.trades_topic if ctx.kafka is not None else "")
        records.append({"row_type": "stats", "shard": shard_id, "open_books": out.open_books, "opened": out.opened,
                        "expired": out.expired, "applied": out.applied, "duplicates": out.duplicates,
                        "dlq": dlq, "state_ms": out.state_ms, "loaded": out.loaded,
                        "worker_rss_mib": _rss_mib()})
        yield pa.RecordBatch.from_pylist(records, schema=_arrow_schema())

    return run


EVENT_FIELDS = ("kind", "event_id", "order_id", "shares", "client", "stock", "event_ts", "partition", "offset")


def alert_records(out, shard_id: int, topic: str) -> list[dict]:
    """A shard's alert rows: the alert JSON (the contract) and, apart from it, the value of its
    aldebaran.sources header (its book's trail, aldebaran.audit.provenance; None if the book kept none)."""
    from aldebaran.audit.provenance import encode

    records = []
    for a, kept in zip(out.alerts, out.trails, strict=True):  # the store keeps them aligned
        sources = encode(topic, kept)
        records.append({"row_type": "alert", "alert_id": a["alert_id"], "kind": a["kind"], "order_id": a["order_id"],
                        "alert_json": json.dumps(a, separators=(",", ":")), "shard": shard_id,
                        "sources": sources.decode() if sources else None})
    return records


# An invalid row's fields (null for valid rows, so the shuffle carries no bytes for them).
DLQ_FIELDS = ("key", "value", "reason_code", "reason", "topic", "partition", "offset", "kafka_ts")


def _arrow_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "double": pa.float64(),
             "binary": pa.binary()}
    return pa.schema([(name, types[typ]) for name, typ in (c.split() for c in OUTPUT_SCHEMA.split(", "))])


def dlq_headers(reason_code: str, reason: str, topic: str, partition: int, offset: int,
                kafka_ts: int) -> list[tuple[str, bytes]]:
    """The DLQ record's headers for an invalid row: its reason and where it came from."""
    return [
        ("aldebaran.reason_code", reason_code.encode()),
        ("aldebaran.reason", reason.encode()),
        ("aldebaran.source.topic", topic.encode()),
        ("aldebaran.source.partition", str(partition).encode()),
        ("aldebaran.source.offset", str(offset).encode()),
        ("aldebaran.source.timestamp", str(kafka_ts).encode()),
    ]


@dataclass(frozen=True)
class Plan:
    """How a batch reaches the books: `shuffle` (JVM parse, repartition by order id into `shards`) or
    `copartitioned` (one shard per Kafka partition, no shuffle; aldebaran.audit.sparkjob.copartitioned), with `parser`
    "jvm" or "python" (the latter only co-partitioned). aldebaran.audit.sparkjob.plans decides it at start."""

    name: str
    shards: int
    parser: str = "jvm"
    host: str = "worker"  # co-partitioned: "dedicated" (aldebaran.audit.sparkjob.shardhost) or "worker"
    # co-partitioned: the producers' partitioner (aldebaran.audit.partitioning); None until the topic's
    # first events show it (a plan decided on an empty topic).
    partitioner: str | None = "murmur2"


class _Row:
    """A result row as attributes (the shard tasks' rows and the idle shards' dicts alike)."""

    __slots__ = ("_d",)

    def __init__(self, d: dict) -> None:
        self._d = d

    def __getattr__(self, name: str):
        return self._d.get(name)


class BatchWriter:
    """foreachBatch sink. Order per batch: state deltas and DLQ records (in the shard tasks) → alerts to
    Kafka and the archive object, side by side → return (Spark then commits the batch's offsets)."""

    def __init__(self, settings, kafka, archive, on_batch=None, plan=None, learn=None) -> None:
        from aldebaran.kafka_io import AlertSink

        self.settings = settings
        self.plan = plan or Plan("shuffle", settings.shards, "jvm")
        self.kafka = kafka
        self.alert_sink = AlertSink(kafka)
        self.archive = archive  # aldebaran.audit.archive.Archive | None
        self.on_batch = on_batch
        self.ctx = batch_context(settings, kafka)
        self.learn = learn  # plan → plan with its partitioner, or None (plans.learn_partitioner)
        if self.plan.partitioner is not None:
            self.ctx = dataclasses.replace(self.ctx, partitioner=self.plan.partitioner)
        self.last: dict = {}
        self.recent: dict[int, dict] = {}  # batch id → figures, for the heartbeat listener
        self._archive_pool = None  # one thread: the archive PUT overlaps the alerts produce

    def _archiver(self):
        if self._archive_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._archive_pool = ThreadPoolExecutor(1, thread_name_prefix="aldebaran-archive")
        return self._archive_pool

    def _archive_write(self, batch_id: int, lines: list[str]) -> float:
        t = time.perf_counter()
        self.archive.write(batch_id, lines)
        return _ms_since(t)

    def __call__(self, batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        real = batch_df.where(F.col("topic") != F.lit(TICK_TOPIC))
        if self.plan.name == "copartitioned":
            from aldebaran.audit.sparkjob.copartitioned import copartitioned_function, idle_shards_function

            if self.plan.partitioner is None and self.learn is not None:
                self._learn_partitioner()

            out = real.mapInArrow(copartitioned_function(self.ctx, batch_id, self.plan.shards, self.plan.parser,
                                                         self.plan.host), OUTPUT_SCHEMA)
            rows = [r.asDict() for r in out.collect()]
            ran = {r["shard"] for r in rows if r["row_type"] == "stats"}
            idle = sorted(set(range(self.plan.shards)) - ran)
            if idle:  # every shard takes every batch's version (its expiry, its delta): see copart.py
                rdd = real.sparkSession.sparkContext.parallelize(idle, len(idle))
                rows += rdd.mapPartitions(idle_shards_function(
                    self.ctx, batch_id, self.plan.shards, self.plan.parser, self.plan.host)).collect()
        else:
            invalid = F.col("reason_code").isNotNull()
            rows_in = real.select(*EVENT_FIELDS, "reason_code",
                                  *[F.when(invalid, F.col(c)).alias(c) for c in DLQ_FIELDS if c not in
                                    ("reason_code", "partition", "offset")])
            sharded = rows_in.repartition(self.plan.shards, "order_id").sortWithinPartitions("partition", "offset")
            out = sharded.mapInArrow(shard_function(self.ctx, batch_id), OUTPUT_SCHEMA)
            # runs the shard tasks: state deltas and DLQ records are durable after this
            rows = [r.asDict() for r in out.collect()]
        self.emit(batch_id, rows, t0, {"parse_shards": _ms_since(t0)})

    def _learn_partitioner(self) -> None:
        """A plan decided on an empty topic: once events are there (this batch's are), detect the producers'
        partitioner from them and record it with the books before any book opens."""
        found = self.learn(self.kafka, self.plan, self.ctx.state_root)
        if found is not None:
            self.plan = found
            self.ctx = dataclasses.replace(self.ctx, partitioner=found.partitioner)

    def emit(self, batch_id: int, rows: list[dict], t0: float, steps: dict) -> None:
        """The shard tasks' rows of a batch (state deltas already durable) → alerts to Kafka and the archive
        object, side by side → the batch's figures (log, heartbeat, `on_batch`)."""
        alerts = [_Row(r) for r in rows if r["row_type"] == "alert"]
        stats = [_Row(r) for r in rows if r["row_type"] == "stats"]
        # Co-partitioned with alerts_in_shard: each shard task produced its alerts already, as soon as its
        # delta was durable (the alert did not wait for the other shards, the collect and this driver).
        produced = self.plan.name == "copartitioned" and self.ctx.alerts_in_shard and self.ctx.kafka is not None
        if alerts:
            # The alerts are already on the driver: produce them from here (idempotent producer, flushed)
            # rather than recompute the shard tasks for a Spark write. The archive PUT runs beside the
            # produce (both wait on the network, and would add up in series); the batch returns, and Spark
            # commits, only after both succeeded.
            archived = None
            if self.archive is not None:
                archived = self._archiver().submit(self._archive_write, batch_id, [r.alert_json for r in alerts])
            if not produced:
                t = time.perf_counter()
                self.alert_sink.send([(r.alert_id, r.alert_json, sources_header(r.sources)) for r in alerts])
                steps["alerts"] = _ms_since(t)
            if archived is not None:
                steps["archive"] = archived.result()  # re-raises a failed PUT: the batch fails, not commits
        dlq_count = sum(s.dlq for s in stats)
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
            # Events of orders another partition owns (co-partitioned plan): produced to their owner.
            "misrouted": sum(s.misrouted or 0 for s in stats),
            "plan": self.plan.name,
            "partitioner": self.plan.partitioner if self.plan.name == "copartitioned" else None,
            "parser": self.plan.parser,
            # Messages the Python parser's fast path decided; the rest went to the reference validator.
            "parsed_fast": sum(s.parsed_fast or 0 for s in stats),
            "parsed_slow": sum(s.parsed_slow or 0 for s in stats),
            "state_ms_max": max((s.state_ms for s in stats), default=0.0),
            # How each shard task found its books: in its Python worker's cache, caught up there from
            # the deltas another worker wrote, or loaded cold (snapshot + deltas).
            "shard_loads": _count(s.loaded for s in stats),
            # The largest resident memory of a Python worker that ran a shard task (it holds the books).
            "worker_rss_mib_max": max((s.worker_rss_mib for s in stats), default=0.0),
            "batch_ms": (time.perf_counter() - t0) * 1000,
            # Where the batch's time went inside foreachBatch (ms): the Spark job that parses, shuffles
            # and runs the shard tasks (incl. producing the DLQ records); producing the alerts; the archive PUT
            # (which overlaps the produce, so the two do not add up to the batch's time).
            "steps_ms": steps,
        }
        self.recent[batch_id] = self.last
        for old in [b for b in self.recent if b < batch_id - 20]:
            del self.recent[old]
        # The producer keying contract over the recent batches (platform health warns when it is high).
        seen = sum(f["applied"] + f["duplicates"] + f["misrouted"] for f in self.recent.values())
        self.last["misrouted_share_recent"] = (
            round(sum(f["misrouted"] for f in self.recent.values()) / seen, 4) if seen else None)
        log.log(batch_log_level(self.last), "batch %d: %s", batch_id, json.dumps(self.last))
        if self.on_batch:
            self.on_batch(self.last)


# A batch in which none of these happened is empty: a processing-time auditor on a quiet topic runs one
# every trigger interval (70 INFO lines for 4 events), so those are logged at DEBUG. The heartbeat still
# reports every batch.
ACTIVITY_FIGURES = ("alerts", "dlq", "opened", "expired", "applied", "duplicates", "misrouted")


def batch_log_level(figures: dict) -> int:
    """INFO for a batch that did something, DEBUG for an empty one."""
    return logging.INFO if any(figures.get(k) for k in ACTIVITY_FIGURES) else logging.DEBUG


def sources_header(sources: str | None) -> list[tuple[str, bytes]] | None:
    from aldebaran.audit.provenance import HEADER

    return [(HEADER, sources.encode())] if sources else None


def _rss_mib() -> float:
    """This process's resident memory in MiB (Linux /proc; elsewhere its peak, from getrusage)."""
    try:
        with open("/proc/self/statm") as fh:
            return round(int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _ms_since(t: float) -> float:
    return round((time.perf_counter() - t) * 1000, 1)


def _count(items) -> dict:
    out: dict = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out
