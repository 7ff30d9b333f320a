"""The platform's Kafka cluster: one Airflow connection feeds every Kafka client of the product.

The connection (id ``aldebaran_kafka``, ALDEBARAN_KAFKA_CONNECTION) is Airflow's Kafka connection as
apache-airflow-providers-apache-kafka's KafkaBaseHook reads it: conn_type ``kafka``, the extra holds the
librdkafka configuration, ``bootstrap.servers`` included, e.g.

    {"conn_type": "kafka", "extra": {"bootstrap.servers": "b-1.example:9096", "security.protocol": "SASL_SSL",
     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "aldebaran", "sasl.password": "<secret>",
     "ssl.ca.location": "/etc/ssl/kafka-ca.pem"}}

It is found as every connection of the product is (:mod:`aldebaran.storage.connections`): inside an Airflow
task as Airflow resolves it (UI/REST API, ``AIRFLOW_CONN_*``, secrets backend); outside Airflow
(spark-submit's driver, the streaming dispatchers, the CLI) from ``AIRFLOW_CONN_ALDEBARAN_KAFKA``, which
the tasks that start those processes hand on (:func:`connection_env`). Without a connection, a plaintext
client of ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS (the local platform's default).

Under it, every client carries the failover keys of :mod:`aldebaran.kafka.failover` (a key in the extra
wins over them). What reads it: the producers and consumers of :mod:`aldebaran.kafka.io` (auditor sinks,
dispatchers, lanes, replay, explain, health lags), the admin client of :mod:`aldebaran.kafka.admin` and the health
probe, and Spark's Kafka source and sink (:meth:`KafkaCluster.spark_options`: the Java client's names,
translated by :mod:`aldebaran.kafka.java`). The lab derives the alert watcher's ``kafka_alerts_watcher``
from it (aldebaran_lab.services.airflow).

- ``bootstrap.servers``: the extra, else ``host[:port]``, else ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS;
- ``login`` / ``password`` stand for ``sasl.username`` / ``sasl.password`` when the extra has none (Airflow
  masks the password field; it also masks extra keys named like ``*password*``);
- ``topic``, ``flush_timeout``, ``fast``: the ``kafka`` alert channel's own extras (a channel named
  ``kafka`` is defined by this same connection id), never given to the platform's clients;
- ``spark_kafka_options``: Java client properties for Spark, given as they are (aldebaran.kafka.java);
- OAUTHBEARER on Amazon MSK brokers gets the IAM token callback, as KafkaBaseHook adds it (needs
  aws-msk-iam-sasl-signer-python); dotted-path callbacks (``oauth_cb`` as a string) are refused.

Errors name the connection and the field, never a secret; authentication failures say which
connection's credentials were refused.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

from aldebaran.storage import connections
from aldebaran.storage.connections import Connection, scrub
from aldebaran.exceptions import AldebaranError, ConfigError
from aldebaran.kafka import failover
from aldebaran.kafka.java import MSK_BOOTSTRAP, SPARK_OPTIONS_KEY, spark_options
from aldebaran.settings import KafkaSettings, load

log = logging.getLogger(__name__)

CHANNEL_KEYS = ("topic", "flush_timeout", "fast")  # the kafka channel's (delivery.channels.kafka)
CALLBACK_KEYS = ("error_cb", "throttle_cb", "stats_cb", "log_cb", "oauth_cb", "on_commit")
SECRET_KEY = re.compile(r"password|secret|ssl\.key\.pem", re.IGNORECASE)
# Data-source options Spark shows redacted (plans, UI): the JAAS configuration holds the password.
SPARK_REDACTION = r"(?i)url|jaas|password|secret|token|ssl\.keystore\.key|ssl\.truststore\.certificates"
_AUTH_ERRORS = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL")


@dataclass(frozen=True)
class KafkaCluster:
    """Where and how to reach the cluster. `source` names where it came from, for errors."""

    source: str
    config: dict[str, Any] = field(repr=False)  # librdkafka configuration, bootstrap.servers included
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # the connection's extra (Spark options)

    @property
    def bootstrap_servers(self) -> str:
        return str(self.config["bootstrap.servers"])

    @property
    def protocol(self) -> str:
        return str(self.config.get("security.protocol", "PLAINTEXT")).upper()

    def describe(self) -> str:
        """``<brokers> (<source>)`` for messages: never a secret."""
        return f"{self.bootstrap_servers} ({self.source})"

    def secrets(self) -> list[str]:
        return [str(v) for k, v in self.config.items() if SECRET_KEY.search(k) and v]

    def client_config(self) -> dict[str, Any]:
        """A fresh librdkafka configuration for one client (producer, consumer or admin)."""
        conf = dict(self.config)
        if self.protocol != "PLAINTEXT":
            conf.setdefault("error_cb", self._on_error)
        mechanism = str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "").upper()
        if mechanism == "OAUTHBEARER" and "oauth_cb" not in conf:
            found = MSK_BOOTSTRAP.search(self.bootstrap_servers)
            if found:
                conf["oauth_cb"] = _msk_iam_token(self.source, found.group(0).split(".")[2])
        return conf

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source and sink (``kafka.``-prefixed Java client properties)."""
        return spark_options(self.config, self.extra, self.source)

    def _on_error(self, err) -> None:
        """librdkafka's error callback (secured clients): authentication failures at error level,
        naming the connection; other errors (brokers down, ...) at warning."""
        text = scrub(err.str(), self.secrets())
        if is_auth_error(err):
            log.error("Kafka %s refused the credentials of %s: %s", self.bootstrap_servers, self.source, text)
        else:
            log.warning("Kafka %s (%s): %s", self.bootstrap_servers, self.source, text)

    def diagnose(self, timeout: float = 6.0):
        """Why a secured cluster does not answer: the authentication error a fresh client gets within
        `timeout`, or None. (A failed metadata request says only "transport failure"; librdkafka
        reports the refused credentials to the error callback, served by poll.)"""
        if self.protocol == "PLAINTEXT":
            return None
        from confluent_kafka import Producer

        seen: list = []
        probe = Producer({**self.client_config(), "error_cb": seen.append, "log_level": 0})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not any(is_auth_error(e) for e in seen):
            probe.poll(0.2)
        return next((e for e in seen if is_auth_error(e)), None)

    def failure(self, what: str, exc: BaseException) -> AldebaranError:
        """A confluent-kafka exception → an error naming the cluster and the connection, scrubbed;
        an authentication failure is a ConfigError about the connection's credentials."""
        err = exc.args[0] if exc.args else None
        if err is not None and hasattr(err, "code") and not is_auth_error(err):
            err = self.diagnose() or err
        text = scrub(err.str() if hasattr(err, "str") else str(exc), self.secrets())
        if err is not None and is_auth_error(err):
            return ConfigError(f"{what}: Kafka {self.bootstrap_servers} refused the credentials of {self.source} "
                               f"(its login/password or extra.sasl.username/sasl.password, or its TLS "
                               f"settings): {text}")
        return AldebaranError(f"{what}: Kafka {self.describe()}: {text}")


def is_auth_error(err) -> bool:
    """True for a KafkaError about authentication (SASL credentials, TLS handshake)."""
    from confluent_kafka import KafkaError

    if not hasattr(err, "code"):
        return False
    codes = {getattr(KafkaError, name, None) for name in _AUTH_ERRORS} - {None}
    return err.code() in codes or "authentication" in err.str().lower()


def _msk_iam_token(source: str, region: str):
    """The OAUTHBEARER callback of Amazon MSK with IAM (as KafkaBaseHook adds it)."""
    try:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    except ImportError:
        raise ConfigError(f"{source}: OAUTHBEARER on Amazon MSK (IAM) needs the package aws-msk-iam-sasl-signer-python "
                          "(pip install 'apache-airflow-providers-apache-kafka[msk]')") from None

    def oauth_cb(_config: str) -> tuple[str, float]:
        token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
        return token, expiry_ms / 1000

    return oauth_cb


def from_connection(conn: Connection, fallback_bootstrap: str) -> KafkaCluster:
    """The cluster a Kafka connection describes (module docstring)."""
    if conn.conn_type not in (None, "kafka"):
        raise conn.error("field conn_type", f"must be kafka (got {conn.conn_type!r}): the extra holds the "
                                            "librdkafka configuration, as in Airflow's Kafka connection")
    config: dict[str, Any] = {}
    for key, value in conn.extra.items():
        if key in CHANNEL_KEYS or key == SPARK_OPTIONS_KEY:
            continue
        if key in CALLBACK_KEYS:
            raise conn.error(f"field extra.{key}", "is not supported: Aldebaran's clients take no dotted-path "
                                                   "callbacks (Amazon MSK IAM's token callback is built in)")
        if not isinstance(value, (str, int, float, bool)):
            raise conn.error(f"field extra.{key}", "must be a string, number or boolean (librdkafka configuration)")
        config[key] = value
    if not config.get("bootstrap.servers"):
        config["bootstrap.servers"] = (conn.host + (f":{conn.port}" if conn.port else "")) if conn.host \
            else fallback_bootstrap
    if conn.login and not config.get("sasl.username"):
        config["sasl.username"] = conn.login
    if conn.password is not None and not config.get("sasl.password"):
        config["sasl.password"] = conn.password.get_secret_value()
    cluster = KafkaCluster(source=conn.source, config=config, extra=dict(conn.extra))
    _check(conn, cluster)
    return cluster


def _check(conn: Connection, cluster: KafkaCluster) -> None:
    """Cheap checks librdkafka would otherwise report later and less clearly."""
    protocol = cluster.protocol
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise conn.error("field extra.security.protocol", "must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    mechanism = str(cluster.config.get("sasl.mechanism") or cluster.config.get("sasl.mechanisms") or "").upper()
    if protocol.startswith("SASL") and (mechanism == "PLAIN" or mechanism.startswith("SCRAM")):
        for key, name in (("sasl.username", "login"), ("sasl.password", "password")):
            if not cluster.config.get(key):
                raise conn.error(f"field extra.{key}", f"is required with SASL {mechanism} (or the connection's {name})")


def resolve(settings: KafkaSettings | None = None) -> KafkaCluster:
    """The cluster from the connection ALDEBARAN_KAFKA_CONNECTION where this process finds it, else
    ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS (plaintext). Resolved once per settings object and kept with it
    (pickled along to Spark's executors: they use the driver's resolution)."""
    settings = settings or load(KafkaSettings)
    cached = settings._cluster
    if isinstance(cached, KafkaCluster):
        return cached
    conn = connections.lookup(settings.connection)
    if conn is None:
        cluster = KafkaCluster(source="ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS",
                               config={"bootstrap.servers": settings.bootstrap_servers})
    else:
        cluster = from_connection(conn, settings.bootstrap_servers)
    settings._cluster = cluster
    return cluster


def connection_env(settings: KafkaSettings | None = None) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` of the Kafka connection as this process finds it, for a process it starts
    outside Airflow ({} without one). The value holds secrets: a child's environment only, never a log."""
    settings = settings or load(KafkaSettings)
    return connections.connections_env([settings.connection])


def protect_spark(spark) -> None:
    """Have Spark redact the Kafka source/sink options that carry secrets (JAAS configuration, PEM key)
    wherever it shows options (plans, UI)."""
    spark.conf.set("spark.sql.redaction.options.regex", SPARK_REDACTION)


def spark_kafka_options(spark, settings: KafkaSettings | None = None, role: str = "source") -> dict[str, str]:
    """The options of Spark's Kafka `role` ("source" or "sink") for `spark` (secrets redacted in its plans):
    the failover options (:func:`aldebaran.kafka.failover.java`), then :func:`resolve`'s
    :meth:`KafkaCluster.spark_options`, which win."""
    settings = settings or load(KafkaSettings)
    options = resolve(settings).spark_options()
    if len(options) > 2:  # more than bootstrap.servers and security.protocol
        protect_spark(spark)
    return {**failover.java(role), **options}
