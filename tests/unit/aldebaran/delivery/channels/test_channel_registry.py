"""The channel registry, the Channel base class and Outcome: no services, no network."""

from __future__ import annotations

import json
import os
import threading
from typing import ClassVar

import pytest

from aldebaran.delivery import channels as ch
from aldebaran.delivery.channels import (
    Channel,
    Connection,
    Outcome,
    OutcomeUnknown,
    PermanentError,
    RetryableError,
    configured_channels,
    register,
)
from aldebaran.exceptions import ConfigError
from aldebaran.model import Alert


def alert(i: int) -> Alert:
    return Alert.from_dict({"alert_id": f"{i:032x}", "kind": "OVERFILL", "order_id": str(i), "requested": 1,
                            "purchased": 2})


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("AIRFLOW_CONN_ALDEBARAN_") or name == "ALDEBARAN_CHANNELS":
            monkeypatch.delenv(name)


@pytest.fixture
def registry():
    """Whatever a test registers is gone afterwards."""
    kinds, types = dict(ch.KINDS), dict(ch.CONN_TYPES)
    yield
    ch.KINDS.clear()
    ch.KINDS.update(kinds)
    ch.CONN_TYPES.clear()
    ch.CONN_TYPES.update(types)


class ScriptedChannel(Channel):
    """A channel whose send does what `script` says per order id: 'ok', 'retry', 'unknown', 'permanent'."""

    can_dedupe: ClassVar[bool] = True
    delivery_promise: ClassVar[ch.Promise] = ch.Promise.AT_LEAST_ONCE_STABLE_KEY

    def __init__(self, name: str = "scripted", script: dict | None = None, **kw) -> None:
        super().__init__(name, **kw)
        self.script = script or {}
        self.threads: set[str] = set()

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "ScriptedChannel":
        return cls(name, concurrency=conn.extra_int("concurrency", 4))

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        self.threads.add(threading.current_thread().name)
        what = self.script.get(alert.order_id, "ok")
        if what == "retry":
            raise RetryableError(f"try {alert.order_id} later")
        if what == "unknown":
            raise OutcomeUnknown(f"{alert.order_id} may have arrived")
        if what == "permanent":
            raise PermanentError(f"{alert.order_id} refused")
        if what == "bug":
            raise KeyError(alert.order_id)
        return {"key": idempotency_key}


# --- the registry ----------------------------------------------------------------------------------
def test_builtin_kinds_and_their_conn_types():
    assert set(ch.KINDS) == {"webhook", "email", "kafka", "sms", "log", "alertmanager", "pagerduty", "opsgenie",
                             "fcm", "apns"}
    assert dict(ch.CONN_TYPES) == {
        "webhook": "webhook", "http": "webhook", "https": "webhook", "email": "email", "smtp": "email",
        "kafka": "kafka", "sms": "sms", "twilio": "sms", "log": "log", "alertmanager": "alertmanager",
        "prometheus_alertmanager": "alertmanager", "pagerduty": "pagerduty", "pagerduty_events": "pagerduty",
        "opsgenie": "opsgenie", "opsgenie_alerts": "opsgenie", "fcm": "fcm", "firebase": "fcm", "apns": "apns",
        "apple_push": "apns"}
    assert all(cls.kind == kind for kind, cls in ch.KINDS.items())


def test_unknown_conn_type_lists_the_registered_kinds(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_PAGER", json.dumps({"conn_type": "pigeon", "host": "x"}))
    with pytest.raises(ConfigError) as exc:
        configured_channels(["pager"])
    assert str(exc.value) == (
        "AIRFLOW_CONN_ALDEBARAN_PAGER: field conn_type 'pigeon' is not a channel type; one of alertmanager, apns, "
        "apple_push, email, fcm, firebase, http, https, kafka, log, opsgenie, opsgenie_alerts, pagerduty, "
        "pagerduty_events, prometheus_alertmanager, sms, smtp, twilio, webhook (registered kinds: alertmanager, "
        "apns, email, fcm, kafka, log, opsgenie, pagerduty, sms, webhook)")


def test_a_kind_registered_later_is_found_by_its_conn_type(monkeypatch, registry):
    register("pigeon", conn_types=("carrier_pigeon", "loft"))(ScriptedChannel)
    assert ch.KINDS["pigeon"] is ScriptedChannel and ScriptedChannel.kind == "pigeon"
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_COOP", json.dumps({"conn_type": "carrier-pigeon", "extra": {"concurrency": 3}}))
    (built,) = configured_channels(["coop"])
    assert isinstance(built, ScriptedChannel) and (built.name, built.concurrency) == ("coop", 3)
    # the kind's name works as the channel name when the connection has no conn_type
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_PIGEON", json.dumps({"extra": {}}))
    assert isinstance(configured_channels(["pigeon"])[0], ScriptedChannel)


def test_a_kind_or_conn_type_cannot_be_taken_twice(registry):
    class Other(ScriptedChannel):
        pass

    with pytest.raises(ValueError, match="channel kind 'webhook' registered twice"):
        register("webhook")(Other)
    with pytest.raises(ValueError, match=r"conn_type\(s\) already taken: \{'http': 'webhook'\}"):
        register("other", conn_types=("http",))(Other)
    assert "other" not in ch.KINDS


# --- Outcome ---------------------------------------------------------------------------------------
def test_outcome_from_each_error_and_back():
    cases = [(RetryableError("r"), "retry"), (OutcomeUnknown("u"), "unknown"), (PermanentError("p"), "permanent")]
    for exc, status in cases:
        outcome = Outcome.failed("a1", exc)
        assert (outcome.alert_id, outcome.status, outcome.receipt, outcome.error) == ("a1", status, None, str(exc))
        with pytest.raises(type(exc), match=str(exc)) as raised:
            outcome.result()
        assert type(raised.value) is type(exc)
    delivered = Outcome.delivered("a1", {"status": 201})
    assert (delivered.status, delivered.result(), delivered.error) == ("delivered", {"status": 201}, None)


# --- the Channel base ------------------------------------------------------------------------------
def test_max_run_follows_can_dedupe():
    class Once(ScriptedChannel):
        can_dedupe: ClassVar[bool] = False

    assert ScriptedChannel().max_run == ch.DEDUPE_MAX_RUN == 5000
    # Without deduplication a crash may put a run in doubt: one window of sends (the concurrency).
    assert Once().max_run == ch.base.DEFAULT_CONCURRENCY == 16
    assert Once(concurrency=4).max_run == 4
    assert ScriptedChannel(max_run=10).max_run == 10
    with pytest.raises(ValueError, match="max_run must be at least 1"):
        ScriptedChannel(max_run=0)
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        ScriptedChannel(concurrency=0)


def test_builtin_max_run_and_lookup_flags():
    webhook = ch.WebhookChannel("w", "http://127.0.0.1:1", "k")
    sms = ch.SmsChannel("s", "http://127.0.0.1:1", "AC1", "t", "+15550001111", "+15552223333")
    assert (webhook.max_run, webhook.has_lookup, webhook.concurrency) == (5000, False, 64)
    assert (sms.max_run, sms.has_lookup, sms.remembers_sent) == (16, False, False)
    assert ch.SmsChannel("s", "http://127.0.0.1:1", "AC1", "t", "+15550001111", "+15552223333", lookup=True).has_lookup
    log = ch.LogChannel("log")
    assert (log.max_run, log.has_lookup, log.lookup_lags, log.remembers_sent) == (ch.DEDUPE_MAX_RUN, True, False, True)
    assert ch.KafkaChannel("k", "t", {"bootstrap.servers": "x:1"}).max_run == ch.DEDUPE_MAX_RUN
    with pytest.raises(NotImplementedError, match="webhook channel w has no lookup"):
        webhook.lookup("a1")


def test_default_send_many_keeps_order_and_maps_each_error():
    channel = ScriptedChannel(script={"1": "retry", "2": "unknown", "3": "permanent"}, concurrency=3)
    alerts = [alert(i) for i in range(8)]
    outcomes = channel.send_many(alerts)
    assert [o.alert_id for o in outcomes] == [a.alert_id for a in alerts]
    assert [o.status for o in outcomes] == ["delivered", "retry", "unknown", "permanent"] + ["delivered"] * 4
    assert outcomes[0].receipt == {"key": alerts[0].alert_id}
    assert outcomes[1].error == "try 1 later"
    assert channel.threads and all(t.startswith("send-scripted") for t in channel.threads)
    assert len(channel.threads) <= 3
    pool = channel._pool
    channel.send_many(alerts[:2])
    assert channel._pool is pool  # one pool for the channel's life
    channel.close()
    channel.close()  # idempotent
    assert channel._pool is None and pool._shutdown
    assert channel.send_many([]) == []
    assert [o.status for o in channel.send_many([alert(9)])] == ["delivered"]


def test_a_bug_in_send_is_not_turned_into_an_outcome():
    with pytest.raises(KeyError):
        ScriptedChannel(script={"2": "bug"}).send_many([alert(1), alert(2), alert(3)])


# --- the new connection extras ----------------------------------------------------------------------
def test_webhook_batch_and_concurrency_extras(monkeypatch):
    base = {"conn_type": "http", "host": "http://127.0.0.1:9", "password": "k"}
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_WEBHOOK", json.dumps({**base, "extra": {"batch": 100, "concurrency": 8}}))
    (webhook,) = configured_channels(["webhook"])
    assert (webhook.batch, webhook.concurrency) == (100, 8)
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_WEBHOOK", json.dumps(base))
    assert configured_channels(["webhook"])[0].batch == 1
    for bad in (0, 2001, "ten", 1.5, True):
        monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_WEBHOOK", json.dumps({**base, "extra": {"batch": bad}}))
        with pytest.raises(ConfigError, match=r"^AIRFLOW_CONN_ALDEBARAN_WEBHOOK: field extra.batch must be a whole number \(1-2000\)$"):
            configured_channels(["webhook"])


def test_sms_lookup_extra(monkeypatch):
    sms = {"conn_type": "sms", "host": "https://sms.example.com", "login": "AC1", "password": "t",
           "extra": {"from": "+15550001111", "to": "+15552223333"}}
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_SMS", json.dumps(sms))
    assert configured_channels(["sms"])[0].has_lookup is False
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_SMS", json.dumps({**sms, "extra": {**sms["extra"], "lookup": True}}))
    assert configured_channels(["sms"])[0].has_lookup is True


def test_batch_key_is_deterministic_per_ordered_ids():
    assert ch.batch_key(["a", "b"]) == ch.batch_key(["a", "b"]) != ch.batch_key(["b", "a"])
    assert ch.batch_key(["a", "b"]).startswith("batch-") and len(ch.batch_key(["a"])) == len("batch-") + 32
