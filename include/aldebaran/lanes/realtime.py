"""The low-latency lane: OVERFILL alerts from Spark's real-time mode, next to the exact lane.

Pure DataFrame → DataFrame transforms of Spark built-in operators (real-time mode runs no Python UDFs),
apart from :func:`start`, which wires the Kafka source and sink. Spark ≥ 4.3 only: 4.1/4.2 run
real-time mode for stateless queries, 4.3 adds ``dropDuplicates`` and streaming aggregation over a
pipelined shuffle (Spark's docs/streaming/real-time-mode.md). PySpark's ``transformWithState`` is a Python
operator, which real-time mode does not run; per-key timers (expiry, ORPHAN) would take a JVM one.

The plan, per trade message:

1. parse and validate with the exact lane's JVM parse (:mod:`aldebaran.audit.sparkjob.jvmparse`: column
   expressions only); invalid messages are dropped here, the exact lane owns the DLQ;
2. ``dropDuplicates(order_id, event_id)``: an event id seen twice in a book counts once; a request's id
   is its order id, so a second request is such a duplicate and the first wins, as in the model;
3. ``groupBy(order_id).agg(...)``: the book — requested, purchased, purchase count, the last event;
4. keep the update that *crosses*: the request is known, purchased > requested, and either the last
   event was the request (purchases came first) or purchased − its shares ≤ requested (this purchase
   crossed). Later updates of an overfilled book are not over the line any more, so an order alerts
   once without a second stateful operator — as long as the aggregation emits one update per event,
   which real-time mode does. Micro-batches coalesce an order's events within a batch into one update
   and so hide crossings inside a batch (measured in docs/design.md, "The low-latency lane").

Kept exactly: validation, dedupe by event id within a book, first request wins, purchase before
request, the alert's id (:func:`aldebaran.audit.findings.alert_id`, computed here as the same SHA-256 in
the JVM) so the ledger collapses both lanes' copies. Left to the exact lane: book expiry and ORPHAN
(real-time mode has no per-key timers outside transformWithState), MISMATCH, the DLQ and the archive.
The lane's state is not expired either: ``dropDuplicatesWithinWatermark`` is not accepted in real-time
mode, so its state grows with the orders it has seen (docs/design.md, "The low-latency lane").
"""

from __future__ import annotations

from aldebaran.audit import parse as events
from aldebaran.audit.sparkjob import jvmparse

LANE = "realtime"
KIND = "OVERFILL"
#: Real-time mode's trigger duration is its checkpoint interval, not a latency bound (5 s minimum). Each
#: boundary stops the long-running tasks, commits and starts the next batch, a stall of seconds on a busy
#: machine (docs/design.md). Spark's default, 5 minutes: a restart re-reads at most that much, and the
#: replayed alerts keep their ids (the ledger drops repeats).
DEFAULT_CHECKPOINT_INTERVAL = "5 minutes"


def books(valid_events, dedupe: bool = True):
    """Valid events (jvmparse columns, plus ``seq``: the event's position in its partition) → one row per
    order update: requested, purchased, purchase_count, and the last event's id, time, kind and shares.
    ``dedupe=False`` leaves out the first stateful operator: wrong when an event arrives twice, it exists
    for the benchmark that measures what the second operator costs (docs/design.md, lane tuning)."""
    from pyspark.sql import functions as F

    is_request = F.col("kind") == F.lit(events.REQUEST)
    is_purchase = F.col("kind") == F.lit(events.PURCHASE)
    last = F.struct("seq", "event_id", "event_ts", "kind", "shares")
    deduped = valid_events.dropDuplicates(["order_id", "event_id"]) if dedupe else valid_events
    return deduped.groupBy("order_id").agg(
        # After the dedupe an order has at most one request (its id is the order id).
        F.max(F.when(is_request, F.col("shares"))).alias("requested"),
        F.max(F.when(is_request, F.col("client"))).alias("request_client"),
        F.max(F.when(is_request, F.col("stock"))).alias("request_stock"),
        F.coalesce(F.sum(F.when(is_purchase, F.col("shares"))), F.lit(0)).cast("long").alias("purchased"),
        F.count(F.when(is_purchase, F.lit(1))).alias("purchase_count"),
        F.min(F.when(is_purchase, F.struct("seq", "client", "stock"))).alias("first_purchase"),
        F.max(last).alias("last"),
    )


def crossings(book_updates):
    """The book updates at which an order first goes over: one row per OVERFILL (see the module docstring)."""
    from pyspark.sql import functions as F

    over = F.col("requested").isNotNull() & (F.col("purchased") > F.col("requested"))
    last_is_request = F.col("last.kind") == F.lit(events.REQUEST)
    crossed_now = (F.col("purchased") - F.col("last.shares")) <= F.col("requested")
    return book_updates.where(over & (last_is_request | crossed_now))


def alert_id_column(kind: str = KIND):
    """:func:`aldebaran.audit.findings.alert_id` in the JVM: sha256("<kind>\\x1f<order_id>")[:32]."""
    from pyspark.sql import functions as F

    return F.substring(F.sha2(F.concat(F.lit(kind + "\x1f"), F.col("order_id")), 256), 1, 32)


def alert_records(crossing_rows):
    """Crossing rows → Kafka records (key = alert_id, value = the alert JSON of the contract)."""
    from pyspark.sql import functions as F

    # Wall clock per record: current_timestamp() is the batch's start in a streaming query, and a
    # real-time batch lasts the whole checkpoint interval.
    now_ms = F.expr("java_method('java.lang.System', 'currentTimeMillis')")
    message = F.format_string("purchased %d shares of %d requested in %d purchases",
                              F.col("purchased"), F.col("requested"), F.col("purchase_count"))
    alert = F.struct(
        alert_id_column().alias("alert_id"),
        F.lit(KIND).alias("kind"),
        F.lit("overfill").alias("rule"),
        F.col("order_id"),
        F.coalesce("request_client", "first_purchase.client").alias("client"),
        F.coalesce("request_stock", "first_purchase.stock").alias("stock"),
        F.col("requested"),
        F.col("purchased"),
        F.col("purchase_count"),
        F.col("last.event_id").alias("trigger_event_id"),
        F.col("last.event_ts").alias("trigger_event_ts"),
        now_ms.alias("detected_at"),
        message.alias("message"),
        F.lit(LANE).alias("lane"),
    )
    return crossing_rows.select(alert_id_column().alias("key"), F.to_json(alert).alias("value"))


def plan(kafka_rows, limits: jvmparse.Limits = jvmparse.Limits(), dedupe: bool = True):
    """Kafka source rows → alert records: the whole lane as one DataFrame transform."""
    from pyspark.sql import functions as F

    parsed = jvmparse.parse_events(kafka_rows, limits)
    valid = parsed.where(F.col("reason_code").isNull()).select(
        "kind", "event_id", "order_id", "shares", "client", "stock", "event_ts",
        # Producers key by order id, so an order's events share a partition: its offset orders them.
        (F.col("partition").cast("long") * F.lit(1 << 48) + F.col("offset")).alias("seq"),
    )
    return alert_records(crossings(books(valid, dedupe)))


def start(spark, *, bootstrap_servers: str | None = None, trades_topic: str, alerts_topic: str, checkpoint: str,
          checkpoint_interval: str = DEFAULT_CHECKPOINT_INTERVAL, starting_offsets: str = "latest",
          real_time: bool = True, query_name: str = "aldebaran-realtime-lane",
          source_options: dict[str, str] | None = None, transform=None, kafka_options: dict[str, str] | None = None,
          sink_kafka_options: dict[str, str] | None = None):
    """Start the lane: Kafka ``trades_topic`` → :func:`plan` → Kafka ``alerts_topic``. Returns the query.

    ``real_time=False`` runs the same plan as micro-batches back to back (``processingTime="0 seconds"``):
    a latency comparison of the engines only, as the crossing rule misses crossings inside a batch.
    ``source_options``: more options of the Kafka source (``kafka.fetch.max.wait.ms``, ...), after the
    lane's own. ``transform``: another plan over the Kafka rows than :func:`plan` (the benchmark's variants).
    ``kafka_options``: how the source and the sink reach the cluster (``kafka.``-prefixed, from the platform's
    Kafka connection: aldebaran.kafka.conn.spark_kafka_options); else a plaintext ``bootstrap_servers``.
    ``sink_kafka_options``: the sink's, where they differ (its producer's failover options); else ``kafka_options``."""
    if kafka_options is None:
        if not bootstrap_servers:
            raise ValueError("start: kafka_options or bootstrap_servers is required")
        kafka_options = {"kafka.bootstrap.servers": bootstrap_servers}
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_options)
        .option("subscribe", trades_topic)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "false")
    )
    for key, value in (source_options or {}).items():
        reader = reader.option(key, value)
    rows = reader.load()
    writer = (
        (transform or plan)(rows).writeStream.format("kafka")
        .queryName(query_name)
        .options(**(sink_kafka_options or kafka_options))
        .option("topic", alerts_topic)
        # Latency, not throughput: the sink's producer sends each alert at once.
        .option("kafka.linger.ms", "0")
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
    )
    writer = writer.trigger(realTime=checkpoint_interval) if real_time else writer.trigger(processingTime="0 seconds")
    return writer.start()
