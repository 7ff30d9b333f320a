"""The auditor's micro-batch: foreachBatch, keyed by batch_id so every write converges on retry. One Spark job
per batch runs the plan's shard tasks (copartitioned via shardtasks, or shuffle); then, from the driver:

    shard tasks: state deltas, DLQ records (and rerouted events) durable ─▶ alert and figure rows
    alerts ─▶ Kafka `alerts` (key = alert_id; header aldebaran.sources: the trades that built the book,
              aldebaran.audit.provenance) and, beside it, the archive object keyed by batch id
           ─▶ return: Spark commits the batch's offsets

Only alerts and counts come back to the driver: rejected bytes stay in the shard tasks, so a batch of large
garbage messages cannot exceed spark.driver.maxResultSize.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time

from aldebaran.runtime import logs
from aldebaran.audit.sparkjob.copartitioned import RAW_FIELDS
from aldebaran.audit.sparkjob.plans import Plan
from aldebaran.audit.sparkjob.shardtasks import TICK_TOPIC
from aldebaran.audit.sparkjob.rows import OUTPUT_SCHEMA, batch_context, sources_header

log = logging.getLogger(__name__)

# A Spark conf for the batch-cost bench's A/B only (aldebaran_lab.batch_cost, variant ``per-batch-udf``): the
# shard tasks' function built, pickled and filtered per batch, as before it was built once.
PER_BATCH_UDF_CONF = "spark.aldebaran.audit.perBatchUdf"


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
        from aldebaran.kafka.io import AlertSink

        self.settings = settings
        self.plan = plan or Plan("shuffle", settings.shards, partitioner=None)
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
        self._udf = self._udf_ctx = None  # the shard tasks' function, registered once (_shard_tasks)
        self._per_batch_udf: bool | None = None  # PER_BATCH_UDF_CONF, read at the first batch

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
        t0 = time.perf_counter()
        if self.plan.copartitioned:
            from aldebaran.audit.sparkjob.shardtasks import idle_shards_function

            if self.plan.partitioner is None and self.learn is not None:
                self._learn_partitioner()
            out = self._shard_tasks(batch_df, batch_id)
            rows = [r.asDict() for r in out.collect()]
            ran = {r["shard"] for r in rows if r["row_type"] == "stats"}
            idle = sorted(set(range(self.plan.shards)) - ran)
            if idle:  # every shard takes every batch's version (its expiry, its delta): see copartitioned.py
                rdd = batch_df.sparkSession.sparkContext.parallelize(idle, len(idle))
                rows += rdd.mapPartitions(idle_shards_function(self.ctx, batch_id, self.plan.shards)).collect()
        else:
            from aldebaran.audit.sparkjob.shuffle import shard_function, sharded

            out = sharded(_without_ticks(batch_df), self.plan.shards).mapInArrow(
                shard_function(self.ctx, batch_id), OUTPUT_SCHEMA)
            # runs the shard tasks: state deltas and DLQ records are durable after this
            rows = [r.asDict() for r in out.collect()]
        self.emit(batch_id, rows, t0, {"parse_shards": _ms_since(t0)})

    def _shard_tasks(self, batch_df, batch_id: int):
        """The batch's DataFrame through the shard tasks (co-partitioned plan). The task function is built,
        pickled and registered with the JVM once (again only when the context changes), and the batch id
        reaches the tasks as a local property of this thread's jobs (pyspark pins a Python thread to one JVM
        thread); the expiry clock's rows are dropped in the tasks. Per batch that leaves a few py4j calls,
        where building the function, pickling it and filtering the ticks in the plan were a sixth of the
        driver's batch (docs/design.md §5, item 5; the A/B is bench batch-cost's ``per-batch-udf``).
        Uses pyspark's own steps of ``DataFrame.mapInArrow`` with a kept UDF (`_jdf`, `_jc`)."""
        from pyspark.sql import DataFrame

        from aldebaran.audit.sparkjob.shardtasks import BATCH_ID_PROPERTY, shard_tasks_function

        spark = batch_df.sparkSession
        if self._per_batch_udf is None:  # read once: a conf lookup is a py4j call
            self._per_batch_udf = spark.conf.get(PER_BATCH_UDF_CONF, "false") == "true"
        if self._per_batch_udf:
            return _without_ticks(batch_df).mapInArrow(
                shard_tasks_function(self.ctx, batch_id, self.plan.shards), OUTPUT_SCHEMA)
        if self._udf is None or self._udf_ctx is not self.ctx:
            from pyspark.sql.pandas.functions import pandas_udf
            from pyspark.util import PythonEvalType

            self._udf = pandas_udf(shard_tasks_function(self.ctx, None, self.plan.shards), returnType=OUTPUT_SCHEMA,
                                   functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
            self._udf_ctx = self.ctx
        spark.sparkContext.setLocalProperty(BATCH_ID_PROPERTY, str(batch_id))
        column = self._udf(*[batch_df[c] for c in RAW_FIELDS])
        return DataFrame(batch_df._jdf.mapInArrow(column._jc, False, None), spark)

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
        if alerts:
            # The alerts are already on the driver: produce them from here (idempotent producer, flushed)
            # rather than recompute the shard tasks for a Spark write. The archive PUT runs beside the
            # produce (both wait on the network, and would add up in series); the batch returns, and Spark
            # commits, only after both succeeded.
            archived = None
            if self.archive is not None:
                archived = self._archiver().submit(self._archive_write, batch_id, [r.alert_json for r in alerts])
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
            "partitioner": self.plan.partitioner if self.plan.copartitioned else None,
            "parser": self.plan.parser,
            # Messages the Python parser's fast path decided; the rest went to the reference validator.
            "parsed_fast": sum(s.parsed_fast or 0 for s in stats),
            "parsed_slow": sum(s.parsed_slow or 0 for s in stats),
            "state_ms_max": max((s.state_ms for s in stats), default=0.0),
            # A shard task's two halves (co-partitioned plan): its input (the Kafka read and the JVM → Python
            # transfer) and the host's round trip; the rest of parse_shards is the Spark job's own cost.
            "task_input_ms_max": max((s.input_ms or 0.0 for s in stats), default=0.0),
            "task_host_ms_max": max((s.host_ms or 0.0 for s in stats), default=0.0),
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
        log.log(batch_log_level(self.last), "batch %d: %s", batch_id, json.dumps(self.last),
                extra=logs.fields(batch_id=batch_id, batch=self.last))
        if self.on_batch:
            self.on_batch(self.last)


# A batch in which none of these happened is empty: a processing-time auditor on a quiet topic runs one
# every trigger interval (70 INFO lines for 4 events), so those are logged at DEBUG. The heartbeat still
# reports every batch.
ACTIVITY_FIGURES = ("alerts", "dlq", "opened", "expired", "applied", "duplicates", "misrouted")


def _without_ticks(batch_df):
    """The batch without the expiry clock's rows, filtered in the plan (the shuffle plan; the kept shard-task
    function drops them in the task instead)."""
    return batch_df.where(f"topic != '{TICK_TOPIC}'")


def batch_log_level(figures: dict) -> int:
    """INFO for a batch that did something, DEBUG for an empty one."""
    return logging.INFO if any(figures.get(k) for k in ACTIVITY_FIGURES) else logging.DEBUG


def _ms_since(t: float) -> float:
    return round((time.perf_counter() - t) * 1000, 1)


def _count(items) -> dict:
    out: dict = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out
