"""The platform's Kafka connection: librdkafka configuration from the connection (aldebaran.kafka.conn) and its
translation into the Java client's options for Spark (aldebaran.kafka.java). No broker needed."""

from __future__ import annotations

import json

import pytest

from aldebaran.storage.connections import Connection
from aldebaran.exceptions import ConfigError
from aldebaran.kafka.conn import connection_env, from_connection, resolve
from aldebaran.kafka.java import java_config, spark_options
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
