"""The pagerduty and opsgenie channels without a provider: the event and key mapping within the field
limits, and the connection. Against the providers' fakes (deduplication, error classification):
tests/unit/aldebaran_capacity/receivers/test_pagerduty_opsgenie.py."""

from __future__ import annotations

import pytest

from aldebaran.delivery.channels import Connection, OpsgenieChannel, PagerDutyChannel, channel_from_connection
from aldebaran.delivery.channels.opsgenie import create_request
from aldebaran.delivery.channels.pagerduty import event
from aldebaran.exceptions import ConfigError
from aldebaran.model import Alert

from tests.unit.support.alerts import make_alert as _make_alert


def make_alert(order: str = "1", **over) -> Alert:
    return _make_alert(order, **{"message": "over", **over})


def conn(**fields) -> Connection:
    return Connection.from_fields("AIRFLOW_CONN_X", fields)


# --- mapping ---------------------------------------------------------------------------------------------
def test_pagerduty_event_maps_the_alert_id_to_dedup_key():
    alert = make_alert()
    got = event(alert, "R" * 32, source="aldebaran-prod", severity="critical")
    assert (got["routing_key"], got["event_action"], got["dedup_key"], got["client"]) == (
        "R" * 32, "trigger", alert.alert_id, "Aldebaran")
    assert got["payload"] == {"summary": "Aldebaran OVERFILL order 1: bought 120/100 AAPL", "source": "aldebaran-prod",
                              "severity": "critical", "class": "OVERFILL", "timestamp": "2023-11-14T22:13:20.500Z",
                              "component": "AAPL", "group": "Sendence", "custom_details": alert.to_dict()}


def test_opsgenie_request_maps_the_alert_id_to_alias_within_the_field_limits():
    alert = make_alert(order="o" * 300)
    got = create_request(alert, "og", priority="P2", tags=["risk"])
    assert got["alias"] == alert.alert_id and got["priority"] == "P2" and got["tags"] == ["OVERFILL", "risk"]
    assert len(got["message"]) <= 130 and got["source"] == "aldebaran" and len(got["entity"]) <= 512
    assert got["details"]["purchased"] == "120" and all(isinstance(v, str) for v in got["details"].values())
    assert "Requested:      100 shares" in got["description"]


def test_connections():
    pd = channel_from_connection("pd", conn(conn_type="pagerduty", password="k" * 32,
                                                  extra={"severity": "warning"}))
    assert isinstance(pd, PagerDutyChannel) and pd.url == "https://events.pagerduty.com/v2/enqueue"
    assert pd.severity == "warning" and "k" * 32 not in repr(pd)
    og = channel_from_connection("og", conn(conn_type="opsgenie", host="https://api.eu.opsgenie.com",
                                                  password="key", extra={"tags": "a,b", "priority": "P1"}))
    assert isinstance(og, OpsgenieChannel) and og.url == "https://api.eu.opsgenie.com/v2/alerts"
    assert (og.tags, og.priority) == (["a", "b"], "P1")
    with pytest.raises(ConfigError, match="field password is required"):
        channel_from_connection("pd", conn(conn_type="pagerduty"))
    with pytest.raises(ConfigError, match="severity must be one of"):
        channel_from_connection("pd", conn(conn_type="pagerduty", password="k", extra={"severity": "meh"}))
    assert PagerDutyChannel.promise()["dedupe_key"].startswith("dedup_key = alert id")
    assert OpsgenieChannel.promise()["dedupe_key"].startswith("alias = alert id")
