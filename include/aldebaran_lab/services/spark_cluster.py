"""Optional Spark standalone cluster (a master and N workers) from the pyspark wheel's spark-class,
for proving that the auditor's state partitions across executors. The HA profile runs its own on other
ports (services.ha)."""

from __future__ import annotations

import os
from pathlib import Path

from aldebaran.runtime.spark import log4j2_file, spark_env
from aldebaran_lab.services.base import Service, port_open


class SparkMaster(Service):
    name = "spark-master"
    start_timeout = 60.0
    host = "127.0.0.1"
    port = 7077
    ui_port = 8081

    def __init__(self, root: Path | None = None, port: int | None = None, ui_port: int | None = None,
                 daemon_env: dict[str, str] | None = None) -> None:
        super().__init__(root)
        self.port, self.ui_port = port or self.port, ui_port or self.ui_port
        self.daemon_env = daemon_env or {}
        self.address = f"spark://{self.host}:{self.port}"

    def environment(self) -> dict[str, str]:
        return daemon_logging({**spark_env(), **self.daemon_env})

    def command(self) -> list[str]:
        return [
            spark_class(),
            "org.apache.spark.deploy.master.Master",
            "--host", self.host, "--port", str(self.port), "--webui-port", str(self.ui_port),
        ]

    def healthy(self) -> bool:
        return port_open(self.host, self.port) and port_open(self.host, self.ui_port)


class SparkWorker(Service):
    start_timeout = 60.0

    def __init__(self, index: int = 1, cores: int = 1, memory: str = "2g", *, root: Path | None = None,
                 master: str | None = None, ui_port: int | None = None,
                 daemon_env: dict[str, str] | None = None) -> None:
        self.name = f"spark-worker-{index}"
        super().__init__(root)
        self.index, self.cores, self.memory = index, cores, memory
        self.master = master or f"spark://{SparkMaster.host}:{SparkMaster.port}"
        self.ui_port = ui_port or 8081 + index
        self.daemon_env = daemon_env or {}
        self.address = f"127.0.0.1:{self.ui_port} (ui)"

    def environment(self) -> dict[str, str]:
        env = {**spark_env(), **self.daemon_env}
        env["SPARK_WORKER_DIR"] = str(self.home / "work")
        return daemon_logging(env)

    def command(self) -> list[str]:
        return [
            spark_class(),
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
            "--webui-port", str(self.ui_port), "--work-dir", str(self.home / "work"),
            self.master,
        ]

    def healthy(self) -> bool:
        return self.running() and port_open("127.0.0.1", self.ui_port)


def daemon_logging(env: dict[str, str]) -> dict[str, str]:
    """`env` with the daemons' log lines in the platform's time (aldebaran.runtime.spark.SPARK_LOG4J2), through
    SPARK_DAEMON_JAVA_OPTS, unless a log4j option is there already."""
    path = log4j2_file()
    opts = env.get("SPARK_DAEMON_JAVA_OPTS", "")
    if path is not None and "log4j" not in opts:
        env["SPARK_DAEMON_JAVA_OPTS"] = f"{opts} -Dlog4j2.configurationFile={path}".strip()
    return env


def spark_class() -> str:
    return os.path.join(spark_env()["SPARK_HOME"], "bin", "spark-class")
