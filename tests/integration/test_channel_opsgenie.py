"""The opsgenie channel through the dispatcher, over a real alerts topic and a real S3 ledger, into the fake
Opsgenie Alert API (aldebaran_capacity.receivers.FakeOpsgenie, the provider's published contract): each
alert opens one Opsgenie alert, also after a crash between send and record and with the topic's repeats."""

from __future__ import annotations

import pytest

from aldebaran_capacity.receivers import FakeOpsgenie
from tests.integration.channel_crash import configure, crash_then_take_over, delivery_settings, ledger_for, runs
from tests.integration.test_dispatch_failures import make_alert, publish


@pytest.fixture
def opsgenie():
    with FakeOpsgenie() as fake:
        yield fake


def test_crash_between_send_and_record_opens_each_alert_once(kafka_topics, store, s3_prefix, monkeypatch,
                                                             opsgenie, unique):
    settings = delivery_settings(s3_prefix)
    ledger = ledger_for(store, settings)
    alerts = [make_alert(f"og-{i}") for i in range(20)]
    publish(kafka_topics, alerts + alerts[:5])  # and repeats: the topic is at-least-once
    configure(monkeypatch, "opsgenie", {"conn_type": "opsgenie", "host": opsgenie.url, "password": opsgenie.api_key,
                                        "extra": {"priority": "P2", "tags": ["aldebaran"], "timeout": 3}})

    claimed, stats = crash_then_take_over(ledger, settings, kafka_topics, "opsgenie", f"g-{unique}")

    ids = sorted(a["alert_id"] for a in alerts)
    assert dict(opsgenie.opened) == {i: 1 for i in ids}  # 0 lost, 0 twice
    # The adopted runs went out again with the same alias: Opsgenie counted them on the open alerts.
    twice = {k for k, n in opsgenie.requests_per_alias.items() if n > 1}
    assert twice and twice <= {e[1] for r in claimed for e in r.entries}
    assert max(opsgenie.requests_per_alias.values()) == 2 and opsgenie.unauthorized == 0
    assert stats.in_doubt == {} and set(ledger.states("opsgenie").values()) == {"DELIVERED"}
    assert sorted(ledger.states("opsgenie")) == ids
    assert all(r.state == "RECORDED" for r in runs(ledger, "opsgenie", kafka_topics.alerts_topic))
    assert {c["priority"] for c in opsgenie.created} == {"P2"}
    assert all(c["tags"] == ["OVERFILL", "aldebaran"] for c in opsgenie.created)
