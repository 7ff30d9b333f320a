"""The alertmanager channel against a real Prometheus Alertmanager (the binary `make setup` builds, started
here on a port of its own by the lab's service class): a resend merges by label set into the alert it
holds, and through the dispatcher over a real alerts topic and S3 ledger each alert is held once, also
after a crash between send and record."""

from __future__ import annotations

import pytest

from aldebaran.delivery.channels import AlertmanagerChannel, OutcomeUnknown, RetryableError
from aldebaran.model import Alert
from tests.integration.channel_crash import configure, crash_then_take_over, delivery_settings, ledger_for, runs
from tests.integration.test_dispatch_failures import make_alert, publish


def test_a_resend_merges_into_the_alert_alertmanager_holds(alertmanager):
    alert = Alert.from_dict(make_alert("am-1"))
    channel = AlertmanagerChannel("am", alertmanager.url, labels={"severity": "page"})
    try:
        assert channel.send(alert, alert.alert_id)["status"] == 200
        assert channel.send(alert, alert.alert_id)["status"] == 200  # the record of the first send was lost
    finally:
        channel.close()
    (held,) = alertmanager.alerts()
    assert held["labels"] == {"alertname": "AldebaranOverfill", "alert_id": alert.alert_id, "kind": "OVERFILL",
                              "order_id": "am-1", "client": "Sendence", "stock": "AAPL", "severity": "page"}
    assert held["annotations"]["summary"] == "Aldebaran OVERFILL order am-1: bought 120/100 AAPL"
    assert held["status"]["state"] == "active" and alertmanager.received() == 2
    assert alertmanager.alerts(alert_id=alert.alert_id) == [held]


def test_alertmanager_down_is_a_plain_retry_and_back_it_takes_the_alert(alertmanager):
    alert = Alert.from_dict(make_alert("am-2"))
    channel = AlertmanagerChannel("am", alertmanager.url)
    try:
        alertmanager.stop()
        with pytest.raises(RetryableError) as exc:
            channel.send(alert, alert.alert_id)
        assert not isinstance(exc.value, OutcomeUnknown)  # refused: nothing was sent
        alertmanager.start()
        assert channel.send(alert, alert.alert_id)["status"] == 200
    finally:
        channel.close()
    assert [h["labels"]["alert_id"] for h in alertmanager.alerts()] == [alert.alert_id]


def test_crash_between_send_and_record_holds_each_alert_once(kafka_topics, store, s3_prefix, monkeypatch,
                                                             alertmanager, unique):
    settings = delivery_settings(s3_prefix)
    ledger = ledger_for(store, settings)
    alerts = [make_alert(f"am-{i}") for i in range(20)]
    publish(kafka_topics, alerts + alerts[:5])  # and repeats: the topic is at-least-once
    configure(monkeypatch, "alertmanager", {"conn_type": "alertmanager", "host": alertmanager.url,
                                            "extra": {"labels": {"team": "risk"}, "batch": 10}})

    claimed, stats = crash_then_take_over(ledger, settings, kafka_topics, "alertmanager", f"g-{unique}")

    held = alertmanager.alerts()
    ids = sorted(a["alert_id"] for a in alerts)
    assert sorted(h["labels"]["alert_id"] for h in held) == ids  # 0 lost, 0 twice
    # The killed dispatcher sent its first run before it died, and the adopted runs went out again: some alerts
    # twice, and only alerts of the runs it had claimed (it may have claimed runs it never sent).
    resent = {e[1] for r in claimed for e in r.entries if e[2] == "?"}
    assert resent and len(ids) < alertmanager.received() <= len(ids) + len(resent)
    assert stats.in_doubt == {} and set(ledger.states("alertmanager").values()) == {"DELIVERED"}
    assert all(r.state == "RECORDED" for r in runs(ledger, "alertmanager", kafka_topics.alerts_topic))
    assert {h["labels"]["team"] for h in held} == {"risk"}


def test_the_dispatch_benchmark_reads_each_alert_back_once(tmp_path, monkeypatch):
    """The wiring of `aldebaran bench dispatch`'s alertmanager recipient (no benchmark is run)."""
    from aldebaran.runtime import paths
    from aldebaran_capacity.bench import dispatch

    monkeypatch.setattr(paths, "run_dir", lambda: tmp_path)
    recipient, conn, stop = dispatch._operations_recipient("alertmanager", "t1")
    try:
        channel = AlertmanagerChannel("am", conn["host"])
        alerts = [Alert.from_dict(a) for a in dispatch.make_alerts(3, "t1")]
        try:
            assert [o.status for o in channel.send_many(alerts + alerts[:1])] == ["delivered"] * 4
        finally:
            channel.close()
        stats = recipient.stats(summary=False)
        assert stats["received"] == 3 and sorted(stats["received_at"]) == sorted(a.alert_id for a in alerts)
        assert stats["duplicates"] == 1  # the repeat Alertmanager merged
    finally:
        stop()
