"""The reconciler's log stays readable at rate: missed exact-lane alerts are summed up once a minute, not
logged one line each (thousands a second while the lane is behind or down)."""

import logging
import time
from types import SimpleNamespace

from aldebaran.lanes import reconciler


def _state():
    return SimpleNamespace(lane="realtime", _missed_since=0, _missed_example=None, _missed_logged_at=time.monotonic())


def _info(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]


def test_missed_alerts_are_one_line_a_minute_not_one_each(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger=reconciler.__name__)
    state = _state()
    reconciler.Reconciler._log_missed(state, [f"a{i}" for i in range(5000)])
    assert _info(caplog) == []  # within the minute: counted, not logged
    monkeypatch.setattr(reconciler, "MISSED_LOG_SECONDS", 0.0)
    reconciler.Reconciler._log_missed(state, ["b0", "b1"])
    (line,) = _info(caplog)
    assert "5002 exact-lane alert(s) had no fast-lane copy" in line and "e.g. a0" in line
    reconciler.Reconciler._log_missed(state, [])  # nothing new: nothing said
    assert len(_info(caplog)) == 1


def test_each_missed_alert_is_still_at_debug(caplog):
    caplog.set_level(logging.DEBUG, logger=reconciler.__name__)
    reconciler.Reconciler._log_missed(_state(), ["x1", "x2"])
    assert sum("had no fast-lane copy (delivered as usual)" in r.getMessage() for r in caplog.records
               if r.levelno == logging.DEBUG) == 2
