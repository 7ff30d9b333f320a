"""The training job of aldebaran_lab.spark_cds: touches what the suite's drivers load (SQL and its code
generation, JSON parsing, Arrow and Python workers, Structured Streaming with a checkpoint and keyed state),
so that the archive written when its JVM exits holds those classes. Its results are checked only so that a
broken run fails loudly; what matters is the classes it loaded."""

from __future__ import annotations

import sys
import tempfile
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

SCHEMA = "order_id STRING, shares LONG, kind STRING"


def _relay(batches):
    yield from batches


def main() -> int:
    spark = (SparkSession.builder.appName("aldebaran-cds-train").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    rows = spark.range(2000).select(
        F.to_json(F.struct((F.col("id") % 97).cast("string").alias("order_id"), F.col("id").alias("shares"),
                           F.lit("P").alias("kind"))).alias("value"))
    parsed = rows.select(F.from_json("value", SCHEMA).alias("e")).select("e.*")
    total = parsed.groupBy("order_id").agg(F.sum("shares").alias("s")).repartition(2, "order_id")
    relayed = total.mapInArrow(_relay, total.schema).agg(F.sum("s")).collect()[0][0]
    if relayed != sum(range(2000)):
        print(f"spark-cds train: wrong sum {relayed}", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        seen = []
        stream = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
                  .select((F.col("value") % 13).cast("string").alias("order_id"), F.col("value").alias("shares")))

        def sink(batch_df, batch_id):
            seen.append(batch_df.repartition(2, "order_id").mapInArrow(_relay, batch_df.schema).count())

        plain = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", f"{tmp}/fb")
                 .trigger(processingTime="500 milliseconds").start())
        keyed = (stream.groupBy("order_id").agg(F.sum("shares").alias("s")).writeStream.outputMode("update")
                 .format("memory").queryName("books").option("checkpointLocation", f"{tmp}/state")
                 .trigger(processingTime="500 milliseconds").start())
        deadline = time.monotonic() + 60
        while (len(seen) < 3 or keyed.lastProgress is None) and time.monotonic() < deadline:
            time.sleep(0.2)
        for query in (plain, keyed):
            query.stop()
    spark.stop()
    if len(seen) < 3:
        print(f"spark-cds train: the streaming query ran {len(seen)} batches", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
