"""The dispatch benchmark's wiring of the operations channels (no benchmark is run): each kind's recipient
starts, its connection builds the channel `aldebaran dispatch` would build, one alert sent through it is
counted once by the recipient's stats, and the in-doubt kinds get the small count."""

from __future__ import annotations

import json

import pytest

from aldebaran.delivery.channels import Connection, channel_from_connection
from aldebaran.model import Alert
from aldebaran_capacity.bench import dispatch


def test_the_operations_channels_are_in_the_default_run_and_push_counts_as_in_doubt():
    assert set(dispatch.OPERATIONS_KINDS) <= set(dispatch.CHANNELS)
    assert set(dispatch.IN_DOUBT_KINDS) == {"sms", "fcm", "apns"}


@pytest.mark.parametrize("kind", ["pagerduty", "opsgenie", "fcm", "apns"])
def test_recipient_and_connection_of_each_kind(kind, tmp_path, monkeypatch):
    from aldebaran.runtime import paths

    monkeypatch.setattr(paths, "run_dir", lambda: tmp_path)
    recipient, conn, stop = dispatch._operations_recipient(kind, "t1")
    try:
        channel = channel_from_connection(kind, Connection.parse(f"AIRFLOW_CONN_ALDEBARAN_{kind.upper()}",
                                                                 json.dumps(conn)))
        alert = Alert.from_dict(dispatch.make_alerts(1, "t1")[0])
        try:
            assert channel.send_many([alert])[0].status == "delivered"
        finally:
            channel.close()
        stats = recipient.stats(summary=False)
        assert stats["received"] == 1 and stats["duplicates"] == 0 and list(stats["received_at"]) == [alert.alert_id]
    finally:
        stop()
