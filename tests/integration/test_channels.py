"""Every channel against a real local receiver (HTTP server, SMTP server, Twilio-style API, Kafka), then
the Dispatcher over a real alerts topic with duplicates and a real S3 ledger: each receiver gets each
alert exactly once."""

from __future__ import annotations

import json
import secrets

import pytest

from aldebaran.audit.findings import alert_id
from aldebaran.delivery.channels import (
    EmailChannel,
    KafkaChannel,
    LogChannel,
    OutcomeUnknown,
    PermanentError,
    RetryableError,
    SmsChannel,
    WebhookChannel,
    configured_channels,
)
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.model import Alert
from aldebaran_capacity.receivers import SmsProvider, SmtpRecorder, WebhookReceiver, self_signed_cert
from tests.conftest import assert_eventually

SENDER, RECIPIENT = "+15550001111", "+15552223333"


def alert_fields(kind: str, order: str, requested: int | None, purchased: int, count: int = 2) -> dict:
    return {
        "alert_id": alert_id(kind, order), "kind": kind, "rule": "overfill", "order_id": order,
        "client": "Sendence", "stock": "AAPL", "requested": requested, "purchased": purchased,
        "purchase_count": count, "trigger_event_id": f"p-{order}", "trigger_event_ts": 1_700_000_000_000,
        "detected_at": 1_700_000_000_500, "message": f"order {order}: {kind.lower()}",
    }


def make_alert(kind: str, order: str, requested: int | None, purchased: int, count: int = 2) -> Alert:
    return Alert.from_dict(alert_fields(kind, order, requested, purchased, count))


ALERT_FIELDS = alert_fields("OVERFILL", "1", 100, 120, 3)
ALERT = Alert.from_dict(ALERT_FIELDS)


@pytest.fixture
def secret() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture
def webhook(secret):
    with WebhookReceiver(secret) as receiver:
        yield receiver


@pytest.fixture
def smtp():
    with SmtpRecorder() as recorder:
        yield recorder


@pytest.fixture
def sms():
    with SmsProvider() as provider:
        yield provider


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


# --- webhook ------------------------------------------------------------------------------------------
def test_webhook_delivers_a_signed_alert_once(webhook, secret):
    channel = WebhookChannel("webhook", webhook.url + "/alerts", secret, timeout=5)
    receipt = channel.send(ALERT, ALERT.alert_id)

    got = webhook.accepted[ALERT.alert_id]
    assert receipt["status"] == 201 and receipt["response_id"] == got.request_id and receipt["elapsed_ms"] > 0
    assert json.loads(got.body) == ALERT_FIELDS
    assert got.body == json.dumps(ALERT_FIELDS, separators=(",", ":"), sort_keys=True).encode()
    assert got.headers["Idempotency-Key"] == ALERT.alert_id
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["X-Aldebaran-Signature"].startswith("sha256=")  # verified by the receiver
    assert got.headers["X-Aldebaran-Timestamp"].isdigit()
    assert secret not in json.dumps(got.headers) and secret not in json.dumps(receipt)
    assert webhook.requests_per_key == {ALERT.alert_id: 1}


def test_webhook_wrong_secret_is_permanent_and_the_secret_is_not_shown(webhook):
    wrong = "not-the-shared-" + secrets.token_hex(8)
    with pytest.raises(PermanentError) as exc:
        WebhookChannel("webhook", webhook.url, wrong).send(ALERT, ALERT.alert_id)
    assert "HTTP 401" in str(exc.value) and wrong not in str(exc.value)
    assert webhook.rejected_signatures == 1 and not webhook.accepted


def test_webhook_409_means_already_delivered(webhook, secret):
    channel = WebhookChannel("webhook", webhook.url, secret)
    first = channel.send(ALERT, ALERT.alert_id)
    again = channel.send(ALERT, ALERT.alert_id)  # e.g. the record of the first send was lost
    assert "already_delivered" not in first
    assert again["status"] == 409 and again["already_delivered"] is True
    assert again["response_id"] == first["response_id"]
    assert webhook.requests_per_key[ALERT.alert_id] == 2 and len(webhook.accepted) == 1


@pytest.mark.parametrize(("status", "error"), [(500, RetryableError), (503, RetryableError), (429, RetryableError),
                                               (400, PermanentError), (422, PermanentError)])
def test_webhook_status_codes(webhook, secret, status, error):
    channel = WebhookChannel("webhook", webhook.url, secret)
    webhook.fail_next(1, status)
    with pytest.raises(error) as exc:
        channel.send(ALERT, ALERT.alert_id)
    assert type(exc.value) is error and f"HTTP {status}" in str(exc.value)
    assert channel.send(ALERT, ALERT.alert_id)["status"] == 201  # the injected failure was used up


def test_webhook_timeout_is_retryable_and_the_retry_converges_by_key(webhook, secret):
    channel = WebhookChannel("webhook", webhook.url, secret, timeout=0.3)
    webhook.delay_next(1, 1.0)
    with pytest.raises(OutcomeUnknown):  # a RetryableError: the request may have arrived (it did)
        channel.send(ALERT, ALERT.alert_id)
    assert isinstance(OutcomeUnknown("x"), RetryableError)
    channel.timeout = 5
    assert_eventually(lambda: ALERT.alert_id in webhook.accepted, timeout=5)
    assert channel.send(ALERT, ALERT.alert_id)["already_delivered"] is True
    assert len(webhook.accepted) == 1


def test_webhook_receiver_down_then_back(webhook, secret):
    channel = WebhookChannel("webhook", webhook.url, secret)
    channel.send(make_alert("OVERFILL", "2", 10, 11), alert_id("OVERFILL", "2"))  # a keep-alive connection exists
    with webhook.down():
        with pytest.raises(RetryableError) as exc:
            channel.send(ALERT, ALERT.alert_id)
        assert "connection failed" in str(exc.value)
    assert channel.send(ALERT, ALERT.alert_id)["status"] == 201
    assert webhook.requests_per_key[ALERT.alert_id] == 1


def test_webhook_over_https_with_a_private_ca(secret, cert):
    with WebhookReceiver(secret, tls=cert) as receiver:
        assert receiver.url.startswith("https://")
        trusted = WebhookChannel("webhook", receiver.url, secret, verify=str(cert[0]))
        assert trusted.send(ALERT, ALERT.alert_id)["status"] == 201
        with pytest.raises(RetryableError):  # the system CAs do not know this certificate
            WebhookChannel("webhook", receiver.url, secret).send(ALERT, alert_id("OVERFILL", "2"))
        assert list(receiver.accepted) == [ALERT.alert_id]


# --- email ---------------------------------------------------------------------------------------------
def email_channel(recorder: SmtpRecorder, **kw) -> EmailChannel:
    return EmailChannel("email", recorder.host, "aldebaran@example.test", ["ops@example.test", "risk@example.test"],
                        port=recorder.port, **kw)


def test_email_arrives_with_message_id_and_a_readable_body(smtp):
    receipt = email_channel(smtp).send(ALERT, ALERT.alert_id)

    (mail,) = smtp.messages
    assert mail.message_id == f"<{ALERT.alert_id}@aldebaran>" == receipt["message_id"]
    assert mail.rcpt_tos == ["ops@example.test", "risk@example.test"]
    assert mail.message["Subject"] == "[Aldebaran] OVERFILL on order 1 (Sendence AAPL)"
    assert mail.message["From"] == "aldebaran@example.test"
    assert mail.message["Auto-Submitted"] == "auto-generated"
    assert mail.message.get_content_type() == "text/plain"
    lines = mail.text.splitlines()
    for expected in ("Order:          1", "Client:         Sendence", "Stock:          AAPL",
                     "Requested:      100 shares", "Purchased:      120 shares in 3 purchases (20 over the request)",
                     "Trigger event:  p-1 at 2023-11-14T22:13:20.000Z", "Detected at:    2023-11-14T22:13:20.500Z",
                     "order 1: overfill"):
        assert expected in lines, expected


def test_email_over_starttls_with_login(cert):
    password = secrets.token_urlsafe(16)
    with SmtpRecorder(tls=cert, credentials=("alerts", password)) as recorder:
        channel = email_channel(recorder, login="alerts", password=password, starttls=True, ca_file=str(cert[0]))
        channel.send(ALERT, ALERT.alert_id)
        (mail,) = recorder.messages
        assert (mail.tls, mail.authenticated_as, mail.message_id) == (True, "alerts", f"<{ALERT.alert_id}@aldebaran>")

        wrong = "wrong-" + secrets.token_hex(6)
        with pytest.raises(PermanentError) as exc:  # 535 authentication failed
            email_channel(recorder, login="alerts", password=wrong, starttls=True, ca_file=str(cert[0])).send(
                ALERT, ALERT.alert_id)
        assert "SMTP 535" in str(exc.value) and wrong not in str(exc.value)
        with pytest.raises(PermanentError):  # the server requires STARTTLS before anything else
            email_channel(recorder).send(ALERT, ALERT.alert_id)
        assert len(recorder.messages) == 1


def test_email_failures(smtp):
    channel = email_channel(smtp)
    smtp.fail_next(1, 451)
    with pytest.raises(RetryableError, match="SMTP 451"):
        channel.send(ALERT, ALERT.alert_id)
    smtp.fail_next(1, 554)
    with pytest.raises(PermanentError, match="SMTP 554"):
        channel.send(ALERT, ALERT.alert_id)
    with smtp.down():
        with pytest.raises(RetryableError, match="Connection refused"):
            channel.send(ALERT, ALERT.alert_id)
    channel.send(ALERT, ALERT.alert_id)
    assert smtp.per_message_id == {f"<{ALERT.alert_id}@aldebaran>": 1}


# --- kafka ---------------------------------------------------------------------------------------------
@pytest.fixture
def forward_topic(services_up, unique):
    from aldebaran.settings import KafkaSettings, load

    settings = load(KafkaSettings)
    topic = f"t-{unique}-forwarded"
    kadmin.ensure_topics(settings, [topic], partitions=2)
    yield settings, topic
    kadmin.delete_topics(settings, [topic])


def test_kafka_forwards_with_the_alert_id_as_key(forward_topic):
    settings, topic = forward_topic
    channel = KafkaChannel("kafka", topic, {"bootstrap.servers": settings.bootstrap_servers})
    other = make_alert("ORPHAN", "9", None, 50, 1)
    try:
        receipts = [channel.send(a, a.alert_id) for a in (ALERT, other)]
    finally:
        channel.close()
    assert [r["topic"] for r in receipts] == [topic, topic] and all(r["offset"] >= 0 for r in receipts)

    messages = kio.read_topic(settings, topic)
    assert sorted((m.key().decode(), json.loads(m.value())["order_id"]) for m in messages) == sorted(
        [(ALERT.alert_id, "1"), (other.alert_id, "9")])
    by_key = {m.key().decode(): m for m in messages}
    assert json.loads(by_key[ALERT.alert_id].value()) == ALERT_FIELDS
    assert dict(by_key[ALERT.alert_id].headers())["aldebaran.alert_id"] == ALERT.alert_id.encode()
    receipt = {r["key"]: r for r in receipts}[ALERT.alert_id]
    assert (by_key[ALERT.alert_id].partition(), by_key[ALERT.alert_id].offset()) == (receipt["partition"], receipt["offset"])


def test_kafka_unreachable_cluster_is_retryable():
    channel = KafkaChannel("kafka", "anything", {"bootstrap.servers": "127.0.0.1:1"}, flush_timeout=0.5)
    try:
        with pytest.raises(RetryableError, match="not acknowledged within 0.5s"):
            channel.send(ALERT, ALERT.alert_id)
    finally:
        channel.close()


# --- sms -----------------------------------------------------------------------------------------------
def sms_channel(provider: SmsProvider, token: str | None = None, **kw) -> SmsChannel:
    return SmsChannel("sms", provider.url, provider.account_sid, token or provider.auth_token, SENDER, RECIPIENT, **kw)


def test_sms_is_sent_with_basic_auth_and_recorded(sms):
    receipt = sms_channel(sms).send(ALERT, ALERT.alert_id)
    (message,) = sms.messages
    assert receipt["sid"] == message.sid and message.sid.startswith("SM") and receipt["status"] == "queued"
    assert (message.to, message.sender, message.body) == (RECIPIENT, SENDER, "Aldebaran OVERFILL order 1: bought 120/100 AAPL")
    assert message.account_sid == sms.account_sid
    assert sms.auth_token not in json.dumps(receipt)
    assert not sms_channel(sms).can_dedupe


def test_sms_failures(sms):
    wrong = "wrong-" + secrets.token_hex(6)
    with pytest.raises(PermanentError, match="HTTP 401 code 20003") as exc:
        sms_channel(sms, token=wrong).send(ALERT, ALERT.alert_id)
    assert wrong not in str(exc.value) and sms.unauthorized == 1
    for status in (429, 500, 503):
        sms.fail_next(1, status)
        with pytest.raises(RetryableError, match=f"HTTP {status}"):
            sms_channel(sms).send(ALERT, ALERT.alert_id)
    sms.fail_next(1, 400)
    with pytest.raises(PermanentError, match="HTTP 400"):
        sms_channel(sms).send(ALERT, ALERT.alert_id)
    with sms.down():
        with pytest.raises(RetryableError) as exc:  # refused: nothing was sent, a plain retry is safe
            sms_channel(sms).send(ALERT, ALERT.alert_id)
        assert not isinstance(exc.value, OutcomeUnknown)
    assert sms.messages == []


def test_sms_timeout_is_outcome_unknown_because_the_provider_may_have_sent_it(sms):
    sms.delay_next(1, 1.0)
    with pytest.raises(OutcomeUnknown):
        sms_channel(sms, timeout=0.3).send(ALERT, ALERT.alert_id)
    assert_eventually(lambda: len(sms.messages) == 1, timeout=5)  # it was sent: a blind retry would send it twice


# --- log -----------------------------------------------------------------------------------------------
def test_log_channel_appends_json_lines(tmp_path):
    channel = LogChannel("log", tmp_path / "alerts.jsonl")
    first = channel.send(ALERT, ALERT.alert_id)
    channel.send(make_alert("ORPHAN", "9", None, 50, 1), alert_id("ORPHAN", "9"))
    lines = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [(x["idempotency_key"], x["alert"]["order_id"]) for x in lines] == [(ALERT.alert_id, "1"), (alert_id("ORPHAN", "9"), "9")]
    assert lines[0]["alert"] == ALERT.to_dict() and first["offset"] > 0


# --- the dispatcher over real Kafka and S3, with every receiver --------------------------------------
def test_dispatcher_delivers_each_alert_once_per_channel(kafka_topics, store, s3_prefix, unique, monkeypatch,
                                                         webhook, secret, smtp, sms):
    alerts = [alert_fields("OVERFILL", "1", 100, 120, 3), alert_fields("OVERFILL", "2", 50, 60),
              alert_fields("OVERFILL", "3", 10, 11), alert_fields("ORPHAN", "4", None, 70, 1),
              alert_fields("OVERFILL", "5", 5, 9)]
    # At-least-once topic: every alert twice, the first three times, interleaved.
    stream = alerts + alerts[::-1] + [alerts[0]]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(a["alert_id"], json.dumps(a)) for a in stream])

    # The channels come from the same configuration an operator writes (ALDEBARAN_CHANNELS + connections).
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "webhook,email,sms")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_WEBHOOK", json.dumps(
        {"conn_type": "http", "host": webhook.url, "password": secret, "extra": {"endpoint": "/alerts"}}))
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_EMAIL", json.dumps(
        {"conn_type": "smtp", "host": smtp.host, "port": smtp.port,
         "extra": {"from_email": "aldebaran@example.test", "to": "ops@example.test", "disable_ssl": True, "disable_tls": True}}))
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_SMS", json.dumps(
        {"conn_type": "sms", "host": sms.url, "login": sms.account_sid, "password": sms.auth_token,
         "extra": {"from": SENDER, "to": RECIPIENT}}))
    channels = configured_channels()
    assert [c.name for c in channels] == ["webhook", "email", "sms"]

    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")
    stats = Dispatcher(ledger, channels, kafka=kafka_topics, group=f"g-{unique}").run_once(idle_timeout=2.0)

    ids = sorted(a["alert_id"] for a in alerts)
    assert stats.alerts == len(stream) and stats.failed == {}
    assert stats.sent == {"webhook": 5, "email": 5, "sms": 5}
    assert stats.already == {"webhook": 6, "email": 6, "sms": 6}
    assert dict(webhook.requests_per_key) == {i: 1 for i in ids}
    assert dict(smtp.per_message_id) == {f"<{i}@aldebaran>": 1 for i in ids}
    assert sorted(sms.sends.values()) == [1] * 5 and sorted(body for _, body in sms.sends) == [
        "Aldebaran ORPHAN order 4: bought 70 AAPL without a request",
        "Aldebaran OVERFILL order 1: bought 120/100 AAPL",
        "Aldebaran OVERFILL order 2: bought 60/50 AAPL",
        "Aldebaran OVERFILL order 3: bought 11/10 AAPL",
        "Aldebaran OVERFILL order 5: bought 9/5 AAPL",
    ]
    for channel in ("webhook", "email", "sms"):  # every channel commits runs
        states = ledger.states(channel)
        assert sorted(states) == ids and set(states.values()) == {"DELIVERED"}
    sids = {e[3]["sid"] for p in (0, 1) for r in ledger.runs("sms", kafka_topics.alerts_topic, p)
            for e in r.entries if e[2] == "D"}
    assert sids == {m.sid for m in sms.messages}
    assert all(ledger.get("sms", i) is None for i in ids)  # no per-alert record: nothing failed

    # A second dispatcher (new consumer group) re-reads the whole topic: every record exists, nothing is re-sent.
    again = Dispatcher(ledger, configured_channels(), kafka=kafka_topics, group=f"g2-{unique}").run_once(idle_timeout=2.0)
    assert again.sent == {} and again.already == {"webhook": 11, "email": 11, "sms": 11}
    assert sum(webhook.requests_per_key.values()) == 5 and len(smtp.messages) == 5 and len(sms.messages) == 5
