"""Channel configuration (ALDEBARAN_CHANNELS + one Airflow-style connection per channel) and what the
channels render: no services, no network."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from types import SimpleNamespace

import pytest

from aldebaran.runtime import paths
from aldebaran.delivery import channels as ch
from aldebaran.delivery.channels import (
    Connection,
    EmailChannel,
    KafkaChannel,
    LogChannel,
    SmsChannel,
    WebhookChannel,
    configured_channels,
)
from aldebaran.exceptions import ConfigError
from aldebaran.model import Alert

SECRET = "s3cr3t-Do-Not-Print-Me"
FIELDS = {
    "alert_id": "5f0c6c3f9b8a4e0e9f1d2c3b4a596877", "kind": "OVERFILL", "rule": "overfill", "order_id": "1",
    "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 3,
    "trigger_event_id": "3", "trigger_event_ts": 1_700_000_000_000, "detected_at": 1_700_000_001_234,
    "message": "purchased 120 shares of a 100-share request",
}
ALERT = Alert.from_dict(FIELDS)
ORPHAN = Alert.from_dict({**FIELDS, "kind": "ORPHAN", "order_id": "7", "requested": None, "purchased": 50,
                          "purchase_count": 1, "message": "purchased 50 shares without a request"})


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No channel settings leak in from the developer's environment or .env."""
    for name in list(os.environ):
        if name.startswith("AIRFLOW_CONN_ALDEBARAN_") or name in (
                "ALDEBARAN_CHANNELS", "ALDEBARAN_WEBHOOK_SECRET", "ALDEBARAN_LOG_CHANNEL_PATH"):
            monkeypatch.delenv(name)


def conn(monkeypatch, name: str, value) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_ALDEBARAN_{name.upper()}", value if isinstance(value, str) else json.dumps(value))


def config_error(**kw) -> str:
    with pytest.raises(ConfigError) as exc:
        configured_channels(**kw)
    return str(exc.value)


WEBHOOK = {"conn_type": "http", "host": "hooks.example.com", "schema": "https", "password": SECRET,
           "extra": {"endpoint": "/aldebaran/alerts", "timeout": 5}}
EMAIL = {"conn_type": "smtp", "host": "smtp.example.com", "port": 587, "login": "alerts", "password": SECRET,
         "extra": {"from_email": "alerts@example.com", "to": ["ops@example.com", "risk@example.com"], "disable_ssl": True}}
KAFKA = {"conn_type": "kafka", "extra": {"topic": "alerts.forwarded", "bootstrap.servers": "broker-2:9092",
                                         "sasl.password": SECRET, "linger.ms": 2}}
SMS = {"conn_type": "sms", "host": "https://sms.example.com", "login": "AC123", "password": SECRET,
       "extra": {"from": "+15550001111", "to": "+15552223333", "timeout": 3}}


# --- which channels, and their names --------------------------------------------------------------
def test_default_is_the_log_channel_alone():
    (only,) = configured_channels()
    assert isinstance(only, LogChannel) and only.name == "log"


def test_log_channel_path_from_its_connection(monkeypatch, tmp_path):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    conn(monkeypatch, "log", {"conn_type": "log", "extra": {"path": str(tmp_path / "a.jsonl")}})
    assert configured_channels()[0].path == tmp_path / "a.jsonl"


def test_every_kind_from_its_json_connection(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "webhook, email,kafka,sms,log")
    for name, value in (("webhook", WEBHOOK), ("email", EMAIL), ("kafka", KAFKA), ("sms", SMS)):
        conn(monkeypatch, name, value)
    webhook, email, kafka, sms, log = configured_channels()

    assert isinstance(webhook, WebhookChannel)
    assert (webhook.url, webhook.timeout, webhook.verify) == ("https://hooks.example.com/aldebaran/alerts", 5.0, True)
    assert isinstance(email, EmailChannel)
    assert (email.host, email.port, email.starttls, email.use_ssl, email.login) == ("smtp.example.com", 587, True, False, "alerts")
    assert (email.sender, email.recipients) == ("alerts@example.com", ["ops@example.com", "risk@example.com"])
    assert isinstance(kafka, KafkaChannel)
    assert kafka.topic == "alerts.forwarded"
    assert kafka.config["bootstrap.servers"] == "broker-2:9092" and kafka.config["linger.ms"] == 2
    assert kafka.config["enable.idempotence"] is True and kafka.config["acks"] == "all"
    assert "topic" not in kafka.config  # not a librdkafka property
    assert isinstance(sms, SmsChannel)
    assert sms.url == "https://sms.example.com/2010-04-01/Accounts/AC123/Messages.json"
    assert (sms.sender, sms.recipient, sms.timeout) == ("+15550001111", "+15552223333", 3.0)
    assert isinstance(log, LogChannel)
    assert [c.can_dedupe for c in (webhook, email, kafka, sms)] == [True, True, True, False]


def test_several_channels_of_one_kind(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "webhook_ops,webhook_audit")
    conn(monkeypatch, "webhook_ops", {**WEBHOOK, "host": "ops.example.com"})
    conn(monkeypatch, "webhook_audit", {**WEBHOOK, "host": "audit.example.com", "extra": {}})
    ops, audit = configured_channels()
    assert (ops.name, ops.url) == ("webhook_ops", "https://ops.example.com/aldebaran/alerts")
    assert (audit.name, audit.url) == ("webhook_audit", "https://audit.example.com")


def test_names_argument_overrides_the_env(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "webhook")
    assert [c.name for c in configured_channels(["log"])] == ["log"]


def test_kind_comes_from_the_name_when_conn_type_is_absent(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "sms")
    conn(monkeypatch, "sms", {k: v for k, v in SMS.items() if k != "conn_type"})
    assert isinstance(configured_channels()[0], SmsChannel)


def test_conn_type_wins_over_the_name(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "email")
    conn(monkeypatch, "email", WEBHOOK)
    assert isinstance(configured_channels()[0], WebhookChannel)


def test_airflow_connection_object():
    airflow_conn = SimpleNamespace(conn_id="aldebaran_pager", conn_type="http", host="pager.example.com", port=8443,
                                   login=None, password=SECRET, schema="https", extra='{"timeout": 2}')
    channel = ch.channel_from_connection("pager", Connection.from_airflow(airflow_conn))
    assert (channel.url, channel.timeout) == ("https://pager.example.com:8443", 2.0)
    (built,) = configured_channels(["pager"], lookup=lambda name: Connection.from_airflow(airflow_conn))
    assert built.url == channel.url


# --- the URI form, as Airflow parses it ----------------------------------------------------------------
def test_uri_form_with_query_extras(monkeypatch):
    conn(monkeypatch, "webhook", f"http://:{SECRET}@hooks.example.com:8443/https?endpoint=%2Fin%2Falerts&timeout=2.5")
    (webhook,) = configured_channels(["webhook"])
    assert (webhook.url, webhook.timeout) == ("https://hooks.example.com:8443/in/alerts", 2.5)


def test_uri_form_with_json_extra_and_encoded_password(monkeypatch):
    extra = json.dumps({"from_email": "a@example.com", "to": ["b@example.com"], "disable_ssl": False, "disable_tls": True})
    conn(monkeypatch, "email", "smtp://alerts%40example.com:p%40ss%2Fw%3Ard@smtp.example.com?__extra__=" + extra.replace(" ", ""))
    (email,) = configured_channels(["email"])
    assert (email.login, email._password.get_secret_value()) == ("alerts@example.com", "p@ss/w:rd")
    assert (email.use_ssl, email.port) == (True, 465)


def test_uri_form_with_protocol_in_the_host(monkeypatch):
    conn(monkeypatch, "sms", f"sms://http://AC9:{SECRET}@127.0.0.1:8099?from=%2B15550001111&to=%2B15552223333")
    (sms,) = configured_channels(["sms"])
    assert sms.url == "http://127.0.0.1:8099/2010-04-01/Accounts/AC9/Messages.json"
    assert (sms.account_sid, sms.recipient) == ("AC9", "+15552223333")


def test_webhook_secret_falls_back_to_the_env(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_WEBHOOK_SECRET", "from-env")
    conn(monkeypatch, "webhook", {k: v for k, v in WEBHOOK.items() if k != "password"})
    (webhook,) = configured_channels(["webhook"])
    assert webhook._secret.get_secret_value() == "from-env"


def test_kafka_bootstrap_defaults_to_the_platform_cluster(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "platform:9092")
    conn(monkeypatch, "kafka", {"conn_type": "kafka", "extra": {"topic": "fwd"}})
    assert configured_channels(["kafka"])[0].config["bootstrap.servers"] == "platform:9092"
    conn(monkeypatch, "kafka", {"conn_type": "kafka", "host": "other", "port": 9093, "extra": {"topic": "fwd"}})
    assert configured_channels(["kafka"])[0].config["bootstrap.servers"] == "other:9093"


# --- errors: name the variable and the field, never the secret -----------------------------------------
@pytest.mark.parametrize(("channels", "message"), [
    ("Webhook", "ALDEBARAN_CHANNELS: invalid channel name 'Webhook'"),
    ("web-hook", "ALDEBARAN_CHANNELS: invalid channel name 'web-hook'"),
    ("log,log", "ALDEBARAN_CHANNELS: channel(s) named twice: log"),
    (" , ", "ALDEBARAN_CHANNELS: no channel named"),
])
def test_bad_channel_names(monkeypatch, channels, message):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", channels)
    assert message in config_error()


def test_builtin_kind_without_connection_names_its_variable(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log,webhook")
    assert config_error().startswith("AIRFLOW_CONN_ALDEBARAN_WEBHOOK is not set: the webhook channel needs a connection")


def test_unknown_name_without_connection_names_its_variable(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "pager")
    message = config_error()
    assert "ALDEBARAN_CHANNELS names 'pager', but AIRFLOW_CONN_ALDEBARAN_PAGER is not set" in message


def test_custom_name_needs_a_conn_type(monkeypatch):
    conn(monkeypatch, "pager", {k: v for k, v in WEBHOOK.items() if k != "conn_type"})
    assert config_error(names=["pager"]).startswith("AIRFLOW_CONN_ALDEBARAN_PAGER: field conn_type is required")


def test_unknown_conn_type(monkeypatch):
    conn(monkeypatch, "webhook", {**WEBHOOK, "conn_type": "ftp"})
    assert config_error(names=["webhook"]).startswith("AIRFLOW_CONN_ALDEBARAN_WEBHOOK: field conn_type 'ftp' is not a channel type")


def test_webhook_without_any_secret(monkeypatch):
    conn(monkeypatch, "webhook", {k: v for k, v in WEBHOOK.items() if k != "password"})
    assert config_error(names=["webhook"]) == (
        "AIRFLOW_CONN_ALDEBARAN_WEBHOOK: field password is required "
        "(the HMAC signing secret shared with the receiver, or set ALDEBARAN_WEBHOOK_SECRET)")


# Each case: channel, connection (every one carries SECRET somewhere), what the message must say.
INVALID = [
    ("webhook", f'{{"conn_type": "http", "password": "{SECRET}", ', "not valid JSON"),
    ("webhook", f'["http", "{SECRET}"]', "the JSON form must be an object"),
    ("webhook", {**WEBHOOK, "host": None}, "field host is required"),
    ("webhook", {**WEBHOOK, "port": "80a"}, "field port must be a number between 1 and 65535"),
    ("webhook", {**WEBHOOK, "port": 70000}, "field port must be a number between 1 and 65535"),
    ("webhook", {**WEBHOOK, "schema": "ftp"}, "field schema must be http or https"),
    ("webhook", {**WEBHOOK, "extra": {"timeout": "soon"}}, "field extra.timeout must be a number of seconds"),
    ("webhook", {**WEBHOOK, "extra": {"timeout": -1}}, "field extra.timeout must be a number of seconds"),
    ("webhook", {**WEBHOOK, "extra": {"verify": "/no/such/ca.pem"}}, "field extra.verify must be true, false or the path"),
    ("webhook", {**WEBHOOK, "extra": f'{{"endpoint": "{SECRET}"'}, "field extra is not valid JSON"),
    ("webhook", {**WEBHOOK, "token": SECRET}, "unknown field(s) token"),
    # a '/' in an unencoded password breaks the URI: the parse error must not echo any of it
    ("webhook", f"http://user:{SECRET}/x@hooks.example.com/https", "field port is not a number"),
    ("webhook", f"http//user:{SECRET}@hooks.example.com", "not a connection URI"),
    ("email", {**EMAIL, "extra": {"to": ["ops@example.com"]}}, "field extra.from_email is required"),
    ("email", {**EMAIL, "extra": {"from_email": "a@example.com"}}, "field extra.to is required"),
    ("email", {**EMAIL, "extra": {**EMAIL["extra"], "disable_tls": "maybe"}}, "field extra.disable_tls must be true or false"),
    ("email", {**EMAIL, "password": None}, "field password is required when login is set"),
    ("kafka", {**KAFKA, "extra": {"sasl.password": SECRET}}, "field extra.topic is required"),
    ("kafka", {**KAFKA, "extra": {**KAFKA["extra"], "topic": "bad topic!"}}, "field extra.topic must be a valid topic name"),
    ("kafka", {**KAFKA, "extra": {**KAFKA["extra"], "enable.idempotence": False}}, "must stay true"),
    ("sms", {**SMS, "login": None}, "field login is required (the account SID)"),
    ("sms", {**SMS, "password": None}, "field password is required (the auth token)"),
    ("sms", {**SMS, "extra": {**SMS["extra"], "to": "+1555,+1666"}}, "field extra.to must be one phone number in E.164"),
    ("sms", {**SMS, "extra": {"to": "+15552223333"}}, "field extra.from is required"),
]


@pytest.mark.parametrize(("name", "value", "expected"), INVALID, ids=[f"{c[0]}-{c[2][:30]}" for c in INVALID])
def test_invalid_connection_names_variable_and_field_never_the_secret(monkeypatch, name, value, expected):
    conn(monkeypatch, name, value)
    message = config_error(names=[name])
    assert message.startswith(f"AIRFLOW_CONN_ALDEBARAN_{name.upper()}: "), message
    assert expected in message
    assert SECRET not in message and "s3cr3t" not in message


def test_secrets_stay_out_of_reprs(monkeypatch):
    for name, value in (("webhook", WEBHOOK), ("email", EMAIL), ("kafka", KAFKA), ("sms", SMS)):
        conn(monkeypatch, name, value)
    built = configured_channels(["webhook", "email", "kafka", "sms"])
    for channel in built:
        assert SECRET not in repr(channel) and SECRET not in str(vars(channel).get("_secret", ""))
    assert SECRET not in repr(Connection.parse("X", json.dumps(WEBHOOK)))


def test_kafka_producer_configuration_errors_name_the_variable_and_are_scrubbed(monkeypatch):
    conn(monkeypatch, "kafka", {"conn_type": "kafka", "extra": {
        "topic": "fwd", "bootstrap.servers": "127.0.0.1:1", "sasl.password": SECRET, "no.such.property": SECRET}})
    (channel,) = configured_channels(["kafka"])  # librdkafka checks its configuration when the producer starts
    with pytest.raises(ConfigError) as exc:
        channel.send(ALERT, ALERT.alert_id)
    message = str(exc.value)
    assert message.startswith("AIRFLOW_CONN_ALDEBARAN_KAFKA: field extra holds an invalid producer configuration")
    assert "no.such.property" in message and SECRET not in message


# --- what the channels send ------------------------------------------------------------------------------
def test_body_is_compact_sorted_json_and_signature_is_hmac_of_those_bytes():
    body = ch.alert_body(Alert.from_dict({"order_id": "1", "kind": "OVERFILL", "alert_id": "a", "b": [1, 2]}))
    assert body == (b'{"alert_id":"a","b":[1,2],"client":null,"detected_at":null,"kind":"OVERFILL","order_id":"1",'
                    b'"purchase_count":null,"purchased":null,"requested":null,"stock":null,"trigger_event_id":null,'
                    b'"trigger_event_ts":null}')
    assert ch.alert_body(Alert.from_json(b'{"alert_id":"a","order_id":"1","kind":"K"}')) == \
        b'{"alert_id":"a","order_id":"1","kind":"K"}'  # the bytes it arrived as, unchanged
    # Stripe-style: the HMAC of "<timestamp>.<body>", so the timestamp cannot be changed either
    assert ch.signature(body, "k", 1700000000) == \
        "sha256=" + hmac.new(b"k", b"1700000000." + body, hashlib.sha256).hexdigest()
    signed = ch.signed_headers(body, "k", now=1700000000.9)
    assert signed == {"X-Aldebaran-Timestamp": "1700000000", "X-Aldebaran-Signature": ch.signature(body, "k", 1700000000)}
    sig = signed["X-Aldebaran-Signature"]
    assert ch.verify_signature(body, sig, "k", "1700000000")
    assert not ch.verify_signature(body, sig, "k", "1700000001")  # a changed timestamp fails
    assert not ch.verify_signature(body + b" ", sig, "k", "1700000000")
    assert not ch.verify_signature(body, sig, "other", "1700000000")
    assert not any(ch.verify_signature(body, sig, "k", stamp) for stamp in (None, "", "-1", "1e9", "１７"))
    assert not ch.verify_signature(body, None, "k", "1700000000")
    assert ch.timestamp_fresh("1700000000", 300, now=1700000299) and ch.timestamp_fresh("1700000000", 300, now=1699999701)
    assert not ch.timestamp_fresh("1700000000", 300, now=1700000301) and not ch.timestamp_fresh(None, 300)


def test_the_operations_verification_snippet_accepts_our_signature_and_nothing_else():
    doc = (paths.ROOT / "docs" / "operations.md").read_text()
    section = doc.split("## Verifying a webhook's signature", 1)[1].split("\n## ", 1)[0]
    namespace: dict = {}
    exec(section.split("```python\n", 1)[1].split("```", 1)[0], namespace)  # the snippet as printed
    verify, body = namespace["verify"], b'{"alert_id":"a"}'
    signed = ch.signed_headers(body, "k")
    assert verify(body, signed, "k")
    assert not verify(body, {**signed, "X-Aldebaran-Timestamp": str(int(signed["X-Aldebaran-Timestamp"]) - 1)}, "k")
    assert not verify(body + b" ", signed, "k") and not verify(body, signed, "k2")
    assert not verify(body, ch.signed_headers(body, "k", now=time.time() - 301), "k")  # a replay


def test_the_webhook_stamps_and_signs_each_request(monkeypatch):
    hook = WebhookChannel("hook", "https://hooks.example.com/x", "k")
    monkeypatch.setattr("aldebaran.delivery.channels.text.time.time", lambda: 1700000123.5)
    headers = hook._headers(b"{}", "key-1")
    assert headers["X-Aldebaran-Timestamp"] == "1700000123" and headers["Idempotency-Key"] == "key-1"
    assert ch.verify_signature(b"{}", headers["X-Aldebaran-Signature"], "k", "1700000123")


def test_email_subject_and_body_read_like_a_report():
    assert ch.email_subject(ALERT) == "[Aldebaran] OVERFILL on order 1 (Sendence AAPL)"
    text = ch.email_text(ALERT, "email_ops")
    for line in ("Aldebaran raised an OVERFILL alert.",
                 "Order:          1",
                 "Client:         Sendence",
                 "Stock:          AAPL",
                 "Requested:      100 shares",
                 "Purchased:      120 shares in 3 purchases (20 over the request)",
                 "Trigger event:  3 at 2023-11-14T22:13:20.000Z",
                 "Detected at:    2023-11-14T22:13:21.234Z",
                 "purchased 120 shares of a 100-share request",
                 "Delivery record: aldebaran deliveries show --channel email_ops --alert-id 5f0c6c3f9b8a4e0e9f1d2c3b4a596877"):
        assert line in text.splitlines(), line


def test_email_of_an_orphan_and_of_hostile_fields():
    assert "Requested:      no purchase request seen" in ch.email_text(ORPHAN).splitlines()
    hostile = Alert.from_dict({**FIELDS, "client": "Evil\r\nBcc: victim@example.com", "stock": None,
                               "detected_at": "yesterday"})
    assert ch.email_subject(hostile) == "[Aldebaran] OVERFILL on order 1 (Evil Bcc: victim@example.com)"
    assert "Detected at:    unknown" in ch.email_text(hostile)
    msg = EmailChannel("email", "smtp.example.com", "a@example.com", ["b@example.com"]).message(hostile, "k1")
    assert msg["Message-ID"] == "<k1@aldebaran>" and "\n" not in msg["Subject"]


def test_sms_text_is_short():
    assert ch.sms_text(ALERT) == "Aldebaran OVERFILL order 1: bought 120/100 AAPL"
    assert ch.sms_text(ORPHAN) == "Aldebaran ORPHAN order 7: bought 50 AAPL without a request"
    assert len(ch.sms_text(Alert.from_dict({**FIELDS, "order_id": "x" * 128, "stock": "Y" * 64}))) <= 160
