"""The supervisor's decisions on observed facts (pure logic, no services): what counts as unhealthy,
when it restarts, how the backoff grows, when it pages, when an incident closes."""

from __future__ import annotations

import pytest

from aldebaran import lease as leases
from aldebaran.platform.settings import SupervisorSettings
from aldebaran.platform.supervisor import NONE, RESTART, WAIT, backoff_seconds, decide, diagnose

NOW = 1_000_000.0
S = SupervisorSettings(stale_after_seconds=60, start_timeout_seconds=120, backoff_base_seconds=30,
                       backoff_max_seconds=200, stable_after_seconds=300, page_after_restarts=2)


def facts(**over) -> dict:
    base = {
        "now": NOW, "host": "h",
        "heartbeat_uri": "s3://b/heartbeats/auditor/q.json",
        "heartbeat": {"status": "running", "batch_id": 7, "updated_at_ms": (NOW - 5) * 1000},
        "lease": {"state": leases.HELD, "host": "h", "pid": 42, "generation": 1, "query": "q",
                  "acquired_at": NOW - 100, "expires_at": NOW + 20},
        "lease_live": True, "holder_local": True, "holder_alive": True,
        "submit": {"at": NOW - 101, "pid": 41, "host": "h", "started_at": NOW - 90},
        "submit_alive": True,
    }
    base.update(over)
    return base


def test_healthy():
    assert diagnose(facts(), S) == []
    decision, state = decide(facts(), [], {}, S)
    assert decision["action"] == NONE and state["last_healthy_at"] == NOW


@pytest.mark.parametrize("over, expected", [
    ({"holder_alive": False}, "auditor driver process 42 on h is gone"),
    ({"submit_alive": False}, "spark-submit driver process 41"),
    ({"lease_live": False, "lease": None}, "no auditor holds the checkpoint lease"),
    ({"heartbeat": None}, "no heartbeat at s3://b/heartbeats/auditor/q.json"),
    ({"heartbeat": {"status": "failed", "error": "boom", "updated_at_ms": NOW * 1000}}, "auditor query failed 0s ago: boom"),
    ({"heartbeat": {"status": "running", "batch_id": 3, "updated_at_ms": (NOW - 61) * 1000}},
     "no progress for 61s (threshold 60s"),
])
def test_each_unhealthy_condition_is_named(over, expected):
    problems = diagnose(facts(**over), S)
    assert any(expected in p for p in problems), problems


def test_a_stale_heartbeat_within_the_threshold_is_healthy():
    f = facts(heartbeat={"status": "running", "batch_id": 3, "updated_at_ms": (NOW - 59) * 1000})
    assert diagnose(f, S) == []


def test_first_failure_restarts_at_once_and_opens_an_incident():
    f = facts(holder_alive=False)
    decision, state = decide(f, diagnose(f, S), {}, S)
    assert decision["action"] == RESTART and not decision["page"]
    assert state["incident"]["restarts"] == 0 and state["incident"]["opened_at"] == NOW


def test_backoff_doubles_up_to_the_maximum():
    assert [backoff_seconds(n, S) for n in range(6)] == [0, 30, 60, 120, 200, 200]


def test_second_restart_of_an_incident_waits_for_the_backoff_then_pages_after_two():
    incident = {"id": "x", "opened_at": NOW - 500, "first_problem": "p", "restarts": 1, "paged": False}
    f = facts(holder_alive=False, submit={"at": NOW - 10, "pid": 41, "host": "h", "started_at": NOW - 5})
    decision, _ = decide(f, diagnose(f, S), {"incident": incident}, S)
    assert decision["action"] == WAIT and "backing off" in decision["reason"]
    f = facts(holder_alive=False, submit={"at": NOW - 31, "pid": 41, "host": "h", "started_at": NOW - 25})
    decision, _ = decide(f, diagnose(f, S), {"incident": incident}, S)
    assert decision["action"] == RESTART and not decision["page"]
    decision, _ = decide(f, diagnose(f, S), {"incident": {**incident, "restarts": 2}}, S)
    assert decision["page"]  # two restarts did not help
    decision, _ = decide(f, diagnose(f, S), {"incident": {**incident, "restarts": 2, "paged": True}}, S)
    assert not decision["page"]  # once per incident


def test_a_submitted_auditor_still_starting_is_left_alone():
    incident = {"id": "x", "opened_at": NOW - 60, "first_problem": "p", "restarts": 1, "paged": False}
    f = facts(heartbeat=None, lease=None, lease_live=False, holder_local=False, holder_alive=None,
              submit={"at": NOW - 20, "pid": 41, "host": "h"}, submit_alive=True)
    decision, _ = decide(f, diagnose(f, S), {"incident": incident}, S)
    assert decision["action"] == WAIT and "still starting" in decision["reason"]
    # ... unless its spark-submit already exited: then it is a failed restart (backoff applies).
    decision, _ = decide({**f, "submit_alive": False}, diagnose(f, S), {"incident": incident}, S)
    assert decision["action"] == WAIT and "backing off: restart 2 of incident x in 10s" in decision["reason"]


def test_incident_closes_after_a_stable_period():
    incident = {"id": "x", "opened_at": NOW - 1000, "first_problem": "p", "restarts": 1, "paged": False}
    young = facts(submit={"at": NOW - 100, "pid": 41, "host": "h", "started_at": NOW - 90})
    _, state = decide(young, [], {"incident": incident}, S)
    assert state["incident"] == incident
    old = facts(submit={"at": NOW - 301, "pid": 41, "host": "h", "started_at": NOW - 290})
    _, state = decide(old, [], {"incident": incident}, S)
    assert state["incident"] is None and state["closed_incidents"][0]["id"] == "x"
