"""Both lanes in one Spark application, for ``aldebaran bench shared-jvm`` only: the cheap version of "the lanes
share one JVM", measured against the shipped shape (two applications) in the same run.

    spark-submit --master 'local[6]' ... shared_app.py --lane-checkpoint DIR <spark_apps/auditor.py arguments>

It starts the low-latency lane's real-time query (aldebaran.lanes.realtime.start, as spark_apps/realtime_lane.py
does) and then runs the exact auditor (aldebaran.audit.sparkjob.job.run, as spark_apps/auditor.py does) on the
same SparkSession, so it needs the Spark 4.3 runtime (real-time mode) for both, and a slot for each of the
lane's long-running tasks besides the auditor's: local[6] where the two apart take local[4] and local[2].
Topics and Kafka come from ALDEBARAN_KAFKA_* as for the two entry points.
"""

import argparse
import logging
import sys


def main(argv: list[str]) -> int:
    from aldebaran.runtime import logs
    from aldebaran.runtime import spark as sparkmod
    from aldebaran.audit.settings import AuditorSettings, add_cli_flags
    from aldebaran.audit.sparkjob import job
    from aldebaran.kafka.conn import spark_kafka_options
    from aldebaran.lanes import realtime
    from aldebaran.lanes.launch import SHUFFLE_PARTITIONS
    from aldebaran.settings import KafkaSettings, load

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lane-checkpoint", required=True, help="checkpoint location of the lane's query")
    add_cli_flags(parser)
    args = parser.parse_args(argv)
    logs.setup("shared")
    kafka = load(KafkaSettings)
    flags = {k: v for k, v in vars(args).items() if v is not None and k != "lane_checkpoint"}
    settings = load(AuditorSettings, **flags)
    spark = sparkmod.session("aldebaran-shared-lanes", shuffle_partitions=SHUFFLE_PARTITIONS)
    lane = realtime.start(spark, kafka_options=spark_kafka_options(spark, kafka, "source"),
                          sink_kafka_options=spark_kafka_options(spark, kafka, "sink"),
                          trades_topic=kafka.trades_topic, alerts_topic=kafka.fast_alerts_topic,
                          checkpoint=args.lane_checkpoint, starting_offsets="latest")
    logging.getLogger("aldebaran").info("shared: lane %s started; the auditor next, same session", lane.id)
    # The lane captured its shuffle partitions at its start; the auditor's shards are its own.
    spark.conf.set("spark.sql.shuffle.partitions", str(settings.shards))
    try:
        job.run(settings, spark=spark, kafka=kafka)
    finally:
        lane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
