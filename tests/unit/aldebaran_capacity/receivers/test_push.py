"""The push fakes (aldebaran_capacity.receivers: FCM HTTP v1 with its OAuth 2 token endpoint, APNs over
HTTP/2 and TLS, in this process) driven by the product's push channels: the message and key mapping,
tokens, error classification, the connections built with the fakes' credentials, and that neither
deduplicates. What the channels promise without a fake: tests/unit/aldebaran/delivery/channels/test_channel_push.py."""

from __future__ import annotations

import json

import pytest

from aldebaran.audit.findings import alert_id
from aldebaran.delivery.channels import (
    ApnsChannel,
    Connection,
    FcmChannel,
    OutcomeUnknown,
    PermanentError,
    RetryableError,
    channel_from_connection,
)
from aldebaran.delivery.channels.push import apns_id
from aldebaran.exceptions import ConfigError
from aldebaran.model import Alert
from aldebaran_capacity.receivers import FakeApns, FakeFcm, self_signed_cert

from tests.unit.support.alerts import make_alert as _make_alert


def make_alert(order: str = "1", **over) -> Alert:
    return _make_alert(order, without=("trigger_event_id", "trigger_event_ts"), **over)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def fcm():
    with FakeFcm() as fake:
        yield fake


@pytest.fixture
def apns(cert):
    with FakeApns(cert) as fake:
        yield fake


def fcm_channel(fake: FakeFcm, **kw) -> FcmChannel:
    return FcmChannel("fcm", fake.service_account(), token="device-1", base_url=fake.url, **kw)


def apns_channel(fake: FakeApns, cert, **kw) -> ApnsChannel:
    return ApnsChannel("apns", key_id=fake.key_id, team_id=fake.team_id, signing_key=fake.signing_key(),
                       topic=kw.pop("topic", fake.topic), device_token=fake.device_token, base_url=fake.url,
                       verify=str(cert[0]), **kw)


# --- FCM ------------------------------------------------------------------------------------------------------
def test_fcm_message_uses_the_alert_id_as_collapse_key(fcm):
    channel = fcm_channel(fcm)
    alert = make_alert()
    try:
        receipt = channel.send(alert, alert.alert_id)
        channel.send(make_alert("2"), alert_id("OVERFILL", "2"))
    finally:
        channel.close()
    assert receipt["status"] == 200 and receipt["name"].startswith("projects/aldebaran-test/messages/")
    message = fcm.messages[0]
    assert message["token"] == "device-1" and message["android"] == {"collapse_key": alert.alert_id}
    assert message["apns"] == {"headers": {"apns-collapse-id": alert.alert_id}}
    assert message["notification"] == {"title": "[Aldebaran] OVERFILL on order 1 (Sendence AAPL)",
                                       "body": "Aldebaran OVERFILL order 1: bought 120/100 AAPL"}
    assert message["data"]["alert_id"] == alert.alert_id and message["data"]["purchased"] == "120"
    assert fcm.token_requests == 1  # one access token, kept for both sends


def test_fcm_renews_an_expired_token_once_and_classifies_errors(fcm):
    channel = fcm_channel(fcm)
    alert = make_alert()
    try:
        channel.send(alert, alert.alert_id)
        fcm.expire_tokens()
        assert channel.send(alert, alert.alert_id)["status"] == 200 and fcm.token_requests == 2
        for status, error in ((429, RetryableError), (500, RetryableError), (503, RetryableError),
                              (400, PermanentError), (404, PermanentError)):
            fcm.fail_next(1, status)
            with pytest.raises(error) as exc:
                channel.send(alert, alert.alert_id)
            assert type(exc.value) is error and f"HTTP {status}" in str(exc.value)
            assert "PRIVATE KEY" not in str(exc.value)
    finally:
        channel.close()
    assert fcm.per_collapse_key[alert.alert_id] == 2 and fcm.stats()["duplicates"] == 1  # no dedupe at FCM


def test_fcm_a_timeout_is_unknown_and_a_key_fcm_does_not_know_is_permanent(fcm):
    channel = fcm_channel(fcm, timeout=0.3)
    try:
        channel.send(make_alert(), make_alert().alert_id)  # the token first, undelayed
        fcm.delay_next(1, 1.0)
        with pytest.raises(OutcomeUnknown):
            channel.send(make_alert("2"), alert_id("OVERFILL", "2"))
    finally:
        channel.close()
    stranger = FcmChannel("fcm", {**FakeFcm().service_account(), "token_uri": f"{fcm.url}/token"}, token="d",
                          base_url=fcm.url)
    try:
        with pytest.raises(PermanentError, match="HTTP 400 invalid_grant"):
            stranger.send(make_alert(), make_alert().alert_id)
    finally:
        stranger.close()


def test_fcm_connection(fcm):
    account = json.dumps(fcm.service_account())
    channel = channel_from_connection("phones", Connection.from_fields(
        "AIRFLOW_CONN_ALDEBARAN_PHONES", {"conn_type": "fcm", "password": account, "extra": {"topic": "oncall"}}))
    assert isinstance(channel, FcmChannel) and channel.recipient == {"topic": "oncall"}
    assert channel.url == "https://fcm.googleapis.com/v1/projects/aldebaran-test/messages:send"
    assert channel.max_run == channel.concurrency  # a crash puts at most one send window in doubt
    with pytest.raises(ConfigError, match="exactly one recipient"):
        channel_from_connection("phones", Connection.from_fields("X", {"conn_type": "fcm", "password": account}))
    with pytest.raises(ConfigError, match="must be the service-account JSON key"):
        channel_from_connection("phones", Connection.from_fields("X", {"conn_type": "fcm", "password": "nope",
                                                                       "extra": {"token": "t"}}))


# --- APNs -----------------------------------------------------------------------------------------------------
def test_apns_sends_over_http2_with_the_collapse_id(apns, cert):
    channel = apns_channel(apns, cert)
    alert = make_alert()
    try:
        receipt = channel.send(alert, alert.alert_id)
    finally:
        channel.close()
    assert receipt["status"] == 200 and receipt["http_version"] == "HTTP/2"
    assert receipt["apns_id"] == apns_id(alert.alert_id)
    ((headers, payload),) = apns.notifications
    assert headers["apns-collapse-id"] == alert.alert_id and headers["apns-topic"] == apns.topic
    assert headers["apns-push-type"] == "alert" and headers[":path"] == f"/3/device/{apns.device_token}"
    assert payload["aps"]["alert"]["body"] == "Aldebaran OVERFILL order 1: bought 120/100 AAPL"
    assert payload["alert_id"] == alert.alert_id


def test_apns_errors_and_token_renewal(apns, cert):
    channel = apns_channel(apns, cert)
    alert = make_alert()
    try:
        channel.send(alert, alert.alert_id)
        apns.expire_tokens()
        assert channel.send(alert, alert.alert_id)["status"] == 200  # renewed on ExpiredProviderToken
        for status, error, reason in ((429, RetryableError, "TooManyRequests"), (500, RetryableError, "InternalServerError"),
                                      (503, RetryableError, "ServiceUnavailable"), (410, PermanentError, "Unregistered")):
            apns.fail_next(1, status)
            with pytest.raises(error) as exc:
                channel.send(alert, alert.alert_id)
            assert type(exc.value) is error and f"HTTP {status}" in str(exc.value) and reason in str(exc.value)
    finally:
        channel.close()
    assert apns.per_collapse_id[alert.alert_id] == 2  # APNs does not deduplicate: collapsing is not that
    wrong_topic = apns_channel(apns, cert, topic="com.example.other")
    try:
        with pytest.raises(PermanentError, match="TopicDisallowed"):
            wrong_topic.send(alert, alert.alert_id)
    finally:
        wrong_topic.close()


def test_apns_a_timeout_is_unknown_and_refused_is_a_plain_retry(apns, cert):
    channel = apns_channel(apns, cert, timeout=0.3)
    try:
        apns.delay_next(1, 1.0)
        with pytest.raises(OutcomeUnknown):
            channel.send(make_alert(), make_alert().alert_id)
        with apns.down():
            with pytest.raises(RetryableError) as exc:
                channel.send(make_alert("2"), alert_id("OVERFILL", "2"))
            assert not isinstance(exc.value, OutcomeUnknown)
    finally:
        channel.close()


def test_apns_runs_of_concurrent_sends_all_arrive_once(apns, cert):
    """A run's sends go out from the channel's send threads over shared HTTP/2 connections. httpx's
    synchronous HTTP/2 client shares a connection's h2 state between threads unguarded: it lost 14-182 of
    1,600-4,800 sends (RemoteProtocolError → IN_DOUBT) or raised (KeyError, hpack's "deque mutated during
    iteration") on a quiet 2-core box. Every send of every run must be delivered, each once."""
    channel = apns_channel(apns, cert)
    alerts = [make_alert(f"c{i}") for i in range(40 * channel.concurrency)]
    try:
        outcomes = [o for i in range(0, len(alerts), channel.concurrency)
                    for o in channel.send_many(alerts[i:i + channel.concurrency])]
    finally:
        channel.close()
    assert [o.status for o in outcomes] == ["delivered"] * len(alerts), {o.error for o in outcomes if o.error}
    assert len(apns.per_collapse_id) == len(alerts) and set(apns.per_collapse_id.values()) == {1}


def test_apns_connection(apns):
    channel = channel_from_connection("iphone", Connection.from_fields("AIRFLOW_CONN_ALDEBARAN_IPHONE", {
        "conn_type": "apns", "host": "https://api.sandbox.push.apple.com", "login": apns.key_id,
        "password": apns.signing_key(),
        "extra": {"team_id": apns.team_id, "topic": apns.topic, "device_token": apns.device_token}}))
    assert isinstance(channel, ApnsChannel)
    assert channel.url == f"https://api.sandbox.push.apple.com/3/device/{apns.device_token}"
    assert "PRIVATE KEY" not in repr(channel)
    with pytest.raises(ConfigError, match="extra.team_id is required"):
        channel_from_connection("iphone", Connection.from_fields("X", {"conn_type": "apns", "login": "K",
                                                                       "password": "p"}))
