"""The HA profile on one machine (`make up-ha`, `aldebaran services up --ha`): the same code as the core
services with other configuration. Kafka as a 3-node KRaft cluster (replication 3, min.insync.replicas 2),
MinIO as 4 erasure-coded nodes, Airflow's components as separate processes on Postgres (two schedulers, two
triggerers), a Spark master with two workers. Everything lives under <run dir>/ha and listens on 19xxx.

Every member has its own PID file and can be killed and started alone, for failure injection::

    from aldebaran_lab.services import ha
    ha.kill("kafka-2")      # SIGKILL its process group
    ha.start("kafka-2")     # start it again and wait until it is healthy
    ha.status()             # one Status per member
"""

from __future__ import annotations

import logging
import os
import time

from aldebaran.exceptions import ServiceError
from aldebaran_lab.services.base import Service, Status
from aldebaran_lab.services.ha.profile import DB_NAME, DB_USER, LAYOUT, POSTGRES_PASSWORD, Layout, ensure_env, env_path, read_env, root

log = logging.getLogger(__name__)


def names(layout: Layout = LAYOUT) -> tuple[str, ...]:
    return tuple(layout.members())


def member(name: str, layout: Layout = LAYOUT, values: dict[str, str] | None = None) -> Service:
    """The member called ``name`` (`aldebaran services status --ha` lists them)."""
    from aldebaran_lab.services.ha.airflow import AirflowPart
    from aldebaran_lab.services.ha.members import KafkaNode, MinIONode
    from aldebaran_lab.services.postgres import Postgres
    from aldebaran_lab.services.spark_cluster import SparkMaster, SparkWorker

    kinds = layout.members()
    if name not in kinds:
        raise KeyError(f"unknown HA member {name!r}; members: {', '.join(kinds)}")
    values = read_env() if values is None else values
    base, index = root(), name.rsplit("-", 1)[-1]
    kind = kinds[name]
    spark_env = {"SPARK_DAEMON_MEMORY": layout.spark_daemon_memory, "SPARK_LOG_DIR": str(base / "logs"),
                 "SPARK_PID_DIR": str(base)}
    if kind == "postgres":
        return Postgres(root=base, port=layout.postgres_port, user=DB_USER, database=DB_NAME,
                        password=values.get(POSTGRES_PASSWORD, ""))
    if kind == "kafka":
        return KafkaNode(int(index), root=base, layout=layout)
    if kind == "minio":
        return MinIONode(int(index), root=base, layout=layout, env=values)
    if kind == "spark-master":
        # FILESYSTEM recovery: a master started again after a kill takes back its workers and applications.
        opts = (f"-Dspark.deploy.recoveryMode=FILESYSTEM "
                f"-Dspark.deploy.recoveryDirectory={base / 'spark-master' / 'recovery'}")
        return SparkMaster(root=base, port=layout.spark_port, ui_port=layout.spark_ui_port,
                           daemon_env={**spark_env, "SPARK_MASTER_OPTS": opts})
    if kind == "spark-worker":
        return SparkWorker(int(index), cores=1, memory="2g", root=base,
                           master=f"spark://127.0.0.1:{layout.spark_port}",
                           ui_port=layout.spark_worker_ui_ports[int(index) - 1], daemon_env=spark_env)
    return AirflowPart(name, root=base, layout=layout, values=values)


def _start_group(members: list[Service]) -> None:
    """Launch every member of a group, then wait for each: a quorum forms only once most of it runs."""
    for m in members:
        m.launch()
    for m in members:
        m.wait_healthy(m.start_timeout)


def _provision(values: dict[str, str], layout: Layout) -> None:
    from aldebaran.kafka_admin import ensure_topics
    from aldebaran_lab.services.ha.members import kafka_settings

    for topic in ensure_topics(kafka_settings(layout)):
        log.info("kafka: created topic %s (replication factor %d)", topic, layout.replication_factor)
    node = member("minio-1", layout, values)
    # Each node answers /ready before the nodes have agreed on the erasure set; S3 calls 503 until then.
    deadline = time.monotonic() + 60
    while not node.cluster_writable():
        if time.monotonic() > deadline:
            raise ServiceError("minio: no write quorum 60 s after every node was ready; see <run dir>/ha/logs/minio-*.log")
        time.sleep(0.5)
    node.after_start()  # the bucket (erasure-coded across every node)


def up(only: tuple[str, ...] = (), layout: Layout = LAYOUT) -> float:
    """Start the whole profile (or the members named), in dependency order; returns the seconds it took."""
    t0 = time.monotonic()
    values = ensure_env(layout=layout)
    wanted = set(only or names(layout))
    groups = layout.groups()
    for group, members in groups.items():
        chosen = [member(n, layout, values) for n in members if n in wanted]
        if not chosen:
            continue
        if group == "postgres":
            chosen[0].start()
        elif group == "airflow":
            from aldebaran_lab.services.ha.airflow import AirflowPart

            if not any(m.running() for m in (member(n, layout, values) for n in members)):
                assert isinstance(chosen[0], AirflowPart)
                chosen[0].migrate()  # first component of a cold start: the schema before any of them
            # The api-server first: the others' health is read from it.
            chosen.sort(key=lambda m: m.name != "airflow-api-server")
            _start_group(chosen)
        else:
            _start_group(chosen)
        log.info("ha: %s up (%s) after %.0fs", group, ", ".join(m.name for m in chosen), time.monotonic() - t0)
        if group == "minio" and not only:
            _provision(values, layout)
    return time.monotonic() - t0


def start(name: str, layout: Layout = LAYOUT) -> None:
    """Start one member (e.g. after :func:`kill`) and wait until it is healthy."""
    member(name, layout).start()


def kill(name: str, layout: Layout = LAYOUT) -> None:
    """SIGKILL one member's process group (failure injection); its data stays."""
    member(name, layout).kill()


def down(only: tuple[str, ...] = (), layout: Layout = LAYOUT) -> None:
    """Stop the members (default: all), dependents first; a group's members are signalled together."""
    values = read_env()
    wanted = set(only or names(layout))
    for group, members in reversed(layout.groups().items()):
        chosen = [member(n, layout, values) for n in members if n in wanted]
        pending = [(m, pid) for m in chosen if (pid := m.request_stop()) is not None]
        for m, pid in pending:
            m.wait_stopped(pid)


def status(only: tuple[str, ...] = (), layout: Layout = LAYOUT) -> list[Status]:
    values = read_env()
    return [member(n, layout, values).status() for n in (only or names(layout))]


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in a process group (a member and its children)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[2]) != pgid:
                    continue
            with open(f"/proc/{entry}/status") as fh:
                total += next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))
        except (FileNotFoundError, ProcessLookupError, IndexError, StopIteration, ValueError):
            continue
    return total


def rss(layout: Layout = LAYOUT) -> dict[str, int]:
    """Resident bytes per running member (its whole process group)."""
    out = {}
    for s in status(layout=layout):
        if s.pid is not None:
            out[s.name] = group_rss(s.pid)
    return out


def check_down(layout: Layout = LAYOUT) -> None:
    """Raise if any member still has a live process group (after `down`)."""
    left = [m.name for m in (member(n, layout) for n in names(layout)) if m.running()]
    if left:
        raise ServiceError(f"HA members still running: {', '.join(left)}")


__all__ = ["LAYOUT", "Layout", "check_down", "down", "env_path", "kill", "member", "names", "root", "rss",
           "start", "status", "up"]
