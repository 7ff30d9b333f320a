"""The pagerduty channel through the dispatcher, over a real alerts topic and a real S3 ledger, into the fake
PagerDuty Events API v2 (aldebaran_capacity.receivers.FakePagerDuty, the provider's published contract):
each alert opens one PagerDuty alert, also after a crash between send and record and with the topic's
repeats, and a throttled send is retried until it goes through."""

from __future__ import annotations

import time

import pytest

from aldebaran.delivery.channels import configured_channels
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran_capacity.receivers import FakePagerDuty
from tests.integration.channel_crash import configure, crash_then_take_over, delivery_settings, ledger_for, runs
from tests.integration.test_dispatch_failures import make_alert, publish


@pytest.fixture
def pagerduty():
    with FakePagerDuty() as fake:
        yield fake


@pytest.fixture
def settings(s3_prefix):
    return delivery_settings(s3_prefix)


@pytest.fixture
def ledger(store, settings):
    return ledger_for(store, settings)


def connect(monkeypatch, fake: FakePagerDuty) -> None:
    configure(monkeypatch, "pagerduty", {"conn_type": "pagerduty", "host": fake.url, "password": fake.routing_key,
                                         "extra": {"severity": "critical", "timeout": 3}})


def test_crash_between_send_and_record_opens_each_alert_once(kafka_topics, ledger, settings, monkeypatch,
                                                             pagerduty, unique):
    alerts = [make_alert(f"pd-{i}") for i in range(20)]
    publish(kafka_topics, alerts + alerts[:5])  # and repeats: the topic is at-least-once
    connect(monkeypatch, pagerduty)

    claimed, stats = crash_then_take_over(ledger, settings, kafka_topics, "pagerduty", f"g-{unique}")

    ids = sorted(a["alert_id"] for a in alerts)
    assert dict(pagerduty.opened) == {i: 1 for i in ids}  # 0 lost, 0 twice
    # The adopted runs went out again with the same dedup_key: PagerDuty added them to the open alerts.
    twice = {k for k, n in pagerduty.requests_per_key.items() if n > 1}
    assert twice and twice <= {e[1] for r in claimed for e in r.entries}
    assert max(pagerduty.requests_per_key.values()) == 2 and sum(pagerduty.repeats.values()) == len(twice)
    assert stats.in_doubt == {} and sorted(ledger.states("pagerduty")) == ids
    assert set(ledger.states("pagerduty").values()) == {"DELIVERED"}
    assert all(r.state == "RECORDED" for r in runs(ledger, "pagerduty", kafka_topics.alerts_topic))
    event = pagerduty.events[0]
    assert event["dedup_key"] in ids and event["payload"]["severity"] == "critical"


def test_throttled_and_failing_sends_are_retried_until_delivered(kafka_topics, ledger, settings, monkeypatch,
                                                                 pagerduty, unique):
    alerts = [make_alert(f"pd-r{i}") for i in range(4)]
    publish(kafka_topics, alerts)
    connect(monkeypatch, pagerduty)
    pagerduty.fail_next(2, 429)  # failure injection: throttled (with Retry-After), then a server error
    pagerduty.fail_next(1, 503)
    channels = configured_channels()
    stats = Dispatcher(ledger, channels, kafka=kafka_topics, group=f"g-{unique}", settings=settings).run_once(
        idle_timeout=4.0)
    assert stats.failed.get("pagerduty") == 3
    for record_id in ledger.indexed("retry", "pagerduty"):  # any not swept within the run: once more
        record, _ = ledger.get("pagerduty", record_id)
        assert "HTTP 429" in record.error or "HTTP 503" in record.error
    if ledger.indexed("retry", "pagerduty"):
        time.sleep(1.2)
        Dispatcher(ledger, channels, kafka=kafka_topics, group=f"g-{unique}", settings=settings).run_once(
            idle_timeout=2.0)
    assert dict(pagerduty.opened) == {a["alert_id"]: 1 for a in alerts}
    assert set(ledger.states("pagerduty").values()) == {"DELIVERED"}
