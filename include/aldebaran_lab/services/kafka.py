"""Single-node KRaft Kafka on 127.0.0.1, from the jars `make setup` resolved from Maven Central."""

from __future__ import annotations

import base64
import logging
import os
import uuid
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.exceptions import ServiceError
from aldebaran.runtime.logs import LOG4J2_DATE
from aldebaran.settings import KafkaSettings, load
from aldebaran_lab.services import kafka_tls
from aldebaran_lab.services.base import Service

log = logging.getLogger(__name__)

# The brokers' log lines with the platform's time (ISO-8601 UTC: aldebaran.runtime.logs.LOG4J2_DATE), so they join
# with the platform's own and Spark's.
LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [{date}] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = warn
logger.coord.name = org.apache.kafka.coordinator
logger.coord.level = warn
logger.storage.name = org.apache.kafka.storage
logger.storage.level = warn
logger.log.name = kafka.log
logger.log.level = warn
""".replace("{date}", LOG4J2_DATE)



def new_cluster_id() -> str:
    """A random KRaft cluster id (URL-safe base64 of a UUID, 22 characters).

    Like Kafka's own ``Uuid.randomUuid()``, ids starting with ``-`` are drawn
    again: ``kafka-storage format -t -abc...`` parses the id as an option and
    fails with "argument --cluster-id/-t: expected one argument" (this broke
    a CI run, roughly one start in 64).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id

def server_properties(*, node_id: int, host: str, port: int, controller_port: int, data: Path,
                      settings: KafkaSettings, quorum: str, replicas: int = 1, min_insync: int = 1,
                      extra: dict[str, object] | None = None, secure_port: int = 0) -> str:
    """A combined broker+controller's server.properties. ``quorum`` names the controllers: the single
    node's ``controller.quorum.bootstrap.servers`` (formatted ``--standalone``) or the HA profile's static
    ``controller.quorum.voters``. ``replicas``/``min_insync`` apply to new topics and Kafka's internal ones;
    ``extra`` adds (or overrides) settings, e.g. the HA profile's failure-detection timeouts or the
    secured listener's (kafka_tls.listener_properties). ``secure_port``: a SASL_SSL listener beside the
    plaintext one (0: none; inter-broker and controller traffic stay plaintext)."""
    max_bytes = settings.dlq_record_bytes  # the largest topic limit (the DLQ's)
    secure = f",SASL_SSL://{host}:{secure_port}" if secure_port else ""
    lines = [
        "process.roles=broker,controller",
        f"node.id={node_id}",
        quorum,
        f"listeners=PLAINTEXT://{host}:{port}{secure},CONTROLLER://{host}:{controller_port}",
        f"advertised.listeners=PLAINTEXT://{host}:{port}{secure}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        + (",SASL_SSL:SASL_SSL" if secure_port else ""),
        f"log.dirs={data}",
        f"num.partitions={settings.partitions}",
        f"default.replication.factor={replicas}",
        f"min.insync.replicas={min_insync}",
        f"offsets.topic.replication.factor={replicas}",
        "offsets.topic.num.partitions=4",
        f"transaction.state.log.replication.factor={replicas}",
        f"transaction.state.log.min.isr={min_insync}",
        f"share.coordinator.state.topic.replication.factor={replicas}",
        f"share.coordinator.state.topic.min.isr={min_insync}",
        "unclean.leader.election.enable=false",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        f"message.max.bytes={max_bytes}",
        f"replica.fetch.max.bytes={max_bytes}",
        "log.retention.hours=168",
        "log.segment.bytes=268435456",
        *(f"{k}={v}" for k, v in (extra or {}).items()),
        "",
    ]
    return "\n".join(lines)


class Kafka(Service):
    """The single node: a plaintext listener (ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS, what the platform uses) and
    a secured one (SASL_SSL with SCRAM-SHA-512 and PLAIN on ALDEBARAN_KAFKA_SECURE_PORT, default 9094;
    services.kafka_tls) for trying and testing the Kafka connection's TLS and SASL."""

    name = "kafka"
    start_timeout = 90.0
    stop_timeout = 30.0
    controller_port = 9093

    def __init__(self) -> None:
        super().__init__()
        self.settings = load(KafkaSettings)
        host, _, port = self.settings.bootstrap_servers.split(",")[0].rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)
        self.address = f"{self.host}:{self.port}"
        self.data = self.home / "data"
        self.config = self.home / "server.properties"
        self.secure_port = kafka_tls.secure_port()

    def secure_listener(self) -> kafka_tls.SecureListener | None:
        if not self.secure_port:
            return None
        return kafka_tls.SecureListener(bootstrap_servers=f"{self.host}:{self.secure_port}",
                                        ca_location=str(self.home / "tls" / "ca.pem"), username=kafka_tls.USER,
                                        mechanisms=kafka_tls.MECHANISMS)

    def java(self) -> str:
        return paths.java()

    def classpath(self) -> str:
        return f"{paths.jar_dir('kafka-broker')}/*"

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        (self.home / "log4j2.properties").write_text(LOG4J2)
        secured: dict[str, object] = {}
        if self.secure_port and not kafka_tls.has_password():
            # An older .env (before the secured listener): the broker starts as before, without it.
            log.warning("kafka: %s is not set, so no SASL_SSL listener this time (`aldebaran services up` "
                        "generates it into .env)", kafka_tls.PASSWORD_ENV)
            self.secure_port = 0
        if self.secure_port:
            _, keystore = kafka_tls.ensure_tls(self.home / "tls", self.host)
            secured = kafka_tls.listener_properties(self.host, self.secure_port, keystore, kafka_tls.secure_password())
        self.config.write_text(
            server_properties(
                node_id=1, host=self.host, port=self.port, controller_port=self.controller_port,
                data=self.data, settings=self.settings,
                quorum=f"controller.quorum.bootstrap.servers={self.host}:{self.controller_port}",
                secure_port=self.secure_port, extra=secured,
            )
        )
        os.chmod(self.config, 0o600)  # the PLAIN user's password is in it
        if not (self.data / "meta.properties").exists():
            cluster_id = new_cluster_id()
            log.info("kafka: formatting KRaft storage in %s (cluster id %s)", self.data, cluster_id)
            self._run_tool(
                ["kafka.tools.StorageTool", "format", "--standalone", "-t", cluster_id, "-c", str(self.config)]
            )

    def _run_tool(self, args: list[str]) -> None:
        import subprocess

        result = subprocess.run(
            [self.java(), "-cp", self.classpath(), f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}", *args],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ServiceError(f"kafka: {args[0]} failed ({result.returncode}): {result.stderr[-2000:]}")

    def heap(self) -> list[str]:
        return ["-Xms256m", os.environ.get("ALDEBARAN_KAFKA_HEAP", "-Xmx1g")]

    def command(self) -> list[str]:
        return [
            self.java(),
            *self.heap(),
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-cp",
            self.classpath(),
            "kafka.Kafka",
            str(self.config),
        ]

    def healthy(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            admin = AdminClient({"bootstrap.servers": self.address, "socket.timeout.ms": 2000, "log_level": 0})
            admin.list_topics(timeout=2)
            return True
        except Exception:  # noqa: BLE001 - any failure to answer means "not healthy yet"
            return False

    def after_start(self) -> None:
        from aldebaran.kafka.admin import ensure_topics

        created = ensure_topics(self.settings)
        for topic in created:
            log.info("kafka: created topic %s (%d partitions)", topic, self.settings.partitions)
        listener = self.secure_listener()
        description = self.home / kafka_tls.DESCRIPTION
        if listener is None:
            description.unlink(missing_ok=True)
            return
        kafka_tls.create_scram_user(self.address, kafka_tls.secure_password())
        kafka_tls.write_description(self.home, listener)
        log.info("kafka: SASL_SSL listener on %s (SCRAM-SHA-512, PLAIN; user %s, CA %s)",
                 listener.bootstrap_servers, listener.username, listener.ca_location)
