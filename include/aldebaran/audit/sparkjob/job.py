"""Build and run the streaming auditor query (spark_apps/auditor.py and `aldebaran auditor run`)."""

from __future__ import annotations

import json
import logging
import time

from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob.batch import BatchWriter
from aldebaran.audit.sparkjob.shardtasks import TICK_TOPIC
from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.exceptions import AuditorError
from aldebaran.settings import KafkaSettings, load

log = logging.getLogger(__name__)


def kafka_source(spark, settings: AuditorSettings, kafka: KafkaSettings):
    from aldebaran.kafka.conn import spark_kafka_options

    reader = (
        spark.readStream.format("kafka")
        # Failover options, then brokers, TLS, SASL: the platform's Kafka connection.
        .options(**spark_kafka_options(spark, kafka, "source"))
        .option("subscribe", kafka.trades_topic)
        .option("startingOffsets", settings.starting_offsets)
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
        .option("kafka.fetch.max.bytes", str(max(52428800, kafka.max_message_bytes)))
        .option("kafka.max.partition.fetch.bytes", str(kafka.max_message_bytes))
    )
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    return bounded(reader.load(), settings.ending_offsets, kafka.trades_topic)


def bounded(source, ending_offsets: str | None, topic: str):
    """Streaming Kafka reads have no endingOffsets: a bounded replay keeps the rows before the end
    instead (Spark's JSON form ``{"<topic>": {"<partition>": <offset>}}``, -1 = no bound; a partition
    not listed is not read)."""
    if not ending_offsets or ending_offsets.strip() == "latest":
        return source
    from pyspark.sql import functions as F

    try:
        ends = {int(p): int(o) for p, o in json.loads(ending_offsets)[topic].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AuditorError(
            f"ALDEBARAN_AUDIT_ENDING_OFFSETS: expected 'latest' or {{\"{topic}\": {{\"<partition>\": <offset>}}}}, "
            f"got {ending_offsets!r} ({exc})"
        ) from None
    keep = F.lit(False)
    for partition, end in sorted(ends.items()):
        here = F.col("partition") == F.lit(partition)
        keep = keep | (here if end < 0 else here & (F.col("offset") < F.lit(end)))
    return source.where(keep)


def tick_source(spark, parsed_columns: list[str], period_s: float):
    """One row per expiry period (aldebaran.audit.sparkjob.ticks), shaped like parsed trades, on a topic no
    trade uses: an idle topic still runs a batch, and so expires books, once per period."""
    from pyspark.sql import functions as F

    from aldebaran.audit.sparkjob.ticks import tick_stream

    ticks = tick_stream(spark, period_s)
    typed = {
        "key": "binary", "value": "binary", "topic": "string", "partition": "int", "offset": "long",
        "kafka_ts": "long", "reason_code": "string", "reason": "string", "kind": "string", "event_id": "string",
        "order_id": "string", "shares": "long", "client": "string", "stock": "string", "event_ts": "long",
        "fast_path": "boolean",
    }
    cols = []
    for c in parsed_columns:
        if c == "topic":
            cols.append(F.lit(TICK_TOPIC).alias("topic"))
        elif c == "kafka_ts":
            cols.append((F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("kafka_ts"))
        else:
            cols.append(F.lit(None).cast(typed[c]).alias(c))
    return ticks.select(*cols)


def build_query(spark, settings: AuditorSettings, on_batch=None, guard=None, kafka: KafkaSettings | None = None):
    """The auditor's streaming query, started: (query, writer, heartbeat)."""
    return start_query(spark, *prepare_query(spark, settings, on_batch, guard, kafka))


def prepare_query(spark, settings: AuditorSettings, on_batch=None, guard=None, kafka: KafkaSettings | None = None):
    """Everything of the query but its start (a standby does this before it holds the lease):
    (DataStreamWriter, BatchWriter, heartbeat poller)."""
    from aldebaran.audit.sparkjob import plans
    from aldebaran.audit.archive import Archive
    from aldebaran.audit.rules import resolve
    from aldebaran.storage.store import open_store

    resolve(settings.rule_names())  # fail at start on an unknown rule, naming the setting
    from aldebaran.audit.sparkjob.endpass import refuse_if_finished

    checkpoint = Checkpoint(settings.checkpoint)
    refuse_if_finished(checkpoint)
    kafka = kafka or load(KafkaSettings)
    plan = plans.decide(settings, kafka, checkpoint.books)
    source = kafka_source(spark, settings, kafka)
    if plan.copartitioned:  # the shard hosts parse (aldebaran.audit.parse.Parser): the raw columns only
        from pyspark.sql import functions as F

        from aldebaran.audit.sparkjob.copartitioned import RAW_FIELDS

        parsed = source.select(*RAW_FIELDS[:-1],
                               (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("kafka_ts"))
    else:
        from aldebaran.audit.sparkjob.jvmparse import Limits, parse_events

        parsed = parse_events(source, Limits(settings.max_message_bytes, settings.max_id_length, settings.max_shares))
    # Read when the query starts: how long an idle trigger loop sleeps before it asks the sources again.
    spark.conf.set("spark.sql.streaming.pollingDelay", f"{settings.idle_poll_ms}ms")
    if settings.idle_ticks and settings.trigger == "processing-time":
        parsed = parsed.unionByName(tick_source(spark, parsed.columns, settings.expiry_period_seconds))

    store = open_store()
    archive = Archive(store, settings.archive_prefix, settings.query_name)
    writer = BatchWriter(settings, kafka, archive, on_batch=on_batch, plan=plan, learn=plans.learn_partitioner)
    from aldebaran.audit.sparkjob.heartbeat_poller import HeartbeatPoller

    heartbeat = HeartbeatPoller(store, settings.query_name, lambda batch_id: writer.recent.get(batch_id))
    stream = (
        parsed.writeStream.queryName(settings.query_name)
        .option("checkpointLocation", checkpoint.spark)
        .foreachBatch(writer if guard is None else _guarded(writer, guard))
    )
    if settings.trigger == "available-now":
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=settings.trigger_interval)
    return stream, writer, heartbeat


def start_query(spark, stream, writer, heartbeat):
    query = stream.start()
    return query, writer, heartbeat.attach(query)


def _guarded(writer, guard):
    """foreachBatch that calls `guard()` first: no batch is written once the lease is not ours."""

    def batch(batch_df, batch_id: int) -> None:
        guard()
        writer(batch_df, batch_id)

    return batch


def run(settings: AuditorSettings, spark=None, on_batch=None, kafka: KafkaSettings | None = None) -> dict:
    """Run the auditor until it stops (available-now), the timeout passes, or it is interrupted.

    `kafka` (default: from the environment) names the cluster and topics; the CLI's topic flags set it."""
    from aldebaran.runtime import metrics
    from aldebaran.runtime import spark as sparkmod

    spark = spark or sparkmod.session(
        f"aldebaran-{settings.query_name}", master=settings.master, s3a=settings.uses_s3a(),
        shuffle_partitions=settings.shards, conf=metrics.spark_conf(),  # Spark's own PrometheusServlet, if asked
    )
    metrics.serve("auditor", settings.query_name)  # this driver's /metrics (before any heartbeat names it)
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # shard id = shuffle partition id
    lease = prepared = None
    if settings.lease_seconds:  # never two auditors on one checkpoint (aldebaran.runtime.lease)
        from aldebaran.storage.store import open_store
        from aldebaran.runtime.lease import acquire

        store = open_store()
        if settings.standby:
            from aldebaran.audit.sparkjob.plans import read_recorded
            from aldebaran.audit.sparkjob.standby import wait_for_lease

            held = []
            if read_recorded(Checkpoint(settings.checkpoint).books) is not None:
                # The active recorded its plan: build all of the query but its start while waiting.
                prepared = prepare_query(spark, settings, on_batch, guard=lambda: held[0].check(), kafka=kafka)
            try:
                lease = wait_for_lease(spark, settings, kafka or load(KafkaSettings), store)
            except KeyboardInterrupt:
                # A clean stop of a standby that never took over: nothing ran, nothing to detach.
                log.info("standby %s stopped while waiting for the lease", settings.query_name)
                return {}
            held.append(lease)
        else:
            lease = acquire(store, settings.checkpoint, settings.query_name, settings.lease_seconds,
                            wait_seconds=settings.lease_wait_seconds)
    t_start = time.monotonic()
    try:
        if prepared is not None:
            query, writer, heartbeat = start_query(spark, *prepared)
        else:
            query, writer, heartbeat = build_query(spark, settings, on_batch=on_batch,
                                                  guard=lease.check if lease else None, kafka=kafka)
    except BaseException:
        if lease:
            lease.release()
        raise
    keeper = lease.keep(alive=lambda: _active(query), on_lost=lambda _why: query.stop()) if lease else None
    watch = None
    if lease and not spark.sparkContext.master.startswith("local"):  # executors apart from the driver
        from aldebaran.audit.sparkjob import handover

        watch = handover.ExecutorWatch(lambda: handover.executors(spark),
                                       lambda: handover.standby_waiting(store, settings.checkpoint), query.stop)
        watch.start()
    log.info("auditor %s started in %.1fs (checkpoint %s, rules %s)", settings.query_name,
             time.monotonic() - t_start, settings.checkpoint, settings.rules)
    t0 = time.monotonic()
    interrupted = True  # until awaitTermination returns
    try:
        if settings.timeout_seconds:
            query.awaitTermination(settings.timeout_seconds)
        else:
            query.awaitTermination()
        interrupted = False
    except KeyboardInterrupt:
        log.info("auditor interrupted; stopping")
    finally:
        try:
            exc = query.exception()
            drained = not interrupted and exc is None and not query.isActive  # available-now ran to its end
            query.stop()
            heartbeat.stop(error=str(exc) if exc is not None else None)
            if settings.expire_at_end and drained and not (lease and lease.lost):
                from aldebaran.audit.sparkjob.endpass import expire_at_end

                # The query's keeper stopped renewing with the query: renew now (LeaseLost if another
                # auditor took the checkpoint) and keep renewing through the pass.
                pass_keeper = None
                if lease:
                    lease.renew()
                    pass_keeper = lease.keep(alive=lambda: True, on_lost=lambda why: log.error("%s", why))
                try:
                    expire_at_end(spark, writer, settings.query_name)
                finally:
                    if pass_keeper:
                        pass_keeper.stop()
            if not (watch and watch.yielded):  # no executor left to run the stop job on
                _stop_shard_hosts(spark, writer)
        finally:
            if watch:
                watch.stop()
            if keeper:
                keeper.stop()
                lease.release()
    if lease and lease.lost:
        raise AuditorError(f"auditor {settings.query_name} stopped: {lease.lost}")
    if watch and watch.yielded:
        raise AuditorError(f"auditor {settings.query_name} lost its executors and {handover.YIELDED}")
    if exc is not None:
        raise AuditorError(f"auditor query {settings.query_name} failed: {exc}")
    log.info("auditor %s stopped after %.1fs", settings.query_name, time.monotonic() - t0)
    return writer.last


def _stop_shard_hosts(spark, writer) -> None:
    """Best effort: the co-partitioned plan's shard hosts (aldebaran.audit.sparkjob.shardhost) end with the
    query, not only when idle. A host this misses (another executor) stops when idle or when its executor is gone."""
    plan = writer.plan
    if not plan.copartitioned:
        return
    from py4j.protocol import Py4JError

    from aldebaran.audit.sparkjob.shardtasks import stop_function

    try:
        spark.sparkContext.parallelize(range(plan.shards), plan.shards).foreachPartition(
            stop_function(writer.ctx.state_root))
    except (Py4JError, ConnectionError, OSError) as exc:
        log.info("shard hosts not stopped (%s): they stop when idle", exc)


def _active(query) -> bool:
    """Is the query still running? False too when its JVM is gone (py4j cannot reach it)."""
    from py4j.protocol import Py4JError

    try:
        return bool(query.isActive)
    except (Py4JError, ConnectionError, OSError):
        return False


def print_status(settings: AuditorSettings) -> None:
    """`aldebaran auditor status`: the latest heartbeat and its age."""
    from aldebaran.runtime.heartbeat import AUDITOR, key, read
    from aldebaran.storage.store import open_store

    store = open_store()
    hb = read(store, AUDITOR, settings.query_name)
    if hb is None:
        print(f"no heartbeat at {store.uri(key(AUDITOR, settings.query_name))}: the auditor has not run yet")
        return
    age = time.time() - hb["updated_at_ms"] / 1000
    books = hb.get("books") or {}
    print(f"auditor {hb.get('query')}: {hb.get('status')} — last heartbeat {age:.1f}s ago "
          f"(host {hb.get('host')}, pid {hb.get('pid')})")
    rows = [
        ("batch", hb.get("batch_id")), ("input rows", hb.get("input_rows")),
        ("input rows/s", hb.get("input_rows_per_second")), ("processed rows/s", hb.get("processed_rows_per_second")),
        ("batch duration ms", hb.get("batch_duration_ms")), ("open books", books.get("open_books")),
        ("alerts (batch)", books.get("alerts")), ("dlq (batch)", books.get("dlq")),
        ("expired (batch)", books.get("expired")), ("duplicates (batch)", books.get("duplicates")),
    ]
    for name, value in rows:
        if value is not None:
            print(f"  {name:<20} {value if not isinstance(value, float) else round(value, 1)}")
    if hb.get("error"):
        print(f"  error: {hb['error'][:500]}")
