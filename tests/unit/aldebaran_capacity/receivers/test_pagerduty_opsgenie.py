"""The pagerduty and opsgenie fakes (aldebaran_capacity.receivers: the providers' published contracts, in
this process) driven by the product's channels: deduplication by ``dedup_key`` / ``alias`` while the
provider's alert is open, and how the channels classify the providers' answers. The channels' event
mapping and connections without a fake: tests/unit/aldebaran/delivery/channels/test_channel_pagerduty.py."""

from __future__ import annotations

import json
import time

import pytest

from aldebaran.delivery.channels import (
    OpsgenieChannel,
    OutcomeUnknown,
    PagerDutyChannel,
    PermanentError,
    RetryableError,
)
from aldebaran.model import Alert
from aldebaran_capacity.receivers import FakeOpsgenie, FakePagerDuty

from tests.unit.support.alerts import make_alert as _make_alert


def make_alert(order: str = "1", **over) -> Alert:
    return _make_alert(order, **{"message": "over", **over})


@pytest.fixture
def pagerduty():
    with FakePagerDuty(window=1.0) as fake:
        yield fake


@pytest.fixture
def opsgenie():
    with FakeOpsgenie(window=1.0) as fake:
        yield fake


def pd_channel(fake: FakePagerDuty, **kw) -> PagerDutyChannel:
    return PagerDutyChannel("pd", kw.pop("key", fake.routing_key), base_url=fake.url, **kw)


def og_channel(fake: FakeOpsgenie, **kw) -> OpsgenieChannel:
    return OpsgenieChannel("og", kw.pop("key", fake.api_key), base_url=fake.url, **kw)


def test_pagerduty_dedupes_a_resend_while_the_alert_is_open(pagerduty):
    channel = pd_channel(pagerduty)
    alert = make_alert()
    try:
        first = channel.send(alert, alert.alert_id)
        again = channel.send(alert, alert.alert_id)  # the record of the first send was lost
        assert first["status"] == again["status"] == 202 and first["dedup_key"] == alert.alert_id
        assert pagerduty.opened == {alert.alert_id: 1} and pagerduty.requests_per_key[alert.alert_id] == 2
        time.sleep(1.1)  # the fake's window: the alert is resolved, the same key opens a new one
        channel.send(alert, alert.alert_id)
        assert pagerduty.opened == {alert.alert_id: 2}
    finally:
        channel.close()


@pytest.mark.parametrize(("status", "error"), [(429, RetryableError), (500, RetryableError), (502, RetryableError),
                                               (503, RetryableError), (400, PermanentError), (403, PermanentError)])
def test_pagerduty_errors(pagerduty, status, error):
    channel = pd_channel(pagerduty)
    alert = make_alert()
    pagerduty.fail_next(1, status)
    try:
        with pytest.raises(error) as exc:
            channel.send(alert, alert.alert_id)
        assert type(exc.value) is error and f"HTTP {status}" in str(exc.value)
        assert ("Retry-After: 1" in str(exc.value)) == (status == 429)
        assert pagerduty.routing_key not in str(exc.value)
    finally:
        channel.close()


def test_pagerduty_refuses_a_wrong_key_for_good_and_throttles_over_its_rate():
    with FakePagerDuty(per_minute=3) as fake:
        wrong = pd_channel(fake, key="w" * 32)
        right = pd_channel(fake)
        try:
            with pytest.raises(PermanentError, match="Invalid routing key") as exc:
                wrong.send(make_alert(), make_alert().alert_id)
            assert "w" * 32 not in str(exc.value)
            outcomes = right.send_many([make_alert(str(i)) for i in range(5)])
        finally:
            wrong.close()
            right.close()
    assert sorted(o.status for o in outcomes) == ["delivered"] * 3 + ["retry"] * 2
    assert all("HTTP 429" in o.error and "Retry-After:" in o.error for o in outcomes if o.status == "retry")
    assert sum(fake.opened.values()) == 3


def test_opsgenie_genie_key_alias_dedupe_and_errors(opsgenie):
    channel = og_channel(opsgenie)
    alert = make_alert()
    try:
        first = channel.send(alert, alert.alert_id)
        assert first["status"] == 202 and first["result"] == "Request will be processed" and first["request_id"]
        channel.send(alert, alert.alert_id)
        assert opsgenie.opened == {alert.alert_id: 1} and opsgenie.requests_per_alias[alert.alert_id] == 2
        (created, _) = opsgenie.created
        assert created["alias"] == alert.alert_id and json.dumps(created).count(opsgenie.api_key) == 0
        for status, error in ((429, RetryableError), (503, RetryableError), (422, PermanentError)):
            opsgenie.fail_next(1, status)
            with pytest.raises(error, match=f"HTTP {status}"):
                channel.send(alert, alert.alert_id)
    finally:
        channel.close()
    bad = og_channel(opsgenie, key="not-the-key")
    try:
        with pytest.raises(PermanentError, match="HTTP 401") as exc:
            bad.send(alert, alert.alert_id)
        assert "not-the-key" not in str(exc.value) and opsgenie.unauthorized == 1
    finally:
        bad.close()


def test_a_timeout_after_sending_is_unknown_which_a_deduplicating_channel_may_resend(opsgenie):
    channel = og_channel(opsgenie, timeout=0.3)
    alert = make_alert()
    opsgenie.delay_next(1, 1.0)
    try:
        with pytest.raises(OutcomeUnknown):
            channel.send(alert, alert.alert_id)
        channel.timeout = 5
        time.sleep(0.8)  # the delayed request lands
        channel.send(alert, alert.alert_id)
    finally:
        channel.close()
    assert opsgenie.opened == {alert.alert_id: 1} and opsgenie.requests_per_alias[alert.alert_id] == 2
