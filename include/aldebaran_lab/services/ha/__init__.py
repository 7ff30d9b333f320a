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

import json
import logging
import os
import time

from aldebaran.exceptions import ServiceError
from aldebaran_lab.services.base import Service, Status, pid_alive
from aldebaran_lab.services.ha.profile import DB_NAME, DB_USER, LAYOUT, POSTGRES_PASSWORD, Layout, ensure_env, env_path, read_env, root

log = logging.getLogger(__name__)


def names(layout: Layout = LAYOUT) -> tuple[str, ...]:
    return tuple(layout.members())


def member(name: str, layout: Layout = LAYOUT, values: dict[str, str] | None = None) -> Service:
    """The member called ``name`` (`aldebaran services status --ha` lists them)."""
    from aldebaran_lab.services.ha.airflow import AirflowPart
    from aldebaran_lab.services.ha.members import KafkaNode, MinIOBalancer, MinIONode
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
    if kind == "minio-lb":
        return MinIOBalancer(root=base, layout=layout)
    if kind == "spark-master":
        # FILESYSTEM recovery: a master started again after a kill takes back its workers and applications.
        opts = (f"-Dspark.deploy.recoveryMode=FILESYSTEM "
                f"-Dspark.deploy.recoveryDirectory={base / 'spark-master' / 'recovery'}")
        return SparkMaster(root=base, port=layout.spark_port, ui_port=layout.spark_ui_port,
                           daemon_env={**spark_env, "SPARK_MASTER_OPTS": opts})
    if kind == "spark-worker":
        # Executors inherit the worker's environment, and the product's Python in them (the auditor's book
        # shards) reads its settings from it: the HA profile's object store and Kafka, not the caller's `.env`.
        profile = {k: v for k, v in values.items() if k.startswith("ALDEBARAN_")}
        return SparkWorker(int(index), cores=layout.spark_worker_cores, memory=layout.spark_worker_memory, root=base,
                           master=f"spark://127.0.0.1:{layout.spark_port}",
                           ui_port=layout.spark_worker_ui_ports[int(index) - 1], daemon_env={**spark_env, **profile})
    return AirflowPart(name, root=base, layout=layout, values=values)


def kafka_controller(layout: Layout = LAYOUT) -> str:
    """The member that is the KRaft quorum's active controller now (``kafka-<i>``), from the nodes'
    ``quorum-state`` files: the leader of the highest epoch any node has seen. (The Admin API's
    DescribeCluster names a random broker as "controller" in KRaft mode, not the active controller.)"""
    best: tuple[int, int] | None = None
    for i in range(1, len(layout.kafka_ports) + 1):
        path = root() / f"kafka-{i}" / "data" / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            continue
        if state.get("leaderId", -1) >= 0 and (best is None or state["leaderEpoch"] > best[0]):
            best = (state["leaderEpoch"], state["leaderId"])
    if best is None:
        raise ServiceError("kafka: no node of the HA profile knows a KRaft leader (is the profile up?)")
    return f"kafka-{best[1]}"


def _start_group(members: list[Service]) -> None:
    """Launch every member of a group, then wait for each: a quorum forms only once most of it runs."""
    for m in members:
        m.launch()
    for m in members:
        m.wait_healthy(m.start_timeout)


def _provision(values: dict[str, str], layout: Layout) -> None:
    from aldebaran.kafka.admin import ensure_topics
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
            from aldebaran_lab.services.ha.airflow import migrate

            if not any(member(n, layout, values).running() for n in members):
                migrate(layout, values, root())  # no component runs yet: the schema before any of them
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
    """Stop the members (default: all), dependents first; a group's members are signalled together. Raises
    if any process of a stopped member (its group and descendants, noted before the stop) is left."""
    values = read_env()
    wanted = set(only or names(layout))
    processes: set[int] = set()
    for group, members in reversed(layout.groups().items()):
        chosen = [member(n, layout, values) for n in members if n in wanted]
        for m in chosen:
            if (pid := m.pid()) is not None:
                processes |= member_pids(pid)
        pending = [(m, pid) for m in chosen if (pid := m.request_stop()) is not None]
        for m, pid in pending:
            m.wait_stopped(pid)
    time.sleep(0.5)  # backends notice their postmaster's exit
    left = sorted(p for p in processes if pid_alive(p))
    if left:
        raise ServiceError(f"HA profile: processes left after stopping: {left}")


def status(only: tuple[str, ...] = (), layout: Layout = LAYOUT) -> list[Status]:
    values = read_env()
    return [member(n, layout, values).status() for n in (only or names(layout))]


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgid) of every live process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                out[int(entry)] = (int(fields[1]), int(fields[2]))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    return out


def member_pids(pid: int) -> set[int]:
    """A member's processes: its process group and every descendant (Postgres' backends call setsid)."""
    procs = _processes()
    found = {p for p, (_, pgid) in procs.items() if pgid == pid} | ({pid} if pid in procs else set())
    grew = True
    while grew:
        more = {p for p, (ppid, _) in procs.items() if ppid in found and p not in found}
        found |= more
        grew = bool(more)
    return found


def memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) bytes of a member's processes. RSS counts pages its forked workers share once per
    process; PSS splits each shared page among its sharers, so PSS sums to what the machine spends."""
    rss = pss = 0
    for p in member_pids(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return rss, pss


def usage(layout: Layout = LAYOUT) -> dict[str, tuple[int, int]]:
    """(RSS, PSS) bytes per running member."""
    return {s.name: memory(s.pid) for s in status(layout=layout) if s.pid is not None}


__all__ = ["LAYOUT", "Layout", "down", "env_path", "kafka_controller", "kill", "member", "memory", "names", "root",
           "start", "status", "up", "usage"]
