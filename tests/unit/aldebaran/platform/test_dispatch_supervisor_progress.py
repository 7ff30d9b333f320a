"""A busy dispatcher is not a dead one: the supervisor's rule on the progress a heartbeat carries (pure,
no services). Restart when the process is gone, the heartbeat stale (frozen or dead), or a channel has had
work pending without progress for the progress limit; never for a slow channel whose marks move."""

from __future__ import annotations

import pytest

from aldebaran.platform.processes import NONE, RESTART, decide, diagnose, stalled
from aldebaran.platform.settings import DispatchSupervisorSettings

NOW = 1_000_000.0
S = DispatchSupervisorSettings(stale_after_seconds=30, progress_limit_seconds=120, start_timeout_seconds=60,
                               backoff_base_seconds=30, backoff_max_seconds=100, stable_after_seconds=300)
ENV = "ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS"


def unit(progress_ago: float, loop_ago: float | None = 0.5, pending: bool = True) -> dict:
    return {"progress_at": NOW - progress_ago, "loop_at": None if loop_ago is None else NOW - loop_ago,
            "pending": pending, "outcomes": 10}


def facts(progress: dict | None, at_ago: float = 3, **hb) -> dict:
    return {"now": NOW, "host": "h", "name": "log", "channels": ["log"], "kind": "dispatcher",
            "heartbeat_uri": "s3://b/heartbeats/dispatcher/log.json", "progress_env": ENV,
            "heartbeat": {"status": "running", "pid": 41, "host": "h", "at": NOW - at_ago, "started_at": NOW - 900,
                          "error": None, "channels": ["log"], "broken": {}, "progress": progress, **hb},
            "heartbeat_alive": True,
            "launch": {"at": NOW - 900, "pid": 41, "host": "h", "start_ticks": 7, "started_at": NOW - 898,
                       "log": "/run/logs/dispatcher-log.log"},
            "launch_alive": True}


def test_a_slow_channel_whose_marks_move_is_healthy_however_long_its_loop_turn():
    # One turn of the loop has lasted 10 minutes (a large window on a slow channel), but it settled
    # deliveries 20 s ago: progressing.
    f = facts({"log": unit(progress_ago=20, loop_ago=600)})
    assert diagnose(f, S) == []
    assert decide(f, [], {}, S)[0]["action"] == NONE


def test_the_observed_45s_beat_is_no_longer_a_reason():
    # What was restarted in issue 25: a busy loop 45 s inside one turn. The beat itself comes from a
    # thread, so it is fresh; the marks moved within the limit.
    assert diagnose(facts({"log": unit(progress_ago=45, loop_ago=45)}), S) == []


def test_pending_work_without_progress_for_the_limit_restarts():
    f = facts({"log": unit(progress_ago=121)})
    problems = diagnose(f, S)
    assert problems == [f"dispatcher log: log: work pending and no progress for 121s (limit 120s, {ENV})"]
    assert decide(f, problems, {}, S)[0]["action"] == RESTART


def test_just_within_the_progress_limit_is_healthy():
    assert diagnose(facts({"log": unit(progress_ago=119)}), S) == []


def test_an_idle_channel_is_healthy_however_long_nothing_arrives():
    assert diagnose(facts({"log": unit(progress_ago=3600, loop_ago=0.2, pending=False)}), S) == []


def test_a_loop_stuck_outside_its_work_is_stalled_even_with_nothing_buffered():
    # e.g. hung in the sweep: nothing read, so nothing pending, but nothing is read any more either.
    assert stalled({"log": unit(progress_ago=300, loop_ago=300, pending=False)}, NOW, 120) == {
        "log": "its loop has not turned for 300s and no progress for 300s"}


def test_a_loop_that_never_started_is_stalled_after_the_limit():
    assert stalled({"log": unit(progress_ago=130, loop_ago=None, pending=False)}, NOW, 120) == {
        "log": "its loop has not started in 130s"}


def test_each_channel_of_a_group_is_judged_alone():
    got = stalled({"sms": unit(progress_ago=500), "webhook": unit(progress_ago=1)}, NOW, 120)
    assert list(got) == ["sms"]


def test_a_heartbeat_without_progress_is_judged_by_its_age_alone():
    # An older dispatcher (or the lane keeper) carries no progress: only staleness and liveness count.
    assert diagnose(facts(None), S) == []


@pytest.mark.parametrize("over, expected", [
    ({"at_ago": 31}, "heartbeat 31s old (limit 30s"),  # frozen or dead: the beat has a thread of its own
    ({"status": "failed"}, "dispatcher failed"),
])
def test_a_stale_or_terminated_heartbeat_is_named_for_that_not_for_progress(over, expected):
    at_ago = over.pop("at_ago", 3)
    problems = diagnose(facts({"log": unit(progress_ago=500)}, at_ago=at_ago, **over), S)
    assert len(problems) == 1 and problems[0].startswith(expected)


def test_a_gone_process_restarts_whatever_its_last_progress():
    f = facts({"log": unit(progress_ago=1)})
    f.update(heartbeat_alive=False, launch_alive=False)
    problems = diagnose(f, S)
    assert problems and "is gone" in problems[0]
    assert decide(f, problems, {}, S)[0]["action"] == RESTART


def test_the_progress_limit_is_a_named_setting_with_a_sane_default(monkeypatch):
    assert DispatchSupervisorSettings().progress_limit_seconds == 120
    monkeypatch.setenv(ENV, "300")
    assert DispatchSupervisorSettings().progress_limit_seconds == 300
