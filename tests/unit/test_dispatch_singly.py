"""The per-alert path of channels that cannot deduplicate (SMS): a crash in the middle of a poll leaves
at most one window (the channel's concurrency) of alerts in doubt, not every alert of the poll.

Runs the dispatcher's settle step on a local-directory ledger; the channel is a failure-injection fake
(named so) that "crashes" the dispatcher process after a number of sends.
"""

from __future__ import annotations

import json
import threading
from typing import ClassVar

import pytest

from aldebaran.delivery.channels.base import Channel
from aldebaran.delivery.dispatcher import ChannelDispatcher, DeadLetters, DispatchStats, Partition
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import DELIVERED
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.model import Alert
from aldebaran.settings import KafkaSettings, load
from aldebaran.storage import LocalStore


class SimulatedCrash(BaseException):
    """Stands for a SIGKILL of the dispatcher: nothing after it runs."""


class CrashAfterSendsFake(Channel):
    """Failure injection: sends succeed until `crash_after` alerts went out, then the process 'dies'."""

    kind: ClassVar[str] = "fake"
    can_dedupe: ClassVar[bool] = False

    def __init__(self, crash_after: int, concurrency: int) -> None:
        super().__init__("fake_sms", concurrency=concurrency)
        self.crash_after = crash_after
        self.sent: list[str] = []

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        if len(self.sent) >= self.crash_after:
            raise SimulatedCrash()
        self.sent.append(alert.alert_id)
        return {"sid": f"SM{len(self.sent)}"}

    def send_many(self, alerts):  # serial: the crash lands at an exact point
        from aldebaran.delivery.channels.base import Outcome

        return [Outcome.delivered(a.alert_id, self.send(a, a.alert_id)) for a in alerts]


def _alert(i: int) -> Alert:
    raw = json.dumps({"alert_id": f"a-{i}", "kind": "OVERFILL", "order_id": str(i), "client": "c", "stock": "s",
                      "requested": 1, "purchased": 2, "purchase_count": 1, "trigger_event_id": f"e{i}",
                      "trigger_event_ts": 1, "detected_at": 1}).encode()
    return Alert.from_json(raw)


@pytest.mark.parametrize("window", [1, 16])
def test_a_crash_mid_poll_leaves_at_most_one_window_in_doubt(tmp_path, window):
    ledger = Ledger(LocalStore(tmp_path), prefix="deliveries", lease_seconds=30)
    channel = CrashAfterSendsFake(crash_after=40, concurrency=window)
    stats = DispatchStats()
    worker = ChannelDispatcher(channel, ledger, load(DeliverySettings), load(KafkaSettings), "g", "owner-1", stats,
                               DeadLetters(ledger.store))
    part = Partition(0, 1)
    part.loaded = True
    part.buffer = [(i, None, _alert(i), None) for i in range(500)]
    with pytest.raises(SimulatedCrash):
        worker._settle_singly(part, threading.Event())

    records = [ledger.get("fake_sms", f"a-{i}") for i in range(500)]
    delivered = [i for i, r in enumerate(records) if r is not None and r[0].state == DELIVERED]
    open_claims = [i for i, r in enumerate(records) if r is not None and r[0].state != DELIVERED]
    done = 40 - 40 % window  # the windows that completed before the crash are recorded
    assert delivered == list(range(done))
    # Only the window in flight is claimed and unsettled: a new owner doubts those, not the other ~460.
    assert open_claims == list(range(done, done + window))
    assert all(r is None for r in records[done + window:])


def test_stop_is_honoured_between_windows(tmp_path):
    ledger = Ledger(LocalStore(tmp_path), prefix="deliveries", lease_seconds=30)
    channel = CrashAfterSendsFake(crash_after=10_000, concurrency=4)
    stop = threading.Event()
    worker = ChannelDispatcher(channel, ledger, load(DeliverySettings), load(KafkaSettings), "g", "owner-1",
                               DispatchStats(), DeadLetters(ledger.store))
    real_send_many = channel.send_many

    def send_then_stop(alerts):
        out = real_send_many(alerts)
        stop.set()
        return out

    channel.send_many = send_then_stop
    part = Partition(0, 1)
    part.loaded = True
    part.buffer = [(i, None, _alert(i), None) for i in range(100)]
    assert worker._settle_singly(part, stop) is None  # nothing committed: the buffer stays
    assert len(channel.sent) == 4 and len(part.buffer) == 100
