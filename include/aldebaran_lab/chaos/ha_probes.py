"""Detection probes of `aldebaran chaos ha`: for each fault, when the platform *noticed* the kill — the
moment the mechanism that takes over had what it needed to act. Each probe is a predicate polled every
``POLL_S`` from the kill until it holds (:class:`Probe`); the time it first held is the fault's
detection.

| fault | noticed when |
|---|---|
| Kafka broker (controller) | no partition of the campaign's topics is led by the dead broker any more (the new controller fenced it and moved its leaderships) |
| MinIO node | the balancer (HAProxy) reports the node DOWN |
| dispatcher | every channel's consumer group has dropped the dead member (its partitions are its partner's) |
| Spark worker | the Spark master no longer lists the worker ALIVE |
| active auditor | the standby logged that it took the lease |
| scheduler, triggerer, Spark master | nothing on the data path depends on them: the kill itself (detection 0) |
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import KafkaException

from aldebaran_lab.services import ha

log = logging.getLogger(__name__)

POLL_S = 0.2


class Probe:
    """Polls `noticed` in a thread from `start()` until it returns True (or `timeout` s pass); `at` is the
    first time (epoch s) it held, None if it never did. A predicate that raises counts as not yet."""

    def __init__(self, name: str, noticed: Callable[[], bool], timeout: float = 300.0) -> None:
        self.name, self.noticed, self.timeout = name, noticed, timeout
        self.at: float | None = None
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"chaos-ha-probe-{name}")

    def start(self) -> "Probe":
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self._stop.is_set() and time.monotonic() < deadline:
            t = time.time()
            try:
                if self.noticed():
                    self.at = t
                    return
            except (OSError, ValueError, KeyError, RuntimeError, KafkaException) as exc:  # try again
                self.errors += 1
                if self.errors == 1:
                    log.warning("chaos ha: probe %s: %s", self.name, exc)
            self._stop.wait(POLL_S)

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.at


def kafka_leaders_moved(admin, broker_id: int, topics: Iterable[str]) -> Callable[[], bool]:
    """No partition of `topics` has `broker_id` as its leader (metadata from the live brokers)."""
    names = list(topics)

    def noticed() -> bool:
        md = admin.list_topics(timeout=2)
        for name in names:
            t = md.topics.get(name)
            if t is None or t.error is not None:
                return False
            if any(p.leader in (broker_id, -1) for p in t.partitions.values()):
                return False
        return True

    return noticed


def haproxy_down(stats_url: str, server: str) -> Callable[[], bool]:
    """The balancer's CSV stats (``<stats_url>;csv``) show `server` DOWN (or in maintenance)."""
    def noticed() -> bool:
        with urllib.request.urlopen(f"{stats_url};csv", timeout=2) as resp:
            lines = resp.read().decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        status, svname = header.index("status"), header.index("svname")
        for line in lines[1:]:
            cols = line.split(",")
            if len(cols) > status and cols[svname] == server:
                return not cols[status].startswith("UP")
        return False

    return noticed


def group_members_at_most(admin, groups: Iterable[str], members: int) -> Callable[[], bool]:
    """Every consumer group of `groups` is stable with at most `members` members (the dead one dropped)."""
    from confluent_kafka import ConsumerGroupState

    names = list(groups)

    def noticed() -> bool:
        futures = admin.describe_consumer_groups(names, request_timeout=2)
        for fut in futures.values():
            desc = fut.result(timeout=3)
            if desc.state != ConsumerGroupState.STABLE or len(desc.members) > members:
                return False
        return True

    return noticed


def spark_worker_gone(master_ui_port: int, worker_ui_port: int) -> Callable[[], bool]:
    """The Spark master's status page no longer lists the worker whose web UI is `worker_ui_port` ALIVE."""
    def noticed() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{master_ui_port}/json/", timeout=2) as resp:
            workers = json.load(resp).get("workers", [])
        return not any(w.get("webuiaddress", "").endswith(f":{worker_ui_port}") and w.get("state") == "ALIVE"
                       for w in workers)

    return noticed


def log_says(path: Path, needle: str, after_bytes: int) -> Callable[[], bool]:
    """`needle` appears in the log at `path` past its first `after_bytes` bytes."""
    def noticed() -> bool:
        with open(path, "rb") as f:
            f.seek(after_bytes)
            return needle.encode() in f.read()

    return noticed


def active_worker(app_name: str) -> str | None:
    """The HA Spark worker running the oldest live application named `app_name` (the active auditor: a
    standby is always started after it), from the master's and workers' JSON status pages."""
    def get(port: int) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as resp:
            return json.load(resp)

    try:
        apps = sorted((a["starttime"], a["id"]) for a in get(ha.LAYOUT.spark_ui_port).get("activeapps", [])
                      if a.get("name") == app_name)
        for i, port in enumerate(ha.LAYOUT.spark_worker_ui_ports, start=1):
            if apps and any(e.get("appid") == apps[0][1] for e in get(port).get("executors", [])):
                return f"spark-worker-{i}"
    except (OSError, ValueError) as exc:
        log.warning("chaos ha: the Spark status pages did not answer: %s", exc)
    return None


def probes(platform, admin, groups: list[str], topics: list[str], timeout: float):
    """`probe_for(component, member)`: the detection probe of a fault (aldebaran_lab.chaos.ha_probes)."""
    def probe_for(component: str, member: str) -> Probe | None:
        if component == "auditor":
            standby = platform.standby
            noticed = log_says(standby.log_path, "lease taken after", standby.log_path.stat().st_size)
        elif component == "dispatcher":
            noticed = group_members_at_most(admin, groups, len(platform.dispatchers) - 1)
        elif component == "kafka":
            noticed = kafka_leaders_moved(admin, int(member.rsplit("-", 1)[1]), topics)
        elif component == "minio":
            noticed = haproxy_down(f"http://127.0.0.1:{ha.LAYOUT.minio_lb_stats_port}/stats", member)
        elif component == "spark-worker":
            port = ha.LAYOUT.spark_worker_ui_ports[int(member.rsplit("-", 1)[1]) - 1]
            noticed = spark_worker_gone(ha.LAYOUT.spark_ui_port, port)
        else:
            return None
        return Probe(component, noticed, timeout)

    return probe_for
