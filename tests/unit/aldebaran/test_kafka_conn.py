"""The platform's Kafka connection: librdkafka configuration from the connection (aldebaran.kafka_conn) and its
translation into the Java client's options for Spark (aldebaran.kafka_java). No broker needed."""

from __future__ import annotations

import json

import pytest

from aldebaran.connections import Connection
from aldebaran.exceptions import ConfigError
from aldebaran.kafka_conn import connection_env, from_connection, resolve
from aldebaran.kafka_java import java_config, spark_options
from aldebaran.settings import KafkaSettings

SECRET = "s3cr3t-pa\"ss\\word"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
PKCS8 = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n"


@pytest.fixture
def clean(monkeypatch):
    for var in ("AIRFLOW_CONN_ALDEBARAN_KAFKA", "AIRFLOW_CONN_OTHER_KAFKA", "ALDEBARAN_KAFKA_CONNECTION",
                "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def conn(extra: dict, **fields) -> Connection:
    return Connection.from_fields("AIRFLOW_CONN_ALDEBARAN_KAFKA", {"conn_type": "kafka", "extra": extra, **fields})


# --- librdkafka → Java -------------------------------------------------------------------------------
def test_plaintext_keeps_only_the_brokers():
    assert java_config({"bootstrap.servers": "b:9092", "linger.ms": 5, "group.id": "g"}, "X") == {
        "bootstrap.servers": "b:9092", "security.protocol": "PLAINTEXT"}


@pytest.mark.parametrize(("mechanism", "module"), [("SCRAM-SHA-512", SCRAM), ("SCRAM-SHA-256", SCRAM), ("PLAIN", PLAIN)])
def test_sasl_user_and_password_become_a_jaas_configuration(mechanism, module):
    java = java_config({"bootstrap.servers": "b:9094", "security.protocol": "sasl_ssl", "sasl.mechanisms": mechanism,
                        "sasl.username": "alice", "sasl.password": SECRET}, "X")
    assert java["security.protocol"] == "SASL_SSL"
    assert java["sasl.mechanism"] == mechanism
    # JAAS quoting: a backslash and a double quote are escaped with a backslash.
    assert java["sasl.jaas.config"] == f'{module} required username="alice" password="s3cr3t-pa\\"ss\\\\word";'


def test_a_pem_ca_file_becomes_a_pem_truststore(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text(CERT)
    java = java_config({"bootstrap.servers": "b:9093", "security.protocol": "SSL", "ssl.ca.location": str(ca)}, "X")
    assert java == {"bootstrap.servers": "b:9093", "security.protocol": "SSL",
                    "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)}


def test_mutual_tls_certificate_and_key_become_a_pem_keystore(tmp_path):
    (tmp_path / "client.pem").write_text(CERT)
    (tmp_path / "client.key").write_text(PKCS8)
    java = java_config({"bootstrap.servers": "b:9093", "security.protocol": "SSL", "ssl.ca.pem": CERT,
                        "ssl.certificate.location": str(tmp_path / "client.pem"),
                        "ssl.key.location": str(tmp_path / "client.key"), "ssl.key.password": "kp",
                        "ssl.endpoint.identification.algorithm": "none"}, "X")
    assert java == {"bootstrap.servers": "b:9093", "security.protocol": "SSL",
                    "ssl.truststore.type": "PEM", "ssl.truststore.certificates": CERT,
                    "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": CERT, "ssl.keystore.key": PKCS8,
                    "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": ""}


def test_a_pkcs1_key_is_refused_naming_the_field(tmp_path):
    (tmp_path / "client.key").write_text("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n")
    with pytest.raises(ConfigError, match=r"^X: field extra.ssl.key.location must hold a PKCS#8 key"):
        java_config({"bootstrap.servers": "b", "security.protocol": "SSL", "ssl.certificate.pem": CERT,
                     "ssl.key.location": str(tmp_path / "client.key")}, "X")


def test_msk_iam_over_oauthbearer_uses_the_iam_handlers():
    java = java_config({"bootstrap.servers": "b-1.c.abc.c2.kafka.eu-west-1.amazonaws.com:9098",
                        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "X")
    assert java["sasl.login.callback.handler.class"] == "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"
    assert java["sasl.jaas.config"] == "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


def test_oidc_oauthbearer_names_the_token_endpoint_and_client():
    java = java_config({"bootstrap.servers": "b:9096", "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "cid",
                        "sasl.oauthbearer.client.secret": "cs", "sasl.oauthbearer.token.endpoint.url": "https://idp/t"},
                       "X")
    assert java["sasl.oauthbearer.token.endpoint.url"] == "https://idp/t"
    assert java["sasl.jaas.config"].endswith('required clientId="cid" clientSecret="cs";')


@pytest.mark.parametrize(("config", "message"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": ""},
     "X: field extra.sasl.password is required"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN,SCRAM-SHA-256"},
     "X: field extra.sasl.mechanisms must name one mechanism"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"}, "X: field extra.ssl.ca.location must be"),
    ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"},
     "X: field extra.enable.ssl.certificate.verification false has no Java equivalent"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "X: field extra.sasl.oauthbearer.method"),
])
def test_untranslatable_configuration_names_the_field_never_the_secret(config, message):
    with pytest.raises(ConfigError) as exc:
        java_config({"bootstrap.servers": "b:9092", "sasl.password": SECRET, **config}, "X")
    assert str(exc.value).startswith(message)
    assert SECRET not in str(exc.value)


def test_explicit_java_options_come_last_with_or_without_the_prefix():
    options = spark_options({"bootstrap.servers": "b:9092"}, {"spark_kafka_options": {
        "kafka.ssl.truststore.type": "JKS", "ssl.truststore.location": "/t.jks", "security.protocol": "SSL"}}, "X")
    assert options == {"kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "SSL",
                       "kafka.ssl.truststore.type": "JKS", "kafka.ssl.truststore.location": "/t.jks"}


def test_explicit_java_options_must_be_an_object():
    with pytest.raises(ConfigError, match="X: field extra.spark_kafka_options must be"):
        spark_options({"bootstrap.servers": "b"}, {"spark_kafka_options": ["a"]}, "X")


# --- the connection → librdkafka ---------------------------------------------------------------------
def test_the_extra_is_the_librdkafka_configuration_without_the_channel_keys():
    cluster = from_connection(conn({"bootstrap.servers": "b:9092", "linger.ms": 10, "topic": "fwd", "fast": True,
                                    "flush_timeout": 5, "spark_kafka_options": {"x": "y"}}), "fallback:9092")
    assert cluster.config == {"bootstrap.servers": "b:9092", "linger.ms": 10}
    assert cluster.describe() == "b:9092 (AIRFLOW_CONN_ALDEBARAN_KAFKA)"


def test_brokers_from_host_and_port_else_the_setting():
    assert from_connection(conn({}, host="h", port=9096), "f:1").bootstrap_servers == "h:9096"
    assert from_connection(conn({}), "f:1").bootstrap_servers == "f:1"


def test_login_and_password_stand_for_the_sasl_user():
    cluster = from_connection(conn({"bootstrap.servers": "b", "security.protocol": "SASL_SSL",
                                    "sasl.mechanism": "SCRAM-SHA-512"}, login="u", password=SECRET), "f")
    assert (cluster.config["sasl.username"], cluster.config["sasl.password"]) == ("u", SECRET)
    assert SECRET not in repr(cluster) and cluster.secrets() == [SECRET]


@pytest.mark.parametrize(("fields", "message"), [
    ({"conn_type": "http"}, "AIRFLOW_CONN_ALDEBARAN_KAFKA: field conn_type must be kafka"),
    ({"extra": {"oauth_cb": "my.module.cb"}}, "AIRFLOW_CONN_ALDEBARAN_KAFKA: field extra.oauth_cb is not supported"),
    ({"password": None, "extra": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                  "sasl.username": "u"}},
     "AIRFLOW_CONN_ALDEBARAN_KAFKA: field extra.sasl.password is required with SASL SCRAM-SHA-512"),
    ({"extra": {"security.protocol": "TLS"}}, "AIRFLOW_CONN_ALDEBARAN_KAFKA: field extra.security.protocol must be"),
    ({"extra": {"linger.ms": {"a": 1}}}, "AIRFLOW_CONN_ALDEBARAN_KAFKA: field extra.linger.ms must be a string"),
])
def test_connection_errors_name_the_connection_and_the_field(fields, message):
    with pytest.raises(ConfigError) as exc:
        from_connection(Connection.from_fields("AIRFLOW_CONN_ALDEBARAN_KAFKA",
                                               {"conn_type": "kafka", "password": SECRET, **fields}), "f")
    assert str(exc.value).startswith(message)
    assert SECRET not in str(exc.value)


def test_resolve_outside_airflow_reads_the_env_var_else_the_settings(clean):
    clean.setenv("ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "plain:9092")
    fallback = resolve(KafkaSettings())
    assert (fallback.config, fallback.source) == ({"bootstrap.servers": "plain:9092"}, "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS")
    assert connection_env(KafkaSettings()) == {}
    value = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "sec:9094", "security.protocol": "SSL"}})
    clean.setenv("AIRFLOW_CONN_ALDEBARAN_KAFKA", value)
    assert resolve(KafkaSettings()).config == {"bootstrap.servers": "sec:9094", "security.protocol": "SSL"}
    assert json.loads(connection_env(KafkaSettings())["AIRFLOW_CONN_ALDEBARAN_KAFKA"])["extra"]["bootstrap.servers"] \
        == "sec:9094"


def test_the_connection_id_is_a_setting(clean):
    clean.setenv("ALDEBARAN_KAFKA_CONNECTION", "other_kafka")
    clean.setenv("AIRFLOW_CONN_OTHER_KAFKA", "kafka://broker-9:9092")
    cluster = resolve(KafkaSettings())
    assert (cluster.bootstrap_servers, cluster.source) == ("broker-9:9092", "AIRFLOW_CONN_OTHER_KAFKA")


def test_secured_clients_report_errors_through_logging_plaintext_ones_keep_librdkafkas():
    plain = from_connection(conn({"bootstrap.servers": "b"}), "f").client_config()
    secured = from_connection(conn({"bootstrap.servers": "b", "security.protocol": "SSL"}), "f").client_config()
    assert "error_cb" not in plain and callable(secured["error_cb"])


def test_the_alert_watchers_connection_is_derived_from_the_kafka_connection(clean):
    from aldebaran_lab.services.airflow import connections_env

    clean.delenv("AIRFLOW_CONN_KAFKA_ALERTS_WATCHER", raising=False)
    clean.setenv("AIRFLOW_CONN_ALDEBARAN_KAFKA", json.dumps({"conn_type": "kafka", "login": "u", "password": SECRET, "extra": {
        "bootstrap.servers": "sec:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}}))
    watcher = json.loads(connections_env(KafkaSettings(), spark_master="local[1]")["AIRFLOW_CONN_KAFKA_ALERTS_WATCHER"])
    assert watcher == {"conn_type": "kafka", "extra": {
        "bootstrap.servers": "sec:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u", "sasl.password": SECRET, "group.id": "aldebaran-alert-watcher",
        "auto.offset.reset": "latest", "enable.auto.commit": False, "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 2000}}


# --- the local broker's secured listener (aldebaran_lab.services.kafka / kafka_tls) --------------------
def test_the_secured_listener_sits_beside_the_plaintext_one(tmp_path):
    from aldebaran_lab.services import kafka_tls
    from aldebaran_lab.services.kafka import server_properties

    common = dict(node_id=1, host="127.0.0.1", port=9092, controller_port=9093, data=tmp_path, settings=KafkaSettings(),
                  quorum="controller.quorum.bootstrap.servers=127.0.0.1:9093")
    plain = server_properties(**common).splitlines()
    assert "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in plain  # the HA profile's form
    assert "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT" in plain
    extra = kafka_tls.listener_properties("127.0.0.1", 9094, tmp_path / "server.pem", "p" * 20)
    secured = server_properties(**common, secure_port=9094, extra=extra).splitlines()
    assert "listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093" in secured
    assert "inter.broker.listener.name=PLAINTEXT" in secured
    assert "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN" in secured
    assert "listener.name.sasl_ssl.ssl.keystore.type=PEM" in secured


def test_the_listeners_certificate_is_signed_by_its_ca_for_the_loopback_address(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from aldebaran_lab.services import kafka_tls

    ca_path, keystore = kafka_tls.ensure_tls(tmp_path, "127.0.0.1")
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    cert = x509.load_pem_x509_certificate((tmp_path / "server-cert.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    assert keystore.read_text().startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8 first, then the chain
    assert kafka_tls.ensure_tls(tmp_path, "127.0.0.1") == (ca_path, keystore)  # kept while valid
    assert ca_path.read_bytes() == ca.public_bytes(serialization.Encoding.PEM)
