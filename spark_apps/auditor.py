"""Aldebaran's streaming auditor: the spark-submit entry point (argument parsing only).

    spark-submit --master 'local[2]' \
        --driver-java-options -XX:-DontCompileHugeMethods \
        --conf spark.executor.extraJavaOptions=-XX:-DontCompileHugeMethods \
        --jars "$(ls ~/.cache/aldebaran/jars/spark-kafka-*/*.jar | paste -sd,)" \
        spark_apps/auditor.py --checkpoint s3a://aldebaran/checkpoints/auditor --rules overfill,mismatch

Every option also reads its ALDEBARAN_AUDIT_* environment variable (`--help` lists them); Kafka and
object-store settings come from ALDEBARAN_KAFKA_* / ALDEBARAN_S3_*. The logic is aldebaran.audit.sparkjob.job.
The JIT flag lets HotSpot compile the parse's large generated method (aldebaran.runtime.spark.JVM_OPTIONS); the
Airflow operators pass it themselves.
"""

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from aldebaran.runtime import envfile, logs
    from aldebaran.audit.sparkjob import job
    from aldebaran.audit.settings import AuditorSettings, add_cli_flags
    from aldebaran.exceptions import AldebaranError
    from aldebaran.platform.replay import bounded_progress
    from aldebaran.settings import load

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cli_flags(parser)
    args = parser.parse_args(argv)
    envfile.load_env()
    try:
        logs.setup("auditor")
        settings = load(AuditorSettings, **{k: v for k, v in vars(args).items() if v is not None})
        with bounded_progress(settings) as on_batch:  # a replay's progress through its range
            job.run(settings, on_batch=on_batch)
    except AldebaranError as exc:
        logging.getLogger("aldebaran").error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
