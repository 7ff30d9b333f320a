"""The expiry clock: a streaming source that yields one row per expiry period, so an idle trades topic
still runs a micro-batch (and so expires books) at a bounded cadence, and no more often.

Why not Spark's ``rate`` source: its slowest setting is one row a second, and every row is a micro-batch.
On a quiet topic that was a batch a second around the clock (~450 ms of work each: two Spark jobs, one
state version per shard, the checkpoint's files on s3a), the auditor's whole resting cost (docs/design.md
§5 "The resting cost"). This source's offset is the wall clock divided by the period: Spark sees new data
only when a period has passed, so an idle auditor runs one batch per period.

The source is a JVM class of the platform jar (``io.aldebaran.spark.TickSource``, aldebaran/jvm, on
``spark.jars`` through :func:`aldebaran.runtime.spark.connector_jars`), not a Python data source: Spark
serves those from a Python process started with the query, which it waits for 10 s at most (a constant), and
on a saturated box the auditor failed at start with "Python worker failed to connect back" (docs/design.md
§5). The JVM source reads the offsets the Python one wrote (``{"tick": N}``), so a checkpoint of either
resumes.
"""

from __future__ import annotations

TICK_SOURCE = "io.aldebaran.spark.TickSource"  # include/aldebaran/jvm/TickSource.java
SCHEMA = "timestamp timestamp"


def tick_stream(spark, period_s: float):
    """A streaming DataFrame with one ``timestamp`` row per `period_s` seconds of wall clock."""
    return spark.readStream.format(TICK_SOURCE).option("period_seconds", repr(float(period_s))).load()
