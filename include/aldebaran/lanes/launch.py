"""How the low-latency lane is submitted: spark-submit of the Spark 4.3 job runtime (its own SPARK_HOME and
Python, ``make setup`` builds it) running spark_apps/realtime_lane.py. The same command serves the lane keeper
(aldebaran.lanes.keeper, what the lane_supervisor DAG runs), the benchmark and the tests. The keeper runs it
directly rather than through the provider's SparkSubmitHook because it owns the lane's lifecycle for as long
as it runs: its process group (stopped as one), a death signal tied to the keeper, the driver's status file.
A task that wants the provider's operator takes the runtime through :func:`operator_env`: the provider accepts
only a bare ``spark-submit`` as its binary and refuses a ``spark-home`` extra, so the runtime's bin/ goes
first on the PATH it hands spark-submit's Popen (checked by hand with SparkSubmitHook, docs/design.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from aldebaran.runtime import paths
from aldebaran.runtime import spark as sparkmod
from aldebaran.lanes.realtime import DEFAULT_CHECKPOINT_INTERVAL

RUNTIME = "4.3"
APP = paths.ROOT / "spark_apps" / "realtime_lane.py"
# A real-time query runs every stage of its pipelined group at once: one long-running task per Kafka
# partition plus one per shuffle partition of each stateful operator (dedupe, then aggregate). With 2 topic
# partitions and 1 shuffle partition that is 4 slots; local[2] is refused with
# CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT (docs/design.md, "The low-latency lane").
MASTER = "local[4]"
SHUFFLE_PARTITIONS = 1
# The streaming shuffle holds a partly filled network buffer up to this long before it sends it on; Spark's
# default trades latency for fewer messages; at 1 ms most of the lane's median went (docs/design.md, "The
# low-latency lane"). A SparkContext setting, so it goes on the command line.
STREAMING_CONF = {"spark.shuffle.streaming.networkBufferMaxWaitTimeMs": "1"}


@dataclass
class Lane:
    """One lane's query: its topics, checkpoint and trigger."""

    checkpoint: str
    trades_topic: str
    alerts_topic: str
    checkpoint_interval: str = DEFAULT_CHECKPOINT_INTERVAL
    starting_offsets: str = "latest"
    micro_batch: bool = False
    # None: the control venv's own pyspark (4.2), where real-time mode refuses the lane's stateful plan;
    # for the micro-batch comparison.
    runtime: str | None = RUNTIME
    master: str = MASTER
    driver_memory: str = "1g"
    conf: dict[str, str] = field(default_factory=dict)
    shuffle_partitions: int = SHUFFLE_PARTITIONS
    source_options: dict[str, str] = field(default_factory=dict)  # more Kafka source options (--source-option)
    # The spark-submit application and its first arguments (the benchmark's plan variants have their own).
    app: tuple[str, ...] = (str(APP),)
    status_file: str | None = None  # the driver's status (aldebaran.lanes.driver), read by the lane keeper

    def argv(self) -> list[str]:
        """The spark-submit command line (the connector jars on --jars: the Kafka source must be on the
        classpath when the session starts, not added by spark.jars afterwards)."""
        conf = sparkmod.submit_conf({**STREAMING_CONF, **self.conf})
        out = [sparkmod.spark_submit(self.runtime), "--master", self.master, "--driver-memory", self.driver_memory,
               "--jars", ",".join(sparkmod.connector_jars())]
        for key, value in conf.items():
            out += ["--conf", f"{key}={value}"]
        out += [*self.app, "--checkpoint", self.checkpoint, "--trades-topic", self.trades_topic,
                "--alerts-topic", self.alerts_topic, "--checkpoint-interval", self.checkpoint_interval,
                "--starting-offsets", self.starting_offsets, "--shuffle-partitions", str(self.shuffle_partitions)]
        for key, value in self.source_options.items():
            out += ["--source-option", f"{key}={value}"]
        out += ["--status-file", self.status_file] if self.status_file else []
        return out + (["--micro-batch"] if self.micro_batch else [])

    def env(self) -> dict[str, str]:
        return sparkmod.spark_env(self.runtime)


def operator_env() -> dict[str, str]:
    """``env_vars`` for the provider's SparkSubmitOperator/Hook (client mode): the 4.3 runtime's spark-submit
    first on PATH, its SPARK_HOME and Python, the product on PYTHONPATH."""
    env = sparkmod.spark_env(RUNTIME)
    return {k: env[k] for k in ("PATH", "SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH",
                                "SPARK_LOCAL_IP")}


def stop(proc, timeout: float = 30.0) -> None:
    """Stop a lane started as its own session (``start_new_session``): SIGTERM to its process group (the
    spark-submit and its JVM), SIGKILL if it is still there after `timeout` seconds."""
    import os
    import signal
    import subprocess

    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
