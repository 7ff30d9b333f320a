"""The expiry clock: a streaming source that yields one row per expiry period, so an idle trades topic
still runs a micro-batch (and so expires books) at a bounded cadence, and no more often.

Why not Spark's ``rate`` source: its slowest setting is one row a second, and every row is a micro-batch.
On a quiet topic that was a batch a second around the clock (~450 ms of work each: two Spark jobs, one
state version per shard, the checkpoint's files on s3a), the auditor's whole resting cost (docs/design.md
§5 "The resting cost"). This source's offset is the wall clock divided by the period: Spark sees new data
only when a period has passed, so an idle auditor runs one batch per period.

The offset is derived from the clock, never stored by the source: a restarted query resumes from its
checkpointed offset and the next period's tick follows, whatever happened in between.
"""

from __future__ import annotations

import time

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

NAME = "aldebaran_ticks"
SCHEMA = "timestamp timestamp"


def _now_tick(period_s: float) -> int:
    return int(time.time() // period_s)


class _TickReader(DataSourceStreamReader):
    def __init__(self, period_s: float) -> None:
        self.period_s = period_s

    def initialOffset(self) -> dict:
        return {"tick": _now_tick(self.period_s)}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        # Never behind its start (a clock stepped back must not make Spark see a negative range).
        now = _now_tick(self.period_s)
        return {"tick": max(now, int((start or {}).get("tick", now)))}

    def partitions(self, start: dict, end: dict):
        # One row for the whole range: a batch that covers many periods (after a long batch) needs one tick.
        return [InputPartition(int(end["tick"]))] if int(end["tick"]) > int(start["tick"]) else []

    def read(self, partition):
        from datetime import datetime, timezone

        yield (datetime.fromtimestamp(partition.value * self.period_s, tz=timezone.utc),)

    def commit(self, end: dict) -> None:
        """Nothing to release: the offset is the clock."""


class TickSource(DataSource):
    """``spark.readStream.format("aldebaran_ticks").option("period_seconds", "10")``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> _TickReader:
        return _TickReader(float(self.options.get("period_seconds", "10")))


def tick_stream(spark, period_s: float):
    """A streaming DataFrame with one ``timestamp`` row per `period_s` seconds of wall clock."""
    spark.dataSource.register(TickSource)
    return spark.readStream.format(NAME).option("period_seconds", str(period_s)).load()
