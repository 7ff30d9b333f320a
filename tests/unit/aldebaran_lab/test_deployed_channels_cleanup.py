"""The deployed bench's channel cleanup runs every step even when one fails: a dispatcher left running after a
failed step joined the next platform's consumer groups on the same ports (CI, 11-29). The api and the supervisor
calls are failure-injection fakes; the order and the error at the end are what is checked."""

from __future__ import annotations

import pytest

from aldebaran.platform import dispatch_supervisor
from aldebaran_lab.airflow_api import AirflowApiError
from aldebaran_lab.deployed_parts import CHANNELS_VARIABLE, Channels


class TimingOutApiFake:
    """An api whose variable delete fails (its api-server busy past the call's patience)."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def delete_variable(self, key: str) -> None:
        self.calls.append(("delete_variable", key))
        raise AirflowApiError("Airflow API DELETE /api/v2/variables/x: unreachable: timed out")

    def delete_connection(self, conn_id: str) -> None:
        self.calls.append(("delete_connection", conn_id))


class ReceiverFake:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def stop(self) -> None:
        self.calls.append(("receiver", "stop"))


def test_every_cleanup_step_runs_after_a_failing_one_and_the_error_is_raised(monkeypatch):
    calls: list = []
    monkeypatch.setattr(dispatch_supervisor, "settings", lambda: "cfg")
    monkeypatch.setattr(dispatch_supervisor, "delivery_store", lambda: "store")
    monkeypatch.setattr(dispatch_supervisor, "stop", lambda store, name, cfg, reason: calls.append(("stop", name)))
    channels = Channels(TimingOutApiFake(calls), kafka=None)
    channels.receiver = ReceiverFake(calls)
    with pytest.raises(AirflowApiError):
        channels.__exit__(None, None, None)
    assert calls == [("delete_variable", CHANNELS_VARIABLE), ("stop", "webhook"), ("stop", "bus"),
                     ("delete_connection", "aldebaran_webhook"), ("delete_connection", "aldebaran_bus"),
                     ("receiver", "stop")]


def test_a_fast_webhook_stops_the_fast_dispatcher_too(monkeypatch):
    calls: list = []
    monkeypatch.setattr(dispatch_supervisor, "settings", lambda: "cfg")
    monkeypatch.setattr(dispatch_supervisor, "delivery_store", lambda: "store")
    monkeypatch.setattr(dispatch_supervisor, "stop", lambda store, name, cfg, reason: calls.append(("stop", name)))
    channels = Channels(TimingOutApiFake(calls), kafka=None, fast_webhook=True)
    channels.receiver = ReceiverFake(calls)
    with pytest.raises(AirflowApiError):
        channels.__exit__(None, None, None)
    assert ("stop", "fast-lane") in calls and ("stop", "webhook") in calls
