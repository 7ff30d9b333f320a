"""The alert watcher's filter (aldebaran.delivery.wakeup): while streaming dispatchers deliver, it does
not wake alert_dispatch; a stopped, failed or stale one, or none at all, means wake-ups again."""

from __future__ import annotations

from aldebaran.delivery import wakeup


def test_running_fresh_dispatchers_cover_delivery():
    now = 1000.0
    beats = [{"status": "running", "at": 995.0}, {"status": "running", "at": 990.0}]
    assert wakeup.streaming_covers(beats, now, fresh_seconds=30)


def test_a_dispatcher_stopped_on_purpose_says_nothing_either_way():
    now = 1000.0
    assert wakeup.streaming_covers([{"status": "running", "at": 995.0}, {"status": "stopped", "at": 10.0}], now, 30)
    assert not wakeup.streaming_covers([{"status": "stopped", "at": 999.0}], now, 30)


def test_none_failed_or_stale_do_not():
    now = 1000.0
    assert not wakeup.streaming_covers([], now, 30)
    assert not wakeup.streaming_covers([{"status": "running", "at": 995.0}, {"status": "failed", "at": 999.0}], now, 30)
    assert not wakeup.streaming_covers([{"status": "running", "at": 995.0}, {"status": "running", "at": 900.0}],
                                       now, 30)
    assert not wakeup.streaming_covers([{"status": "running"}], now, 30)


def test_a_covered_platform_gets_no_wake_up(monkeypatch):
    class Msg:
        def topic(self):
            return "alerts"

        def partition(self):
            return 0

        def offset(self):
            return 7

    monkeypatch.setattr(wakeup, "_interval", 0.0)
    monkeypatch.setattr(wakeup, "_last", 0.0)
    monkeypatch.setattr(wakeup, "_covered", lambda: True)
    assert wakeup.wake_up(Msg()) is None
    monkeypatch.setattr(wakeup, "_covered", lambda: False)
    assert wakeup.wake_up(Msg()) == {"topic": "alerts", "partition": 0, "offset": 7}
