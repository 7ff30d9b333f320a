"""The dispatch supervisor's decisions on observed facts (pure logic, no services): what counts as
unhealthy, when it waits, when it restarts, how the backoff grows, when an incident closes; and which
dispatchers it runs for a channel configuration."""

from __future__ import annotations

import pytest

from aldebaran.exceptions import ConfigError
from aldebaran.platform.dispatch_supervisor import plan
from aldebaran.platform.processes import NONE, RESTART, WAIT, broken_partitions, decide, diagnose
from aldebaran.platform.settings import DispatchSupervisorSettings

NOW = 1_000_000.0
S = DispatchSupervisorSettings(stale_after_seconds=30, start_timeout_seconds=60, backoff_base_seconds=30,
                               backoff_max_seconds=100, stable_after_seconds=300)
URI = "s3://b/heartbeats/dispatcher/webhook.json"


def heartbeat(**over) -> dict:
    return {"status": "running", "pid": 41, "host": "h", "at": NOW - 3, "started_at": NOW - 500, "error": None,
            "channels": ["webhook"], "broken": {}, **over}


def facts(**over) -> dict:
    base = {"now": NOW, "host": "h", "name": "webhook", "channels": ["webhook"], "heartbeat_uri": URI,
            "heartbeat": heartbeat(), "heartbeat_alive": True,
            "launch": {"at": NOW - 500, "pid": 41, "host": "h", "start_ticks": 7, "started_at": NOW - 498,
                       "log": "/run/logs/dispatcher-webhook.log"},
            "launch_alive": True}
    base.update(over)
    return base


def incident(restarts: int, opened_at: float = NOW - 1000) -> dict:
    return {"id": "1", "opened_at": opened_at, "first_problem": "x", "restarts": restarts}


# --- diagnose ----------------------------------------------------------------------------------------
def test_healthy_means_none():
    assert diagnose(facts(), S) == []
    decision, state = decide(facts(), [], {}, S)
    assert (decision["action"], decision["reason"]) == (NONE, "healthy")
    assert state["last_healthy_at"] == NOW and state["incident"] is None


@pytest.mark.parametrize("over, expected", [
    ({"heartbeat": None}, f"no heartbeat at {URI}"),
    ({"heartbeat": heartbeat(status="failed", at=NOW - 12, error="KafkaException: boom")},
     "dispatcher failed 12s ago: KafkaException: boom"),
    ({"heartbeat": heartbeat(status="stopped", at=NOW - 4)}, "dispatcher stopped 4s ago"),
    ({"heartbeat": heartbeat(at=NOW - 31)},
     "heartbeat 31s old (limit 30s, ALDEBARAN_DISPATCH_SUPERVISOR_STALE_AFTER_SECONDS)"),
    ({"heartbeat_alive": False, "launch_alive": False}, "dispatcher process 41 on h is gone (last heartbeat 3s ago)"),
    ({"heartbeat": heartbeat(channels=["sms", "webhook"])}, "it runs channel(s) sms, webhook, configured: webhook"),
])
def test_each_unhealthy_condition_is_named(over, expected):
    assert expected in diagnose(facts(**over), S)


def test_a_heartbeat_just_within_the_stale_limit_is_healthy():
    assert diagnose(facts(heartbeat=heartbeat(at=NOW - 29)), S) == []


def test_a_launch_that_died_before_its_first_heartbeat_names_its_log():
    f = facts(heartbeat=heartbeat(at=NOW - 600, pid=12), heartbeat_alive=None,
              launch={"at": NOW - 20, "pid": 41, "host": "h", "log": "/run/logs/d.log"}, launch_alive=False)
    problems = diagnose(f, S)
    assert "launched process 41 exited before it reported (log /run/logs/d.log)" in problems


def test_a_remote_dispatcher_is_judged_by_its_heartbeat_alone():
    f = facts(heartbeat=heartbeat(host="other"), heartbeat_alive=None, launch=None, launch_alive=None)
    assert diagnose(f, S) == []


def test_broken_partitions_are_read_from_the_heartbeat():
    hb = {"partitions": {"webhook": {"0": {"epoch": 3, "broken": None}, "2": {"epoch": 4, "broken": "fenced by epoch 5"}},
                         "sms": {}}}
    assert broken_partitions(hb) == {"webhook/2": "fenced by epoch 5"}
    assert broken_partitions(None) == {}


# --- decide: restart, wait, backoff ------------------------------------------------------------------------
def test_nothing_ever_launched_restarts_at_once_and_opens_an_incident():
    f = facts(heartbeat=None, heartbeat_alive=None, launch=None, launch_alive=None)
    decision, state = decide(f, diagnose(f, S), {}, S)
    assert decision["action"] == RESTART and decision["reason"] == f"no heartbeat at {URI}"
    assert state["incident"] == {"id": str(int(NOW)), "opened_at": NOW, "first_problem": f"no heartbeat at {URI}",
                                 "restarts": 0}


def test_a_killed_dispatcher_is_restarted_at_once():
    f = facts(heartbeat_alive=False, launch_alive=False)
    decision, _ = decide(f, diagnose(f, S), {}, S)
    assert decision["action"] == RESTART
    assert decision["reason"] == "dispatcher process 41 on h is gone (last heartbeat 3s ago)"


def test_a_launch_still_starting_is_waited_for():
    launch = {"at": NOW - 10, "pid": 50, "host": "h", "start_ticks": 9}
    f = facts(heartbeat=None, heartbeat_alive=None, launch=launch, launch_alive=True)
    decision, _ = decide(f, diagnose(f, S), {"incident": incident(1, opened_at=NOW - 11)}, S)
    assert decision["action"] == WAIT
    assert decision["reason"] == "launched 10s ago, still starting (timeout 60s)"


def test_a_launch_past_its_start_timeout_is_restarted():
    launch = {"at": NOW - 61, "pid": 50, "host": "h", "start_ticks": 9}
    f = facts(heartbeat=None, heartbeat_alive=None, launch=launch, launch_alive=True)
    decision, _ = decide(f, diagnose(f, S), {"incident": incident(1, opened_at=NOW - 62)}, S)
    assert decision["action"] == RESTART


@pytest.mark.parametrize("restarts, launched_ago, expected", [
    (1, 29, WAIT),      # 2nd restart waits the base (30 s) after the 1st
    (1, 30, RESTART),
    (2, 59, WAIT),      # 3rd waits 60 s
    (2, 60, RESTART),
    (3, 99, WAIT),      # 4th would wait 120 s, capped at the max (100 s)
    (3, 100, RESTART),
    (9, 100, RESTART),  # still capped
])
def test_restarts_of_one_incident_back_off_exponentially_up_to_the_max(restarts, launched_ago, expected):
    launch = {"at": NOW - launched_ago, "pid": 50, "host": "h", "start_ticks": 9, "started_at": NOW - launched_ago + 1}
    f = facts(heartbeat=heartbeat(pid=50, status="failed", at=NOW - 1), launch=launch, launch_alive=False,
              heartbeat_alive=False)
    decision, state = decide(f, diagnose(f, S), {"incident": incident(restarts)}, S)
    assert decision["action"] == expected
    assert state["incident"]["restarts"] == restarts  # counted when the restart is launched, not decided
    if expected == WAIT:
        assert decision["reason"].startswith(f"backing off: restart {restarts + 1} of incident 1 in ")


def test_the_incident_closes_after_a_stable_period_and_the_backoff_resets():
    opened = incident(3)
    launch = {"at": NOW - 299, "pid": 41, "host": "h", "start_ticks": 7, "started_at": NOW - 298}
    _, state = decide(facts(launch=launch), [], {"incident": opened}, S)
    assert state["incident"] == opened  # healthy, but not for long enough yet
    launch["at"] = NOW - 300
    _, state = decide(facts(launch=launch), [], {"incident": opened}, S)
    assert state["incident"] is None
    f = facts(heartbeat_alive=False, launch=launch, launch_alive=False)
    decision, state = decide(f, diagnose(f, S), state, S)
    assert decision["action"] == RESTART and state["incident"]["restarts"] == 0


# --- plan: which dispatchers ---------------------------------------------------------------------------
def test_one_dispatcher_per_channel_unless_grouped(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "webhook,kafka,sms,email")
    assert plan(DispatchSupervisorSettings()) == {"webhook": ["webhook"], "kafka": ["kafka"], "sms": ["sms"],
                                                  "email": ["email"]}
    grouped = DispatchSupervisorSettings(groups={"dedupe": ["webhook", "kafka"]})
    assert plan(grouped) == {"dedupe": ["webhook", "kafka"], "sms": ["sms"], "email": ["email"]}


def test_groups_come_from_the_env_as_json(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "webhook,kafka")
    monkeypatch.setenv("ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS", '{"all": ["webhook", "kafka"]}')
    assert plan() == {"all": ["webhook", "kafka"]}


@pytest.mark.parametrize("groups, message", [
    ('{"g": ["nope"]}', "group 'g' names channel 'nope', which is not configured (ALDEBARAN_CHANNELS: webhook, sms)"),
    ('{"a": ["webhook"], "b": ["webhook"]}', "channel 'webhook' is in groups 'a' and 'b'"),
    ('{"g": []}', "group 'g' has no channel"),
    ('{"../x": ["webhook"]}', "unsafe dispatcher name for an object key: '../x'"),
    ('{"sms": ["webhook"]}', "group 'sms' is named like a channel that is in no group"),
    ('["webhook"]', "Input should be a valid dictionary"),
])
def test_invalid_groupings_fail_naming_the_setting(monkeypatch, groups, message):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "webhook,sms")
    monkeypatch.setenv("ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS", groups)
    with pytest.raises(ConfigError, match="ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS") as err:
        plan()
    assert message in str(err.value)
