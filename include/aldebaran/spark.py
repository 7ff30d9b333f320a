"""Spark plumbing: environment for the pyspark wheel's launchers, the connector jars `make setup`
resolved, and one way to build a session. pyspark is imported lazily (never at DAG parse time)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aldebaran import paths
from aldebaran.settings import ObjectStoreSettings, SparkSettings, load


def spark_home(runtime: str | None = None) -> str:
    """SPARK_HOME of this environment's pyspark, or of a Spark job runtime of its own (``runtime="4.3"``:
    the venv `make setup` builds from setup/runtimes/spark-4.3.txt, launched by its own spark-submit)."""
    if runtime is not None:
        found = sorted(paths.spark_runtime(runtime).glob("lib/python*/site-packages/pyspark"))
        if not found:
            from aldebaran.exceptions import SetupError

            raise SetupError(f"the Spark {runtime} runtime has no pyspark: rerun `make setup`")
        return str(found[0])
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        from aldebaran.exceptions import SetupError

        raise SetupError("pyspark is not installed in this environment: run `make setup`")
    return str(Path(spec.origin).parent)


def spark_submit(runtime: str | None = None) -> str:
    """The spark-submit of a runtime, for a direct launch (the provider's operator takes only a bare
    ``spark-submit`` and finds it on the PATH of its env_vars: aldebaran.lanes.launch.operator_env)."""
    return str(Path(spark_home(runtime)) / "bin" / "spark-submit")


def spark_env(runtime: str | None = None) -> dict[str, str]:
    """The environment of Spark's launchers: this process's, with Spark's own variables defaulted.

    With a ``runtime``, the job runs on that runtime's pyspark: its SPARK_HOME and Python are forced (a
    SPARK_HOME of the control venv inherited from the caller would launch the wrong Spark), and the
    product is imported from this tree's include/ (the runtime holds only pyspark and the settings)."""
    env = dict(os.environ)  # not configuration: the whole environment, passed on to the JVM launchers
    if runtime is not None:
        python = str(paths.spark_runtime(runtime) / "bin" / "python")
        env["SPARK_HOME"] = spark_home(runtime)
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = python
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(paths.ROOT / "include"), env.get("PYTHONPATH")) if p)
        env["PATH"] = f"{Path(env['SPARK_HOME']) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SPARK_HOME", spark_home())
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOG_DIR", str(paths.run_dir() / "logs"))
    env.setdefault("SPARK_PID_DIR", str(paths.run_dir()))
    return env


def apply_spark_env() -> None:
    # pyspark launches its JVM with this process's environment: export Spark's variables into it.
    for key, value in spark_env().items():
        os.environ.setdefault(key, value)


def connector_jars(s3a: bool = False) -> list[str]:
    """Jars for the Kafka source/sink (and s3a:// checkpoints when asked)."""
    out = [str(p) for p in paths.jars("spark-kafka")]
    if s3a:
        out += [str(p) for p in paths.jars("spark-s3a")]
    return out


def s3a_conf(prefix: str = "spark.hadoop.") -> dict[str, str]:
    """Hadoop s3a settings for the configured object store (MinIO endpoint or AWS)."""
    s3 = load(ObjectStoreSettings)
    conf = {
        "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3a.endpoint.region": s3.region,
        "fs.s3a.connection.maximum": "64",
        "fs.s3a.fast.upload": "true",
    }
    if s3.endpoint():
        conf["fs.s3a.endpoint"] = s3.endpoint()
        conf["fs.s3a.path.style.access"] = "true"
        conf["fs.s3a.connection.ssl.enabled"] = str(s3.endpoint().startswith("https")).lower()
    if s3.access_key and s3.secret_key:
        conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        conf["fs.s3a.access.key"] = s3.access_key.get_secret_value()
        conf["fs.s3a.secret.key"] = s3.secret_key.get_secret_value()
    return {prefix + k: v for k, v in conf.items()}


# The JVM runs each whole-stage-codegen'd plan as one generated method per stage. The parse's (every contract
# check as a column expression, aldebaran.audit.sparkjob.jvmparse) is larger than the 8,000 bytes of bytecode HotSpot
# compiles by default, so it ran interpreted, several times slower (measured in docs/design.md §5, "What
# limits throughput"). Let the JIT compile huge methods, in the driver (local mode) and the executors.
JVM_OPTIONS = "-XX:-DontCompileHugeMethods"
# For spark-submit (the Airflow operators): the driver JVM starts before any session is built.
SUBMIT_CONF = {"spark.driver.extraJavaOptions": JVM_OPTIONS, "spark.executor.extraJavaOptions": JVM_OPTIONS}


S3A_CHECKPOINT_MANAGER = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"


def base_conf(shuffle_partitions: int = 2, s3a: bool = False) -> dict[str, str]:
    conf = {
        **SUBMIT_CONF,
        "spark.jars": ",".join(connector_jars(s3a)),
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": str(load(SparkSettings).ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        # The auditor maps shuffle partition id → book shard: partitions must never be coalesced.
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
    }
    if s3a:
        conf.update(s3a_conf())
        # Each checkpoint file written straight to its key, not to a temp file renamed (= copied and deleted
        # on S3): per batch, walCommit + commitOffsets on the HA profile's MinIO went 558 → 230 ms (medians of
        # 20 small batches each way in one run, `aldebaran bench checkpoint-files`; docs/design.md
        # "Checkpoints on S3"). The class comes with the spark-s3a jars (setup/maven/spark-s3a.xml).
        conf["spark.sql.streaming.checkpointFileManagerClass"] = S3A_CHECKPOINT_MANAGER
    return conf


def session(app: str = "aldebaran", master: str | None = None, conf: dict[str, str] | None = None,
            s3a: bool = False, shuffle_partitions: int = 2):
    """Build (or reuse) a SparkSession with the connector jars on the classpath."""
    settings = load(SparkSettings)  # before the JVM starts: an invalid setting fails here, named
    apply_spark_env()
    import logging

    from pyspark.sql import SparkSession

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines outlive pytest's log capture

    builder = SparkSession.builder.appName(app)
    # Not configuration: spark-submit sets PYSPARK_GATEWAY_PORT for the Python it launches.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Not under spark-submit: choose the master here. Under spark-submit, --master decides.
        builder = builder.master(master or settings.master)
    for key, value in {**base_conf(shuffle_partitions, s3a), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level)
    return spark
