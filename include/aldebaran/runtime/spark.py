"""Spark plumbing: environment for the pyspark wheel's launchers, the connector jars `make setup`
resolved, and one way to build a session. pyspark is imported lazily (never at DAG parse time)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.runtime.logs import LOG4J2_DATE
from aldebaran.settings import SparkSettings, load


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


def spark_env(runtime: str | None = None, master: str | None = None) -> dict[str, str]:
    """The environment of Spark's launchers: this process's, with Spark's own variables defaulted.
    SPARK_LOCAL_IP=127.0.0.1 only for a local `master` (None: ALDEBARAN_SPARK_MASTER), as
    :func:`base_conf` pins the driver's host: with a cluster master it would make the driver advertise
    127.0.0.1 to executors on other hosts.

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
    if is_local(master if master is not None else load(SparkSettings).master):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOG_DIR", str(paths.run_dir() / "logs"))
    env.setdefault("SPARK_PID_DIR", str(paths.run_dir()))
    return env


def apply_spark_env(master: str | None = None) -> None:
    # pyspark launches its JVM with this process's environment: export Spark's variables into it.
    for key, value in spark_env(master=master).items():
        os.environ.setdefault(key, value)


def connector_jars(s3a: bool = False) -> list[str]:
    """Jars for the Kafka source/sink, the platform's own classes (aldebaran.jvm: the auditor's expiry clock,
    the checkpoint file manager), and the s3a set when asked (s3a:// checkpoints). The platform jar is last."""
    from aldebaran import jvm

    s3a_jars = paths.jars("spark-s3a")  # the platform jar compiles against them (the checkpoint file manager)
    out = [str(p) for p in paths.jars("spark-kafka")]
    if s3a:
        out += [str(p) for p in s3a_jars]
    out.append(str(jvm.platform_jar([Path(spark_home()) / "jars" / "*", *s3a_jars])))
    return out


# The JVM runs each whole-stage-codegen'd plan as one generated method per stage. The parse's (every contract
# check as a column expression, aldebaran.audit.sparkjob.jvmparse) is larger than the 8,000 bytes of bytecode HotSpot
# compiles by default, so it ran interpreted, several times slower (measured in docs/design.md §5, "What
# limits throughput"). Let the JIT compile huge methods, in the driver (local mode) and the executors.
JVM_OPTIONS = "-XX:-DontCompileHugeMethods"
# For spark-submit (the Airflow operators): the driver JVM starts before any session is built.
SUBMIT_CONF = {"spark.driver.extraJavaOptions": JVM_OPTIONS, "spark.executor.extraJavaOptions": JVM_OPTIONS}


# Spark's own log lines with the platform's time (ISO-8601 UTC, aldebaran.runtime.logs.LOG4J2_DATE) instead of its
# default ``yy/MM/dd HH:mm:ss`` in local time: Spark's log4j2-defaults.properties with that date, written to
# the run directory and named by -Dlog4j2.configurationFile (:func:`with_log4j2`).
SPARK_LOG4J2 = f"""\
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = {LOG4J2_DATE} %p %c{{1}}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty2.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty2.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
"""
JAVA_OPTIONS_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def log4j2_file() -> Path | None:
    """:data:`SPARK_LOG4J2` as a file in the run directory (rewritten when it differs); None where it
    cannot be written (a read-only tree): Spark then logs with its own defaults."""
    path = paths.run_dir() / "spark-log4j2.properties"
    try:
        if not path.is_file() or path.read_text() != SPARK_LOG4J2:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(SPARK_LOG4J2)
            os.replace(tmp, path)  # atomic: a JVM starting meanwhile reads the old file or the new one
    except OSError:
        return None
    return path


def with_log4j2(conf: dict[str, str], user: dict[str, str], master: str | None) -> dict[str, str]:
    """`conf` with -Dlog4j2.configurationFile=:func:`log4j2_file` added to the driver's JVM options, and to
    the executors' when they run on this host (the file is on this host only). Unchanged when the user
    configured Spark's logging (a log4j option of theirs, or a log4j2.properties in SPARK_CONF_DIR)."""
    # Not configuration of ours: Spark's own variable, where Spark's log4j2 finds the user's file.
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if any("log4j" in user.get(key, "") for key in JAVA_OPTIONS_KEYS) or (
            conf_dir and (Path(conf_dir) / "log4j2.properties").is_file()):
        return conf
    path = log4j2_file()
    if path is None or " " in str(path):  # extraJavaOptions are split at spaces
        return conf
    option = f"-Dlog4j2.configurationFile={path}"
    here = bool(master) and (is_local(master) or re.match(r"spark://(127\.0\.0\.1|localhost):", master))
    out = dict(conf)
    for key in JAVA_OPTIONS_KEYS[:2 if here else 1]:
        out[key] = f"{out[key]} {option}" if out.get(key) else option
    return out


# spark-hadoop-cloud's manager with the probes around each write left out and a conditional create
# (aldebaran/jvm/ObjectStoreCheckpointFileManager.java; same-run figures: `aldebaran bench checkpoint-files`).
S3A_CHECKPOINT_MANAGER = "io.aldebaran.spark.ObjectStoreCheckpointFileManager"  # = aldebaran.jvm.CHECKPOINT_MANAGER


# What the platform's code relies on: applied whatever else is set, and a user value that differs fails at
# start, named. The auditor maps shuffle partition id → book shard, so partitions must never be coalesced;
# its books live in the RocksDB state store (a checkpoint written by another provider cannot be read back).
REQUIRED_CONF = {
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
}
# Lists the platform adds its entries to, keeping the user's (comma- or space-separated).
MERGED_CONF = {"spark.jars": ",", "spark.archives": ",", "spark.driver.extraJavaOptions": " ",
               "spark.executor.extraJavaOptions": " "}


# The packed runtime (`make dist`, ALDEBARAN_SPARK_RUNTIME_ARCHIVE): Spark unpacks it as ./env in each
# executor's working directory, and the executors' Python (and the shard hosts it starts) run from there.
RUNTIME_ALIAS = "env"
RUNTIME_PYTHON = f"./{RUNTIME_ALIAS}/bin/python"


def runtime_archive(master: str | None) -> str | None:
    """``<archive>#env`` for ``spark.archives`` / ``--archives`` when ALDEBARAN_SPARK_RUNTIME_ARCHIVE is set
    and `master` is a cluster's; None otherwise (a local master's executors run this process's Python)."""
    path = load(SparkSettings).runtime_archive
    if path is None or is_local(master):
        return None
    return f"{Path(path).resolve()}#{RUNTIME_ALIAS}"


def submit_runtime(master: str | None, deploy_mode: str | None, archives: str | None = None) -> dict:
    """spark-submit's arguments for the packed runtime: ``archives`` (the caller's with ours added) and the
    ``conf`` naming the Pythons; {} when :func:`runtime_archive` is None. spark-submit starts the driver's
    Python from spark.pyspark.driver.python, else spark.pyspark.python: in client mode it must stay this
    host's (PYSPARK_DRIVER_PYTHON of :func:`spark_env`), in cluster mode the driver runs in the archive too."""
    archive = runtime_archive(master)
    if archive is None:
        return {}
    theirs = [a for a in (archives or "").split(",") if a]
    driver = RUNTIME_PYTHON if deploy_mode == "cluster" else spark_env(master=master)["PYSPARK_DRIVER_PYTHON"]
    return {"archives": ",".join(theirs + [archive] * (archive not in theirs)),
            "conf": {"spark.pyspark.python": RUNTIME_PYTHON, "spark.pyspark.driver.python": driver}}


def is_local(master: str | None) -> bool:
    return bool(master) and master.startswith("local")


# On a cluster: an executor whose process dies closes its connections and the driver drops it at once;
# one whose host dies (power, network, a frozen VM) is found only by its missing heartbeats, after
# spark.network.timeout (120 s) checked every 60 s by Spark's defaults. The auditor hands over to a warm
# standby once its executors are gone (aldebaran.audit.sparkjob.handover), so find them gone in seconds:
# heartbeats every second, lost after 6 s without one, checked every second. The price: an executor
# starved of CPU for 6 s is dropped too (a handover or an executor restart, nothing lost).
EXECUTOR_LOSS_CONF = {
    "spark.executor.heartbeatInterval": "1s",
    "spark.storage.blockManagerHeartbeatTimeoutMs": "6000",
    "spark.network.timeoutInterval": "1s",
}


def base_conf(shuffle_partitions: int = 2, s3a: bool = False, master: str | None = "local") -> dict[str, str]:
    """The platform's defaults. :func:`session` applies each only where the user set nothing (spark-submit's
    ``--conf``, ``spark-defaults.conf``, the Spark connection), except :data:`REQUIRED_CONF`."""
    conf = {
        **SUBMIT_CONF,
        "spark.jars": ",".join(connector_jars(s3a)),
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": str(load(SparkSettings).ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        **REQUIRED_CONF,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
    }
    if is_local(master):
        # Everything in one JVM on this host: keep the driver off other interfaces. With a cluster master
        # the executors must reach the driver, so its address is Spark's (or the user's) choice.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    else:
        conf.update(EXECUTOR_LOSS_CONF)
        archive = runtime_archive(master)
        if archive:
            conf["spark.archives"] = archive
    if s3a:
        from aldebaran.storage.s3access import s3a_conf

        conf.update(s3a_conf())
        # Each checkpoint file written straight to its key, not to a temp file renamed (= copied and deleted
        # on S3): faster batches on MinIO (docs/design.md "Checkpoints on S3"). The class comes with the
        # spark-s3a jars (setup/maven/spark-s3a.xml).
        conf["spark.sql.streaming.checkpointFileManagerClass"] = S3A_CHECKPOINT_MANAGER
    return conf


def defaults_file() -> dict[str, str]:
    """``spark-defaults.conf`` as spark-submit reads it (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``):
    ``key value`` lines, ``#`` comments. Read here only for a session started outside spark-submit, before its
    JVM exists; under spark-submit the JVM's own conf is asked (:func:`user_conf`)."""
    # Not configuration of ours: Spark's own variable, read where spark-submit reads it.
    conf_dir = os.environ.get("SPARK_CONF_DIR") or str(Path(spark_env()["SPARK_HOME"]) / "conf")
    path = Path(conf_dir) / "spark-defaults.conf"
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        # Java properties, as Spark loads them: key and value split by whitespace, "=" or ":".
        found = re.match(r"([^\s=:#!]+)\s*[\s=:]\s*(.*)$", line.strip())
        if found:
            out[found.group(1)] = found.group(2).strip()
    return out


def user_conf() -> dict[str, str]:
    """What the user set before the session is built. Under spark-submit (its Python gets
    PYSPARK_GATEWAY_PORT) the driver JVM already holds ``--conf``, ``spark-defaults.conf`` and the Spark
    connection's settings as its conf; outside it, only ``spark-defaults.conf`` can have been set."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not configuration: spark-submit sets it for its Python
        return defaults_file()
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway()  # connects to spark-submit's JVM; launches nothing
    try:
        return {t._1(): t._2() for t in gateway.jvm.org.apache.spark.SparkConf(True).getAll()}
    finally:
        gateway.close()


def resolve_conf(defaults: dict[str, str], user: dict[str, str], explicit: dict[str, str]) -> dict[str, str]:
    """The values to set on the builder: the caller's `explicit` ones, then each default the user left unset,
    lists merged. Raises ConfigError naming the key when the user's value contradicts :data:`REQUIRED_CONF`."""
    from aldebaran.exceptions import ConfigError

    for key, value in REQUIRED_CONF.items():
        if key in user and user[key] != value:
            raise ConfigError(f"Spark setting {key}={user[key]!r} (from --conf, spark-defaults.conf or the Spark "
                              f"connection) is not supported: Aldebaran needs {value!r}")
    out = {}
    for key, value in defaults.items():
        if key in MERGED_CONF and user.get(key):
            sep = MERGED_CONF[key]
            theirs = [v for v in user[key].split(sep) if v]
            out[key] = sep.join(theirs + [v for v in value.split(sep) if v and v not in theirs])
        elif key not in user:
            out[key] = value
    out.update(explicit)
    return out


def submit_conf(conf: dict[str, str] | None = None) -> dict[str, str]:
    """``--conf`` for a spark-submit the platform starts on this host: :data:`SUBMIT_CONF` merged into the
    ``extraJavaOptions`` of this host's ``spark-defaults.conf`` (a ``--conf`` replaces the file's value, so
    without the merge the user's JVM options would be lost), then `conf` (the caller's) over it."""
    user = defaults_file()
    return {**resolve_conf(with_log4j2(SUBMIT_CONF, user, None), user, {}), **(conf or {})}


def session(app: str = "aldebaran", master: str | None = None, conf: dict[str, str] | None = None,
            s3a: bool = False, shuffle_partitions: int = 2):
    """Build (or reuse) a SparkSession with the connector jars on the classpath.

    Precedence: `conf` and `shuffle_partitions` (the caller's decisions) > the user's settings (spark-submit
    ``--conf``, ``spark-defaults.conf``, the Spark connection) > the platform's defaults (:func:`base_conf`).
    ``spark.jars`` and the extraJavaOptions are merged; :data:`REQUIRED_CONF` cannot be overridden."""
    settings = load(SparkSettings)  # before the JVM starts: an invalid setting fails here, named
    import logging

    from pyspark.sql import SparkSession

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines outlive pytest's log capture

    builder = SparkSession.builder.appName(app)
    user = user_conf()
    # Not configuration: spark-submit sets PYSPARK_GATEWAY_PORT for the Python it launches.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Not under spark-submit: choose the master here. Under spark-submit, --master decides.
        master = master or settings.master
        builder = builder.master(master)
    else:
        master = user.get("spark.master")
    apply_spark_env(master)
    if runtime_archive(master):
        # PySpark names the executors' Python from this variable when the context starts
        # (pyspark/core/context.py), not from spark.pyspark.python: the packed runtime's, unpacked by Spark.
        os.environ["PYSPARK_PYTHON"] = RUNTIME_PYTHON
    explicit = {"spark.sql.shuffle.partitions": str(shuffle_partitions), **(conf or {})}
    defaults = with_log4j2(base_conf(shuffle_partitions, s3a, master), user, master)
    # A JVM this process launches gets the builder's settings as `--conf` on its command line, which every
    # user of the host can read (ps): the secrets wait until it runs, and reach it through py4j instead.
    # Not configuration: spark-submit sets PYSPARK_GATEWAY_PORT for the Python it launches.
    launching = "PYSPARK_GATEWAY_PORT" not in os.environ and not _context_running()
    held = {}
    for key, value in resolve_conf(defaults, user, explicit).items():
        if launching and key in SECRET_CONF:
            held[key] = value
            continue
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in held.items():
        spark.sparkContext._jsc.hadoopConfiguration().set(key.removeprefix("spark.hadoop."), value)
        spark.conf.set(key, value)  # the session's Hadoop conf (checkpoints and sources read it from here)
    spark.sparkContext.setLogLevel(settings.log_level)
    return spark


# What must not appear on a launched JVM's command line (session()).
SECRET_CONF = frozenset({"spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.session.token"})


def _context_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None
