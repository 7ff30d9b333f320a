"""librdkafka configuration → the Java Kafka client's, for Spark's Kafka source and sink.

The platform's Kafka connection holds librdkafka configuration (as Airflow's Kafka connection does:
confluent-kafka reads it as it is). Spark's Kafka source and sink run the *Java* client, whose names
and forms differ for everything about security; this module translates those, and only those:

=============================================  ============================================================
librdkafka                                     Java client
=============================================  ============================================================
``bootstrap.servers``, ``security.protocol``    the same (protocol upper-cased)
``sasl.mechanism`` / ``sasl.mechanisms``        ``sasl.mechanism`` (one mechanism: Java takes one)
``sasl.username`` + ``sasl.password``           ``sasl.jaas.config``: ``PlainLoginModule`` (PLAIN) or
                                                ``ScramLoginModule`` (SCRAM-SHA-256/512)
OAUTHBEARER on an MSK broker (IAM)              ``software.amazon.msk.auth.iam`` handlers (the
                                                aws-msk-iam-auth jar must be on Spark's classpath)
OAUTHBEARER ``sasl.oauthbearer.method=oidc``    ``OAuthBearerLoginCallbackHandler`` + token endpoint,
                                                clientId/clientSecret/scope in the JAAS config
GSSAPI ``sasl.kerberos.*``                      ``sasl.kerberos.service.name`` + ``Krb5LoginModule``
``ssl.ca.location`` (a PEM file)                ``ssl.truststore.type=PEM`` + ``ssl.truststore.location``
``ssl.ca.pem``                                  ``ssl.truststore.type=PEM`` + ``ssl.truststore.certificates``
``ssl.certificate.location|pem`` +              ``ssl.keystore.type=PEM`` + ``ssl.keystore.certificate.chain``
``ssl.key.location|pem`` (mutual TLS)           + ``ssl.keystore.key`` (the PEM text: it reaches every
                                                executor; the key must be PKCS#8)
``ssl.key.password``                            ``ssl.key.password``
``ssl.endpoint.identification.algorithm``       the same (``none`` → empty: no host name check)
=============================================  ============================================================

Every other librdkafka key is left out (tuning and client ids are each client's own). Java-only
options go explicitly in the connection's extra ``spark_kafka_options`` (a JSON object of Java client
properties, with or without the ``kafka.`` prefix), applied last: e.g. a JAAS configuration of your
own, ``ssl.truststore.type=JKS`` with a truststore file, ``sasl.login.callback.handler.class``.
Errors name the connection and the field, never a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aldebaran.exceptions import ConfigError

SPARK_OPTIONS_KEY = "spark_kafka_options"
MSK_BOOTSTRAP = re.compile(r"\.kafka(?:-serverless)?\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?(?::\d+)?(?=$|[,\s])",
                           re.IGNORECASE)
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
MSK_IAM_HANDLER = "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"
PKCS8_HEADERS = ("-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----")


def jaas_quote(value: str) -> str:
    """A JAAS option value: double-quoted, backslash and double quote escaped (Java's JaasConfig
    reads it with a StreamTokenizer)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jaas(module: str, **options: str | bool | None) -> str:
    """``<module> required k="v" ...;`` (booleans unquoted, None left out)."""
    parts = [f"{k}={str(v).lower() if isinstance(v, bool) else jaas_quote(v)}"
             for k, v in options.items() if v is not None]
    return " ".join([module, "required", *parts]) + ";"


class _Config:
    """Typed reads of the librdkafka configuration; errors name `source` and the field."""

    def __init__(self, config: Mapping[str, Any], source: str) -> None:
        self.config, self.source = config, source

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}: field extra.{key} {problem}")

    def get(self, key: str) -> str | None:
        value = self.config.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, (dict, list)):
            raise self.error(key, "must be a string")
        return str(value)

    def need(self, key: str, why: str) -> str:
        value = self.get(key)
        if value is None:
            raise self.error(key, f"is required ({why})")
        return value

    def pem(self, location_key: str, pem_key: str) -> str | None:
        """The PEM text of `pem_key`, else of the file `location_key` names."""
        inline = self.get(pem_key)
        if inline is not None:
            return inline
        location = self.get(location_key)
        if location is None:
            return None
        path = Path(location)
        if not path.is_file():
            raise self.error(location_key, "must be the path of an existing PEM file (the Java client "
                                           "reads a file, not a directory or 'probe')")
        return path.read_text()


def java_config(config: Mapping[str, Any], source: str) -> dict[str, str]:
    """The Java client properties (no ``kafka.`` prefix) for librdkafka `config` (module docstring);
    the extra ``spark_kafka_options`` of the connection is applied last by :func:`spark_options`."""
    c = _Config(config, source)
    out = {"bootstrap.servers": c.need("bootstrap.servers", "the brokers, host:port[,host:port]")}
    protocol = (c.get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise c.error("security.protocol", "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
    out["security.protocol"] = protocol
    if protocol.startswith("SASL"):
        out.update(_sasl(c, out["bootstrap.servers"]))
    if protocol.endswith("SSL"):
        out.update(_ssl(c))
    return out


def _sasl(c: _Config, bootstrap: str) -> dict[str, str]:
    mechanisms = c.get("sasl.mechanism") or c.get("sasl.mechanisms") or "GSSAPI"
    key = "sasl.mechanism" if c.get("sasl.mechanism") else "sasl.mechanisms"
    mechanism = mechanisms.strip().upper()
    if "," in mechanism:
        raise c.error(key, "must name one mechanism for the Java client (Spark's Kafka source)")
    out = {"sasl.mechanism": mechanism}
    if mechanism in LOGIN_MODULES:
        username = c.need("sasl.username", f"{mechanism} needs the user name (or the connection's login)")
        password = c.need("sasl.password", f"{mechanism} needs the password (or the connection's password)")
        out["sasl.jaas.config"] = jaas(LOGIN_MODULES[mechanism], username=username, password=password)
    elif mechanism == "OAUTHBEARER":
        if MSK_BOOTSTRAP.search(bootstrap):  # Amazon MSK with IAM, as Airflow's Kafka hook detects it
            out.update({"sasl.jaas.config": f"{OAUTH_MODULE} required;",
                        "sasl.login.callback.handler.class": MSK_IAM_HANDLER,
                        "sasl.client.callback.handler.class": MSK_IAM_HANDLER})
        elif (c.get("sasl.oauthbearer.method") or "").lower() == "oidc":
            out["sasl.oauthbearer.token.endpoint.url"] = c.need(
                "sasl.oauthbearer.token.endpoint.url", "the OIDC token endpoint")
            out["sasl.login.callback.handler.class"] = OIDC_HANDLER
            out["sasl.jaas.config"] = jaas(
                OAUTH_MODULE, clientId=c.need("sasl.oauthbearer.client.id", "OIDC client id"),
                clientSecret=c.need("sasl.oauthbearer.client.secret", "OIDC client secret"),
                scope=c.get("sasl.oauthbearer.scope"))
        else:
            raise c.error("sasl.oauthbearer.method", f"is not oidc and the brokers are not Amazon MSK: give the "
                                                     f"Java client's OAUTHBEARER options in extra.{SPARK_OPTIONS_KEY}")
    elif mechanism == "GSSAPI":
        out["sasl.kerberos.service.name"] = c.get("sasl.kerberos.service.name") or "kafka"
        keytab, principal = c.get("sasl.kerberos.keytab"), c.get("sasl.kerberos.principal")
        if keytab and principal:
            out["sasl.jaas.config"] = jaas("com.sun.security.auth.module.Krb5LoginModule", useKeyTab=True,
                                           storeKey=True, keyTab=keytab, principal=principal)
    else:
        raise c.error(key, "must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or GSSAPI")
    return out


def _ssl(c: _Config) -> dict[str, str]:
    out: dict[str, str] = {}
    if str(c.get("enable.ssl.certificate.verification") or "true").lower() in ("false", "0"):
        raise c.error("enable.ssl.certificate.verification", "false has no Java equivalent: give the "
                                                             "brokers' CA in ssl.ca.location instead")
    ca = c.get("ssl.ca.pem")
    if ca is not None:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": ca})
    elif c.get("ssl.ca.location") is not None:
        location = c.need("ssl.ca.location", "")
        if not Path(location).is_file():
            raise c.error("ssl.ca.location", "must be the path of an existing PEM file (the Java client reads "
                                             "a file, not a directory or 'probe')")
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": location})
    cert = c.pem("ssl.certificate.location", "ssl.certificate.pem")
    key = c.pem("ssl.key.location", "ssl.key.pem")
    if (cert is None) != (key is None):
        missing = "ssl.key.location" if key is None else "ssl.certificate.location"
        raise c.error(missing, "is required with the other half of the client certificate (mutual TLS)")
    if cert is not None and key is not None:
        if not key.lstrip().startswith(PKCS8_HEADERS):
            field = "ssl.key.pem" if c.get("ssl.key.pem") else "ssl.key.location"
            raise c.error(field, "must hold a PKCS#8 key (BEGIN PRIVATE KEY) for the Java client; convert it with "
                                 "`openssl pkcs8 -topk8 -in key.pem -out key.p8.pem` (add -nocrypt if unencrypted)")
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": cert, "ssl.keystore.key": key})
    if c.get("ssl.key.password") is not None:
        out["ssl.key.password"] = c.need("ssl.key.password", "")
    algorithm = c.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm
    return out


def explicit_options(extra: Mapping[str, Any], source: str) -> dict[str, str]:
    """The extra ``spark_kafka_options``: Java client properties given as they are."""
    given = extra.get(SPARK_OPTIONS_KEY) or {}
    if isinstance(given, str):
        import json

        try:
            given = json.loads(given)
        except json.JSONDecodeError:
            raise ConfigError(f"{source}: field extra.{SPARK_OPTIONS_KEY} must be a JSON object") from None
    if not isinstance(given, dict) or not all(isinstance(v, (str, int, float, bool)) for v in given.values()):
        raise ConfigError(f"{source}: field extra.{SPARK_OPTIONS_KEY} must be an object of Java client "
                          "properties (string, number or boolean values)")
    return {k.removeprefix("kafka."): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in given.items()}


def spark_options(config: Mapping[str, Any], extra: Mapping[str, Any], source: str) -> dict[str, str]:
    """Options of Spark's Kafka source/sink (``kafka.``-prefixed): :func:`java_config` of the librdkafka
    `config`, then the connection's ``spark_kafka_options``."""
    java = {**java_config(config, source), **explicit_options(extra, source)}
    return {f"kafka.{k}": v for k, v in java.items()}
