"""The HA profile's Kafka brokers, MinIO nodes and the balancer in front of them: the core services' code,
configured as members of a quorum (services.kafka.server_properties, services.minio.MinIO's health and
bucket provisioning)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.exceptions import ConfigError
from aldebaran.settings import KafkaSettings, ObjectStoreSettings
from aldebaran_lab.services.base import Service, port_open
from aldebaran_lab.services.ha.profile import HOST, Layout
from aldebaran_lab.services.kafka import LOG4J2, Kafka, new_cluster_id, server_properties
from aldebaran_lab.services.minio import minio_health

log = logging.getLogger(__name__)


def kafka_settings(layout: Layout) -> KafkaSettings:
    """The HA cluster's Kafka settings (explicit: the caller's environment may be the core profile's)."""
    return KafkaSettings(bootstrap_servers=layout.bootstrap_servers(),
                         replication_factor=layout.replication_factor)


class KafkaNode(Kafka):
    """Broker + controller ``index`` of a KRaft cluster with a static voter set of every node."""

    start_timeout = 120.0

    def __init__(self, index: int, *, root: Path, layout: Layout) -> None:
        self.name = f"kafka-{index}"
        Service.__init__(self, root)
        self.index, self.layout, self.root = index, layout, root
        self.settings = kafka_settings(layout)
        self.host, self.port = HOST, layout.kafka_ports[index - 1]
        self.controller_port = layout.controller_ports[index - 1]
        self.address = f"{self.host}:{self.port}"
        self.data = self.home / "data"
        self.config = self.home / "server.properties"

    def cluster_id(self) -> str:
        """One id shared by every node (each formats its own storage with it), kept in the profile root."""
        path = self.root / "kafka-cluster-id"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        (self.home / "log4j2.properties").write_text(LOG4J2)
        self.config.write_text(
            server_properties(
                node_id=self.index, host=self.host, port=self.port, controller_port=self.controller_port,
                data=self.data, settings=self.settings,
                quorum=f"controller.quorum.voters={self.layout.controller_voters()}",
                replicas=self.layout.replication_factor, min_insync=self.layout.min_insync_replicas,
                extra={"broker.session.timeout.ms": self.layout.kafka_broker_session_ms,
                       "broker.heartbeat.interval.ms": self.layout.kafka_broker_heartbeat_ms,
                       "replica.lag.time.max.ms": self.layout.kafka_replica_lag_ms},
            )
        )
        if not (self.data / "meta.properties").exists():
            cluster_id = self.cluster_id()
            log.info("%s: formatting KRaft storage (cluster id %s)", self.name, cluster_id)
            # A static voter set: no --standalone / --initial-controllers.
            self._run_tool(["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.config)])

    def heap(self) -> list[str]:
        return ["-Xms128m", self.layout.kafka_heap]

    def healthy(self) -> bool:
        """This broker's port answers and the cluster's metadata lists it as a live (registered) broker."""
        from confluent_kafka.admin import AdminClient

        if not port_open(self.host, self.port):
            return False
        try:
            admin = AdminClient({"bootstrap.servers": self.address, "socket.timeout.ms": 2000, "log_level": 0})
            meta = admin.list_topics(timeout=2)
        except Exception:  # noqa: BLE001 - any failure to answer means "not healthy"
            return False
        return self.index in meta.brokers

    def after_start(self) -> None:
        """Topics are created once the whole cluster is up (services.ha.up), not per broker."""


class MinIONode(Service):
    """MinIO server ``index`` of a distributed, erasure-coded deployment (one drive per node)."""

    start_timeout = 120.0

    def __init__(self, index: int, *, root: Path, layout: Layout, env: dict[str, str]) -> None:
        self.name = f"minio-{index}"
        super().__init__(root)
        self.index, self.layout, self.root = index, layout, root
        self.port = layout.minio_ports[index - 1]
        self.address = f"{HOST}:{self.port}"
        self.data = self.home / "data"
        self.values = env

    def settings(self) -> ObjectStoreSettings:
        return ObjectStoreSettings(endpoint_url=f"http://{self.address}", access_key=self.values.get("ALDEBARAN_S3_ACCESS_KEY"),
                                   secret_key=self.values.get("ALDEBARAN_S3_SECRET_KEY"))

    def environment(self) -> dict[str, str]:
        user, password = self.values.get("ALDEBARAN_S3_ACCESS_KEY"), self.values.get("ALDEBARAN_S3_SECRET_KEY")
        if not (user and password):
            raise ConfigError("ALDEBARAN_S3_ACCESS_KEY / ALDEBARAN_S3_SECRET_KEY missing from .env.ha")
        env = dict(os.environ)
        env |= {
            "MINIO_ROOT_USER": user, "MINIO_ROOT_PASSWORD": password,
            "MINIO_BROWSER": "off", "MINIO_UPDATE": "off",
            # Every drive shares this machine's root disk: MinIO refuses that in distributed mode unless
            # told it is a test deployment.
            "MINIO_CI_CD": "on",
            "GOMEMLIMIT": self.layout.minio_memlimit,
            # This machine has /.dockerenv, so MinIO believes it runs under an orchestrator and waits forever
            # for loopback endpoints to "resolve to a valid IP" (cmd/endpoint.go UpdateIsLocal). Its own
            # escape hatch names which endpoint is this node; outside a container it is never read.
            "_MINIO_SERVER_LOCAL": self.address,
        }
        return env

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        return [str(paths.minio_binary()), "server", "--address", self.address, "--quiet",
                *self.layout.minio_endpoints(self.root)]

    def healthy(self) -> bool:
        return minio_health(self.address)

    def cluster_writable(self) -> bool:
        """The cluster as seen from this node has write quorum (/minio/health/cluster)."""
        return minio_health(self.address, "cluster")

    def after_start(self) -> None:
        from aldebaran.storage.store import S3Store

        settings = self.settings()
        if S3Store(settings).ensure_bucket():
            log.info("%s: created bucket %s", self.name, settings.bucket)


class MinIOBalancer(Service):
    """The profile's one S3 endpoint: Debian's HAProxy in front of the MinIO nodes (``make setup-ha``
    installs it). It checks each node's liveness every 0.5 s and takes a node out after two failures; a
    request whose connection is refused (a dead node) is sent to another node (``option redispatch``), so
    the clients (boto3, s3a) see a node's death only on the requests it held. In production this is a
    redundant load balancer in front of the MinIO nodes, or AWS S3's own endpoint."""

    start_timeout = 60.0

    def __init__(self, *, root: Path, layout: Layout) -> None:
        self.name = "minio-lb"
        super().__init__(root)
        self.layout = layout
        self.port = layout.minio_lb_port
        self.address = f"{HOST}:{self.port}"
        self.config = self.home / "haproxy.cfg"

    def render(self) -> str:
        servers = "".join(f"    server minio-{i} {HOST}:{p} check\n"
                          for i, p in enumerate(self.layout.minio_ports, start=1))
        return (
            "global\n    maxconn 4096\n\n"
            "defaults\n    mode http\n    timeout connect 2s\n    timeout client 300s\n    timeout server 300s\n"
            "    retries 3\n    option redispatch 1\n"
            # botocore sends PUTs with `Expect: 100-continue`; MinIO answers a failed precondition (412, a
            # conditional create that lost) before the body, botocore then reuses the connection without
            # sending it, and a kept-alive proxy connection reads the next request as that body (400).
            # One transaction per connection avoids it (MinIO itself closes such a connection).
            "    option httpclose\n\n"
            f"frontend s3\n    bind {self.address}\n    default_backend minio\n\n"
            f"listen stats\n    bind {HOST}:{self.layout.minio_lb_stats_port}\n    stats enable\n"
            "    stats uri /stats\n    stats refresh 1s\n\n"
            "backend minio\n    balance roundrobin\n    option httpchk GET /minio/health/live\n"
            "    http-check expect status 200\n    default-server inter 500ms fall 2 rise 2\n" + servers)

    def prepare(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self.render())

    def command(self) -> list[str]:
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not Path(binary).exists():
            raise ConfigError("haproxy not found: `make setup-ha` installs Debian's haproxy package")
        return [binary, "-db", "-f", str(self.config)]  # -db: in the foreground, this process is the member

    def healthy(self) -> bool:
        """At least one node answers through the balancer."""
        return minio_health(self.address)
