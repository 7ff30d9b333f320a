"""send_many and lookup against real receivers: the webhook in single and batch mode (local aiohttp
WebhookReceiver), the Kafka bus channel (the real broker) and the SMS provider's lookup (SmsProvider);
each alert arrives exactly once."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading

import pytest
from aiohttp import web

from aldebaran.audit.findings import alert_id
from aldebaran.delivery.channels import KafkaChannel, RetryableError, SmsChannel, WebhookChannel, batch_key
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.model import Alert
from aldebaran_capacity.receivers import BATCH_HEADER, SmsProvider, WebhookReceiver

SENDER, RECIPIENT = "+15550001111", "+15552223333"


def make_alerts(n: int, start: int = 0) -> list[Alert]:
    return [Alert.from_dict({
        "alert_id": alert_id("OVERFILL", str(i)), "kind": "OVERFILL", "order_id": str(i), "client": "Sendence",
        "stock": "AAPL", "requested": 100, "purchased": 100 + i, "purchase_count": 2, "trigger_event_id": f"p-{i}",
        "trigger_event_ts": 1_700_000_000_000, "detected_at": 1_700_000_000_500, "rule": "overfill",
    }) for i in range(start, start + n)]


@pytest.fixture
def secret() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture
def webhook(secret):
    with WebhookReceiver(secret) as receiver:
        yield receiver


@pytest.fixture
def channel_factory():
    made = []

    def make(cls, *args, **kw):
        channel = cls(*args, **kw)
        made.append(channel)
        return channel

    yield make
    for channel in made:
        channel.close()


# --- webhook: one alert per request ----------------------------------------------------------------
def test_webhook_send_many_delivers_each_alert_once(webhook, secret, channel_factory):
    channel = channel_factory(WebhookChannel, "webhook", webhook.url + "/alerts", secret, concurrency=8)
    alerts = make_alerts(200)
    outcomes = channel.send_many(alerts)

    assert [o.alert_id for o in outcomes] == [a.alert_id for a in alerts]
    assert {o.status for o in outcomes} == {"delivered"}
    assert all(o.receipt["status"] == 201 and o.receipt["response_id"] for o in outcomes)
    assert dict(webhook.requests_per_key) == {a.alert_id: 1 for a in alerts}
    assert webhook.rejected_signatures == 0 and webhook.statuses == {201: 200}
    got = webhook.accepted[alerts[7].alert_id]
    assert got.body == alerts[7].to_json() and json.loads(got.body) == alerts[7].to_dict()
    assert got.headers["Idempotency-Key"] == alerts[7].alert_id

    again = channel.send_many(alerts[:20])  # e.g. a run whose record was lost
    assert {o.status for o in again} == {"delivered"}
    assert all(o.receipt["status"] == 409 and o.receipt["already_delivered"] for o in again)
    assert len(webhook.accepted) == 200


def test_webhook_send_many_maps_failures_per_alert(webhook, secret, channel_factory):
    channel = channel_factory(WebhookChannel, "webhook", webhook.url, secret, concurrency=4)
    alerts = make_alerts(12)
    webhook.fail_next(3, 503)
    first = channel.send_many(alerts)
    retry = [o for o in first if o.status == "retry"]
    assert len(retry) == 3 and all("HTTP 503" in o.error for o in retry)
    assert sum(o.status == "delivered" for o in first) == 9

    webhook.fail_next(1, 422)
    (refused,) = channel.send_many([a for a in alerts if a.alert_id == retry[0].alert_id])
    assert refused.status == "permanent" and "HTTP 422" in refused.error

    second = channel.send_many([a for a in alerts if a.alert_id in {o.alert_id for o in retry}])
    assert {o.status for o in second} == {"delivered"}
    assert set(webhook.accepted) == {a.alert_id for a in alerts} and len(webhook.accepted) == 12

    with webhook.down():
        down = channel.send_many(alerts[:3])
    assert {o.status for o in down} == {"retry"} and all("connection failed" in o.error for o in down)


def test_webhook_read_timeout_is_unknown(webhook, secret, channel_factory):
    channel = channel_factory(WebhookChannel, "webhook", webhook.url, secret, timeout=0.3)
    webhook.delay_next(1, 1.0)
    (outcome,) = channel.send_many(make_alerts(1))
    assert outcome.status == "unknown" and "timed out" in outcome.error


# --- webhook: batches ------------------------------------------------------------------------------
def test_webhook_batches_deliver_each_alert_once(webhook, secret, channel_factory):
    channel = channel_factory(WebhookChannel, "webhook", webhook.url + "/alerts", secret, batch=10)
    alerts = make_alerts(25)
    outcomes = channel.send_many(alerts)

    assert [o.alert_id for o in outcomes] == [a.alert_id for a in alerts]
    assert {o.status for o in outcomes} == {"delivered"}
    assert [o.receipt["batch"] for o in outcomes] == [10] * 20 + [5] * 5
    chunks = [alerts[:10], alerts[10:20], alerts[20:]]
    keys = [batch_key([a.alert_id for a in chunk]) for chunk in chunks]
    assert dict(webhook.requests_per_batch_key) == {k: 1 for k in keys}
    assert [outcomes[i].receipt["batch_key"] for i in (0, 10, 20)] == keys
    assert dict(webhook.requests_per_key) == {a.alert_id: 1 for a in alerts}
    assert webhook.rejected_signatures == 0 and webhook.statuses == {200: 3}
    got = webhook.accepted[alerts[12].alert_id]
    assert got.headers[BATCH_HEADER] == "10" and got.batch_key == keys[1]
    assert json.loads(got.body) == {"alerts": [a.to_dict() for a in chunks[1]]}
    assert not any("already_delivered" in o.receipt for o in outcomes)

    # A run mixing 5 alerts the receiver has and 5 it has not: only the 5 are duplicates.
    mixed = alerts[20:] + make_alerts(5, start=100)
    again = channel.send_many(mixed)
    assert {o.status for o in again} == {"delivered"}
    assert [bool(o.receipt.get("already_delivered")) for o in again] == [True] * 5 + [False] * 5
    assert len(webhook.accepted) == 30 and sum(webhook.repeats.values()) == 5


def test_webhook_batch_failures_apply_to_each_alert_of_the_batch(webhook, secret, channel_factory):
    channel = channel_factory(WebhookChannel, "webhook", webhook.url, secret, batch=5, concurrency=1)
    alerts = make_alerts(15)
    webhook.fail_next(1, 500)  # the first request the receiver gets fails: which batch is up to the pool
    outcomes = channel.send_many(alerts)
    statuses = [o.status for o in outcomes]
    chunks = [statuses[i:i + 5] for i in range(0, 15, 5)]
    assert sorted(chunks) == [["delivered"] * 5] * 2 + [["retry"] * 5]  # one whole batch failed, alone
    failed = chunks.index(["retry"] * 5) * 5
    assert all("HTTP 500" in o.error for o in outcomes[failed:failed + 5])

    webhook.fail_next(1, 400)
    assert {o.status for o in channel.send_many(alerts[failed:failed + 5])} == {"permanent"}
    assert {o.status for o in channel.send_many(alerts[failed:failed + 5])} == {"delivered"}
    assert dict(webhook.requests_per_key) == {a.alert_id: 1 for a in alerts}

    webhook.delay_next(1, 1.0)
    channel.timeout = 0.3
    assert {o.status for o in channel.send_many(make_alerts(3, start=50))} == {"unknown"}


# --- kafka ---------------------------------------------------------------------------------------------
@pytest.fixture
def forward_topic(services_up, unique):
    from aldebaran.settings import KafkaSettings, load

    settings = load(KafkaSettings)
    topic = f"t-{unique}-forwarded"
    kadmin.ensure_topics(settings, [topic], partitions=3)
    yield settings, topic
    kadmin.delete_topics(settings, [topic])


def test_kafka_send_many_writes_each_alert_once_keyed_by_its_id(forward_topic, channel_factory):
    settings, topic = forward_topic
    channel = channel_factory(KafkaChannel, "kafka", topic, {"bootstrap.servers": settings.bootstrap_servers,
                                                             "linger.ms": 5})
    alerts = make_alerts(1200)  # more than one poll interval
    outcomes = channel.send_many(alerts)
    assert [o.alert_id for o in outcomes] == [a.alert_id for a in alerts]
    assert {o.status for o in outcomes} == {"delivered"}

    messages = kio.read_topic(settings, topic)
    assert sorted(m.key().decode() for m in messages) == sorted(a.alert_id for a in alerts)
    by_key = {m.key().decode(): m for m in messages}
    for a, o in zip(alerts, outcomes):
        m = by_key[a.alert_id]
        assert m.value() == a.to_json() and dict(m.headers())["aldebaran.alert_id"] == a.alert_id.encode()
        assert (m.partition(), m.offset()) == (o.receipt["partition"], o.receipt["offset"])


def test_kafka_send_many_without_acknowledgement_is_unknown(channel_factory):
    channel = channel_factory(KafkaChannel, "kafka", "anything", {"bootstrap.servers": "127.0.0.1:1"},
                              flush_timeout=0.5)
    outcomes = channel.send_many(make_alerts(3))
    assert {o.status for o in outcomes} == {"unknown"}
    assert all("not acknowledged within 0.5s" in o.error for o in outcomes)


# --- sms: lookup ----------------------------------------------------------------------------------------
@pytest.fixture
def sms():
    with SmsProvider() as provider:
        yield provider


def sms_channel(url: str, account_sid: str, token: str, **kw) -> SmsChannel:
    return SmsChannel("sms", url, account_sid, token, SENDER, RECIPIENT, timeout=5, **kw)


def test_sms_with_lookup_sends_a_reference_and_finds_the_message(sms, channel_factory):
    channel = channel_factory(sms_channel, sms.url, sms.account_sid, sms.auth_token, lookup=True)
    sent, never = make_alerts(2)
    receipt = channel.send(sent, sent.alert_id)

    assert sms.sends_by_reference == {sent.alert_id: 1}
    found = channel.lookup(sent.alert_id)
    assert found["sid"] == receipt["sid"] and found["reference"] == sent.alert_id
    assert (found["status"], found["to"], found["found_by"]) == ("queued", RECIPIENT, "lookup")
    assert channel.lookup(never.alert_id) is None
    assert len(sms.messages) == 1  # a lookup sends nothing


def test_sms_without_lookup_sends_no_reference(sms, channel_factory):
    channel = channel_factory(sms_channel, sms.url, sms.account_sid, sms.auth_token)
    (outcome,) = channel.send_many(make_alerts(1))
    assert outcome.status == "delivered" and not channel.has_lookup and channel.max_run == channel.concurrency
    assert sms.sends_by_reference == {} and len(sms.messages) == 1


def test_sms_lookup_when_the_provider_cannot_tell(sms, channel_factory):
    channel = channel_factory(sms_channel, sms.url, sms.account_sid, sms.auth_token, lookup=True)
    sms.fail_next(1, 503)
    with pytest.raises(RetryableError, match="HTTP 503 code 20500: injected failure"):
        channel.lookup("a1")
    wrong = channel_factory(sms_channel, sms.url, sms.account_sid, "wrong-" + secrets.token_hex(4), lookup=True)
    with pytest.raises(RetryableError, match="HTTP 401"):
        wrong.lookup("a1")


class FakeSmsLookupForFailureInjection:
    """Failure-path fake: a lookup endpoint answering 200/5xx with whatever body a test sets (the real
    SmsProvider always answers well-formed JSON)."""

    def __init__(self) -> None:
        self.status, self.body = 200, b""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _handle(self, request: web.BaseRequest) -> web.Response:
        return web.Response(status=self.status, body=self.body, content_type="application/json")

    async def _start(self) -> None:
        self._server = await self._loop.create_server(web.Server(self._handle), "127.0.0.1", 0)

    def __enter__(self) -> "FakeSmsLookupForFailureInjection":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc) -> None:
        async def stop() -> None:
            self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


@pytest.mark.parametrize(("status", "body", "expected"), [
    (200, b"<html>maintenance</html>", "not a message list: <html>maintenance</html>"),
    (200, b'{"messages": "none"}', 'not a message list: {"messages": "none"}'),
    (200, b'{"messages": [{"status": "sent"}]}', "not a message list"),
    (200, b"[]", "not a message list: []"),
    (502, b"bad gateway for TOKEN", "HTTP 502 bad gateway for ***"),
    (500, b'{"code": 1, "message": "TOKEN expired"}', "HTTP 500 code 1: *** expired"),
])
def test_sms_lookup_garbage_answers_are_retryable_scrubbed_and_bounded(channel_factory, status, body, expected):
    token = "tok-" + secrets.token_hex(8)
    with FakeSmsLookupForFailureInjection() as fake:
        fake.status, fake.body = status, body.replace(b"TOKEN", token.encode())
        channel = channel_factory(sms_channel, fake.url, "AC1", token, lookup=True)
        with pytest.raises(RetryableError) as exc:
            channel.lookup("a1")
        assert expected in str(exc.value) and token not in str(exc.value)
        fake.body = b"x" * 5000
        with pytest.raises(RetryableError) as exc:
            channel.lookup("a1")
        assert len(str(exc.value)) < 400
