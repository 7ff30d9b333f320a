"""Delivery under failure, against real Kafka, MinIO and local receivers: races, a stale owner,
receiver outages, permanent failures, a dispatcher SIGKILLed between send and record, an object-store
outage, malformed alerts and an unreadable ledger object. Each alert must reach each channel exactly
once (SMS: at most once; IN_DOUBT recorded instead of a resend, settled by the provider's lookup when
the channel has one)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aldebaran.audit.findings import alert_id
from aldebaran.delivery.channels import configured_channels
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import DEAD, DELIVERED, IN_DOUBT, RetryPolicy
from aldebaran.delivery.runs import RECORDED
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.kafka import io as kio
from aldebaran_capacity.receivers import SmsProvider, WebhookReceiver
from aldebaran_lab import services

HERE = Path(__file__).resolve().parent


def make_alert(order_id: str, requested: int = 100, purchased: int = 120) -> dict:
    return {"alert_id": alert_id("OVERFILL", order_id), "kind": "OVERFILL", "rule": "overfill",
            "order_id": order_id, "client": "Sendence", "stock": "AAPL", "requested": requested,
            "purchased": purchased, "purchase_count": 2, "trigger_event_id": f"{order_id}-p2",
            "trigger_event_ts": 1_700_000_000_000, "detected_at": int(time.time() * 1000),
            "message": "test alert"}


def publish(kafka, alerts: list[dict], raw: list[bytes] = ()) -> None:
    records = [(a["alert_id"], json.dumps(a)) for a in alerts] + [(b"bad", r) for r in raw]
    kio.produce_all(kio.producer(kafka), kafka.alerts_topic, records)


@pytest.fixture
def secret():
    return secrets.token_urlsafe(24)


@pytest.fixture
def webhook(secret):
    with WebhookReceiver(secret) as receiver:
        yield receiver


@pytest.fixture
def sms():
    with SmsProvider() as provider:
        yield provider


@pytest.fixture
def channel_env(monkeypatch, webhook, secret, sms):
    def configure(*names: str, lookup: bool = False) -> list:
        monkeypatch.setenv("ALDEBARAN_CHANNELS", ",".join(names))
        monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_WEBHOOK", json.dumps(
            {"conn_type": "http", "host": webhook.url, "password": secret, "extra": {"endpoint": "/alerts", "timeout": 3}}))
        monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_SMS", json.dumps(
            {"conn_type": "sms", "host": sms.url, "login": sms.account_sid, "password": sms.auth_token,
             "extra": {"from": "+15550001111", "to": "+15552223333", "lookup": lookup}}))
        return configured_channels()
    return configure


@pytest.fixture
def settings(s3_prefix):
    return DeliverySettings(prefix=f"{s3_prefix}/deliveries", lease_seconds=3, max_attempts=3,
                            backoff_base_seconds=0.3, backoff_max_seconds=1.0, sweep_seconds=0.5,
                            lookup_grace_seconds=0.5)


@pytest.fixture
def ledger(store, settings):
    return Ledger(store, prefix=settings.prefix, lease_seconds=settings.lease_seconds,
                  policy=RetryPolicy(settings.max_attempts, settings.backoff_base_seconds, settings.backoff_max_seconds))


def dispatcher(ledger, channels, kafka, group, settings, owner=None) -> Dispatcher:
    return Dispatcher(ledger, channels, kafka=kafka, group=group, owner=owner, settings=settings)


def run_states(ledger, channel, topic) -> list:
    return [e[2] for p in (0, 1) for r in ledger.runs(channel, topic, p) for e in r.entries]


def test_two_dispatchers_of_one_group_deliver_each_alert_once(kafka_topics, ledger, settings, channel_env, webhook,
                                                             sms, unique):
    alerts = [make_alert(str(i)) for i in range(40)]
    publish(kafka_topics, alerts + alerts)  # and every alert twice on the topic
    channels = channel_env("webhook", "sms")
    results = []

    def run(name):
        results.append(dispatcher(ledger, channels, kafka_topics, f"g-{unique}", settings, owner=name)
                       .run_once(idle_timeout=3.0))

    threads = [threading.Thread(target=run, args=(n,)) for n in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.sent.get("webhook", 0) for r in results) == 40
    assert sum(r.sent.get("sms", 0) for r in results) == 40
    assert set(webhook.requests_per_key.values()) == {1} and len(webhook.accepted) == 40
    assert set(sms.sends.values()) == {1} and len(sms.messages) == 40
    states = run_states(ledger, "webhook", kafka_topics.alerts_topic)
    assert states.count("D") == 40 and states.count("S") == 40  # the repeats are recognised, not sent


class HoldAfterSendFaultInjection:
    """Failure injection: wraps a real channel; each send goes out, then the sender waits for `release`
    before the dispatcher may record it (a stall between send and record), and `sent` is set."""

    def __init__(self, inner, sent: threading.Event, release: threading.Event) -> None:
        self.inner, self.sent, self.release = inner, sent, release

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def send_many(self, alerts):
        outcomes = self.inner.send_many(alerts)
        self.sent.set()
        self.release.wait(60)
        return outcomes


def test_a_stale_owner_is_fenced_and_recipients_see_each_alert_once(kafka_topics, ledger, settings, channel_env,
                                                                    webhook, sms, unique, caplog):
    """Two consumer groups on one channel (a misconfiguration, or a zombie from before a rebalance): each takes
    the partition's epoch in turn; the older one is fenced at its next ledger write. The zombie is held between
    its send and its record until the current group has run to the end: left to race, the two groups often
    ran one after the other, the second finding every run recorded, and the test passed with no fence at all."""
    alerts = [make_alert(f"z{i}") for i in range(30)]
    publish(kafka_topics, alerts)
    zombie = f"zombie-{unique}"
    sent = {"webhook": threading.Event(), "sms": threading.Event()}
    release = threading.Event()
    held = [HoldAfterSendFaultInjection(c, sent[c.name], release) for c in channel_env("webhook", "sms")]
    thread = threading.Thread(target=lambda: dispatcher(ledger, held, kafka_topics, zombie, settings, owner=zombie)
                              .run_once(idle_timeout=3.0))
    try:
        with caplog.at_level(logging.ERROR, logger="aldebaran.delivery.dispatcher"):
            thread.start()
            assert all(e.wait(60) for e in sent.values()), "the zombie sent nothing on a channel"
            # The zombie holds epoch 1 and a claimed, sent, unrecorded run per busy partition: the current group
            # takes epoch 2, adopts those runs and records them.
            current = f"current-{unique}"
            dispatcher(ledger, channel_env("webhook", "sms"), kafka_topics, current, settings, owner=current
                       ).run_once(idle_timeout=3.0)
            release.set()
            thread.join(60)
    finally:
        release.set()
    assert not thread.is_alive()
    # Fencing happened: on each channel the current group adopted the zombie's runs, and the zombie's record
    # write of each (If-Match on the ETag it claimed with) was refused; its partition stopped.
    topic = kafka_topics.alerts_topic
    refusals = [r.getMessage() for r in caplog.records]
    for name in ("webhook", "sms"):
        adopted = [r for p in (0, 1) for r in ledger.runs(name, topic, p)
                   if any(h["note"] == f"adopted from {zombie} (epoch 1)" for h in r.history)]
        assert adopted and all(r.owner == current and r.state == RECORDED for r in adopted), name
        for r in adopted:
            line = (f"{name}: partition {r.partition} stopped: {ledger.run_key(name, topic, r.partition, r.start)} "
                    f"changed under {zombie} (epoch 1): another owner took this run")
            assert line in refusals, (line, refusals)
    assert len(webhook.accepted) == 30  # the adopted runs' resends had the same keys: the receiver answered 409
    assert set(sms.sends.values()) == {1} and len(sms.messages) == 30  # SMS: fenced runs + sent markers, at most once
    runs = [r for p in (0, 1) for r in ledger.runs("webhook", topic, p)]
    assert all(r.state == RECORDED for r in runs)
    delivered = [e[1] for r in runs for e in r.entries if e[2] == "D"]
    assert sorted(set(delivered)) == sorted(a["alert_id"] for a in alerts)


def test_receiver_down_for_a_while_then_retry_delivers(kafka_topics, ledger, settings, channel_env, webhook, unique):
    alerts = [make_alert(f"d{i}") for i in range(5)]
    publish(kafka_topics, alerts)
    channels = channel_env("webhook")
    webhook.fail_next(5, 503)  # failure injection: the first five requests get 503
    stats = dispatcher(ledger, channels, kafka_topics, f"g-{unique}", settings).run_once(idle_timeout=4.0)
    assert stats.failed == {"webhook": 5}
    # The sweep retried them (backoff 0.15–1 s) within the same run, or the next run does.
    records = {a["alert_id"]: ledger.get("webhook", a["alert_id"])[0] for a in alerts}
    if any(r.state != DELIVERED for r in records.values()):
        time.sleep(1.2)
        dispatcher(ledger, channels, kafka_topics, f"g-{unique}", settings).run_once(idle_timeout=2.0)
        records = {a["alert_id"]: ledger.get("webhook", a["alert_id"])[0] for a in alerts}
    assert {r.state for r in records.values()} == {DELIVERED}
    assert all(r.attempt == 2 for r in records.values())
    assert len(webhook.accepted) == 5
    assert ledger.indexed("retry", "webhook") == []


def test_receiver_failing_permanently_goes_dead_after_max_attempts(kafka_topics, ledger, settings, channel_env, webhook,
                                                                  unique):
    publish(kafka_topics, [make_alert("dead-1")])
    channels = channel_env("webhook")
    webhook.fail_next(100, 500)  # failure injection: the receiver keeps failing
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        dispatcher(ledger, channels, kafka_topics, f"g-{unique}", settings).run_once(idle_timeout=1.5)
        record, _ = ledger.get("webhook", alert_id("OVERFILL", "dead-1"))
        if record.state == DEAD:
            break
        time.sleep(0.5)
    assert record.state == DEAD and record.attempt == 3
    assert ledger.indexed("dead", "webhook") == [record.alert_id]
    assert ledger.stats("webhook")["dead"] == 1


def test_permanent_client_error_goes_dead_at_once(kafka_topics, ledger, settings, channel_env, webhook, unique):
    publish(kafka_topics, [make_alert("perm-1")])
    webhook.fail_next(1, 400)
    dispatcher(ledger, channel_env("webhook"), kafka_topics, f"g-{unique}", settings).run_once(idle_timeout=1.5)
    record, _ = ledger.get("webhook", alert_id("OVERFILL", "perm-1"))
    assert record.state == DEAD and record.attempt == 1


@pytest.mark.parametrize("channel", ["webhook", "sms", "sms-lookup"])
def test_dispatcher_sigkilled_between_send_and_record(channel, kafka_topics, ledger, settings, channel_env, webhook,
                                                      sms, unique, s3_prefix):
    alert = make_alert(f"kill-{channel}")
    publish(kafka_topics, [alert])
    name = channel.split("-")[0]
    channels = channel_env(name, lookup=channel == "sms-lookup")
    group = f"g-{unique}"
    proc = subprocess.run(
        [sys.executable, str(HERE / "fault_dispatch.py"), settings.prefix, group, "3"],
        env=dict(os.environ), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]  # SIGKILLed right after its send
    run, _ = ledger.get_run(name, kafka_topics.alerts_topic, 0, 0) or ledger.get_run(
        name, kafka_topics.alerts_topic, 1, 0)
    assert run.state == "CLAIMED"  # the send happened, the run was never recorded (every channel uses runs)

    time.sleep(3.2)  # the lease runs out (the per-alert record's; a run is adopted at once)
    stats = dispatcher(ledger, channels, kafka_topics, group, settings).run_once(idle_timeout=3.0)
    if name == "webhook":
        # The newer owner adopts the run and re-sends with the same Idempotency-Key: the receiver dedupes (409).
        assert webhook.requests_per_key[alert["alert_id"]] == 2 and len(webhook.accepted) == 1
        assert run_states(ledger, "webhook", kafka_topics.alerts_topic) == ["D"]
        return
    record, _ = ledger.get(name, alert["alert_id"])
    assert len(sms.messages) == 1 and stats.sent == {}  # an SMS provider cannot deduplicate: never re-sent
    assert run_states(ledger, name, kafka_topics.alerts_topic) == ["U"]  # the run's entry: its own record carries on
    if channel == "sms":
        assert record.state == IN_DOUBT  # for an operator
        assert ledger.indexed("in_doubt", "sms") == [alert["alert_id"]]
    else:
        # The provider has a message log: the doubt is settled by asking it, not by resending.
        deadline = time.monotonic() + 20
        while record.state != DELIVERED and time.monotonic() < deadline:
            dispatcher(ledger, channels, kafka_topics, group, settings).run_once(idle_timeout=1.0)
            record, _ = ledger.get(name, alert["alert_id"])
        assert record.state == DELIVERED and record.receipt["sid"] == sms.messages[0].sid
        assert "lookup" in record.history[-1]["note"] and len(sms.messages) == 1
        assert ledger.indexed("in_doubt", "sms") == []


@pytest.mark.serial  # stops the suite's shared MinIO for 6 s: alone, after the parallel phase (scripts/test.sh)
def test_object_store_outage_backs_off_and_resumes_without_loss(kafka_topics, ledger, settings, channel_env, webhook,
                                                                unique):
    alerts = [make_alert(f"s3-{i}") for i in range(10)]
    channels = channel_env("webhook")
    minio = services.get("minio")
    minio.stop()
    try:
        publish(kafka_topics, alerts)
        restarter = threading.Timer(6.0, minio.start)
        restarter.start()
        stats = dispatcher(ledger, channels, kafka_topics, f"g-{unique}", settings).run_once(idle_timeout=5.0)
        restarter.join()
    finally:
        if not minio.running():
            minio.start()
    assert stats.sent == {"webhook": 10}
    assert len(webhook.accepted) == 10 and set(webhook.requests_per_key.values()) == {1}
    assert run_states(ledger, "webhook", kafka_topics.alerts_topic).count("D") == 10


def test_malformed_alerts_are_dead_lettered_and_dispatch_continues(kafka_topics, ledger, settings, channel_env,
                                                                   webhook, store, unique):
    good = [make_alert("ok-1"), make_alert("ok-2")]
    raw = [b"not json", b'{"alert_id": 7, "kind": "OVERFILL", "order_id": "x"}', b'{"kind": "OVERFILL"}',
           json.dumps({"alert_id": "../../escape", "kind": "OVERFILL", "order_id": "x"}).encode()]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(good[0]["alert_id"], json.dumps(good[0]))] + [(b"bad", r) for r in raw]
                         + [(good[1]["alert_id"], json.dumps(good[1]))])
    stats = dispatcher(ledger, channel_env("webhook"), kafka_topics, f"g-{unique}", settings).run_once(idle_timeout=2.0)
    assert stats.malformed == 4 and stats.sent == {"webhook": 2}
    letters = kio.read_topic(kafka_topics, kafka_topics.alerts_dlq_topic)
    assert sorted(m.value() for m in letters) == sorted(raw)
    assert all(dict(m.headers())["aldebaran.reason"] for m in letters)
    assert {dict(m.headers())["aldebaran.consumer"] for m in letters} == {b"dispatcher:webhook"}
    assert not list(store.list("escape"))  # the unsafe id never became an object key


def test_an_unreadable_ledger_object_stops_its_partition_and_sends_nothing(kafka_topics, ledger, settings, channel_env,
                                                                          webhook, store, unique, caplog):
    alerts = [make_alert(f"c{i}") for i in range(6)]
    publish(kafka_topics, alerts)
    for partition in (0, 1):  # garbage where each partition's first run would be
        store.create(ledger.run_key("webhook", kafka_topics.alerts_topic, partition, 0), b"{garbage")
    with caplog.at_level(logging.ERROR):
        stats = dispatcher(ledger, channel_env("webhook"), kafka_topics, f"g-{unique}", settings).run_once(idle_timeout=2.0)
    assert stats.sent == {} and len(webhook.accepted) == 0  # never a resend on an unreadable record
    assert any("cannot be read" in r.message and "/runs/" in r.message for r in caplog.records)


def test_a_stop_mid_poll_commits_only_what_was_settled(kafka_topics, ledger, settings, channel_env, sms, unique):
    """A dispatcher stopped part-way through a poll (SIGTERM: it finishes the run in hand) must not
    commit the consumer's position: the alerts it had read but not sent are the next owner's to send.
    The SMS channel's runs are one window (its concurrency) long; the stop lands after the first one."""
    alerts = [make_alert(f"t{i}") for i in range(300)]
    publish(kafka_topics, alerts)
    (channel,) = channel_env("sms")
    stop = threading.Event()
    real_send_many = channel.send_many

    def send_then_stop(batch):
        out = real_send_many(batch)
        stop.set()  # as a SIGTERM handler would, while the poll's buffer still holds most alerts
        return out

    channel.send_many = send_then_stop
    first = dispatcher(ledger, [channel], kafka_topics, f"g-{unique}", settings, owner="first").run(stop=stop)
    sent_first = first.sent.get("sms", 0)
    assert 0 < sent_first < 300 and len(sms.messages) == sent_first

    channel.send_many = real_send_many
    second = dispatcher(ledger, [channel], kafka_topics, f"g-{unique}", settings, owner="second")
    second.run_once(idle_timeout=3.0)
    assert len(sms.messages) == 300 and set(sms.sends.values()) == {1}  # none lost, none twice
