"""Aldebaran's low-latency lane (real-time mode, Spark 4.3): the spark-submit entry point (argument parsing only).

Runs on the Spark 4.3 job runtime `make setup` builds; aldebaran.lanes.launch.Lane(...).argv() / .env() give the
command line and environment (what the benchmark and the tests run). By hand, from the work tree:

    R=$(ls -d ~/.cache/aldebaran/runtimes/spark-4.3-*); export SPARK_HOME=$(ls -d $R/lib/python3*/site-packages/pyspark)
    PYSPARK_PYTHON=$R/bin/python PYTHONPATH=include $SPARK_HOME/bin/spark-submit --master 'local[4]' \
        --jars "$(ls ~/.cache/aldebaran/jars/spark-kafka-*/*.jar | paste -sd,)" \
        --conf spark.shuffle.streaming.networkBufferMaxWaitTimeMs=1 \
        spark_apps/realtime_lane.py --checkpoint /tmp/rtm-lane --trades-topic trades --alerts-topic alerts.fast

local[4]: the real-time query needs a slot for each of its long-running tasks at once (lanes.launch.MASTER).
The session (connector jars, JIT flag, RocksDB state) is aldebaran.runtime.spark.session; Kafka comes from
ALDEBARAN_KAFKA_*; the logic is aldebaran.lanes.realtime.
"""

import argparse
import logging
import sys


def main(argv: list[str] | None = None, transform=None) -> int:
    """Parse `argv`, start the lane and wait. `transform`: another plan than realtime.plan (the benchmark's
    variants, aldebaran_capacity.bench.lane_app)."""
    import threading

    from aldebaran.runtime import logs
    from aldebaran.runtime import spark as sparkmod
    from aldebaran.kafka.conn import spark_kafka_options
    from aldebaran.lanes import driver, realtime
    from aldebaran.settings import KafkaSettings, load

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint location of the lane's query")
    parser.add_argument("--trades-topic", help="input topic (default ALDEBARAN_KAFKA_TRADES_TOPIC)")
    parser.add_argument("--alerts-topic", help="output topic (default ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC)")
    parser.add_argument("--checkpoint-interval", default=realtime.DEFAULT_CHECKPOINT_INTERVAL,
                        help="real-time trigger duration: how often progress is checkpointed (≥ 5 s)")
    parser.add_argument("--starting-offsets", default="latest", help="earliest | latest (first start only)")
    parser.add_argument("--micro-batch", action="store_true",
                        help="run the same plan as back-to-back micro-batches: a latency comparison only, "
                             "it misses the orders that cross inside a batch")
    parser.add_argument("--shuffle-partitions", type=int, default=1,
                        help="partitions of each stateful operator; each is a long-running task (a slot)")
    parser.add_argument("--source-option", action="append", default=[], metavar="K=V",
                        help="an option of the Kafka source, e.g. kafka.fetch.max.wait.ms=50 (repeatable)")
    parser.add_argument("--status-file", help="write the query's state here every 2 s (aldebaran.lanes.driver; "
                                              "the lane keeper reads it)")
    args = parser.parse_args(argv)
    logs.setup("lane")
    kafka = load(KafkaSettings)

    spark = sparkmod.session("aldebaran-realtime-lane", shuffle_partitions=args.shuffle_partitions)
    query = realtime.start(
        spark, kafka_options=spark_kafka_options(spark, kafka, "source"),
        sink_kafka_options=spark_kafka_options(spark, kafka, "sink"),
        trades_topic=args.trades_topic or kafka.trades_topic, alerts_topic=args.alerts_topic or kafka.fast_alerts_topic,
        checkpoint=args.checkpoint, checkpoint_interval=args.checkpoint_interval,
        starting_offsets=args.starting_offsets, real_time=not args.micro_batch,
        source_options=dict(o.split("=", 1) for o in args.source_option), transform=transform)
    logging.getLogger("aldebaran").info("realtime lane %s started (%s)", query.id,
                                        "micro-batch" if args.micro_batch else "real-time mode")
    stop = threading.Event()
    if args.status_file:
        driver.report(query, args.status_file, stop)
    try:
        query.awaitTermination()
    finally:
        stop.set()
        if args.status_file:
            driver.write_status(args.status_file, driver.snapshot(query))
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
