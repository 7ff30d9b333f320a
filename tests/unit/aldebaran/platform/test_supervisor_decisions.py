"""The supervisor's decisions on observed facts (pure logic, no services): what counts as unhealthy,
when it restarts, how the backoff grows, when it pages, when an incident closes; with the standby slot:
when a standby counts as having taken over, what its promotion changes, when a restart becomes a failover."""

from __future__ import annotations

import pytest

from aldebaran.runtime import lease as leases
from aldebaran.platform.settings import SupervisorSettings
from aldebaran.platform import standby_slot
from aldebaran.platform.standby_slot import DEAD, FAILOVER, READY, STARTING, STUCK, choose, promote, status
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


# --- the standby slot -----------------------------------------------------------------------------------------
SB = S.model_copy(update={"standby": True})
STANDBY = {"at": NOW - 60, "pid": 77, "host": "h", "start_ticks": 5, "log": None, "ready_at": NOW - 40}


def taken_over(**over) -> dict:
    """The active (spark-submit 41) was SIGKILLed; its standby (spark-submit 77) holds the lease since NOW - 3
    through its driver, pid 78, a process of the standby's session."""
    base = facts(
        lease={"state": leases.HELD, "host": "h", "pid": 78, "generation": 2, "query": "q",
               "acquired_at": NOW - 3, "expires_at": NOW + 27},
        holder_alive=True, holder_sid=77, submit_alive=False,
        heartbeat={"status": "running", "batch_id": 9, "updated_at_ms": (NOW - 1) * 1000},
        standby=dict(STANDBY), standby_alive=True, standby_ready=True)
    base.update(over)
    return base


def run(f: dict, state: dict, settings=SB) -> tuple[dict, dict, dict]:
    """What assess does with the facts: promote, diagnose, decide, choose."""
    f, state = promote(f, state)
    decision, state = decide(f, diagnose(f, settings), state, settings)
    return choose(decision, f, settings), state, f


def test_without_the_slot_a_takeover_reads_as_the_current_auditors_jvm_gone():
    # The reason for the slot: the replaced active's spark-submit is dead, the lease is newer than it.
    f = taken_over(standby=None, standby_alive=None)
    assert any("spark-submit driver process 41" in p for p in diagnose(f, SB))


def test_a_standby_holding_the_lease_is_promoted_and_the_auditor_is_healthy():
    state = {"submit": {"at": NOW - 101, "pid": 41, "host": "h", "started_at": NOW - 90}, "standby": dict(STANDBY)}
    decision, state, f = run(taken_over(), state)
    assert decision["action"] == NONE and decision["healthy"], decision
    assert f["promoted"] and decision["standby"]["promoted"]
    assert state["submit"]["pid"] == 77 and state["submit"]["at"] == NOW - 3 and state["submit"]["started_at"] == NOW - 3
    assert state["submit"]["launched_at"] == NOW - 60 and state["standby"] is None
    assert state["takeovers"] == [{"acquired_at": NOW - 3, "promoted_at": NOW, "pid": 77, "replaced_pid": 41,
                                   "lease_generation": 2, "incident": state["incident"]["id"]}]
    assert state["incident"]["restarts"] == 1 and not decision["page"]  # a takeover is a restart of an incident
    assert decision["reason"].startswith("the standby took over (spark-submit 77; restart 1 of incident")


def test_a_holder_outside_the_standbys_session_is_not_a_takeover():
    state = {"submit": {"at": NOW - 101, "pid": 41, "host": "h"}, "standby": dict(STANDBY)}
    for over in ({"holder_sid": 41}, {"holder_sid": None, "holder_local": False}, {"lease_live": False}):
        f = taken_over(**over)
        assert promote(f, state) == (f, state), over


def test_a_promoted_standby_whose_query_has_not_reported_yet_is_still_starting_not_failed():
    # The replaced auditor stopped cleanly (SIGINT): its last heartbeat says "stopped", older than the takeover.
    state = {"submit": {"at": NOW - 101, "pid": 41, "host": "h", "started_at": NOW - 90}, "standby": dict(STANDBY)}
    hb = {"status": "stopped", "batch_id": 9, "updated_at_ms": (NOW - 4) * 1000}
    decision, state, _ = run(taken_over(heartbeat=hb), state)
    assert state["submit"]["started_at"] is None
    assert decision["action"] == WAIT and "still starting" in decision["reason"], decision
    # Its query reports: a later run records it as started.
    later = taken_over(now=NOW + 5, heartbeat={"status": "started", "updated_at_ms": (NOW + 1) * 1000},
                       standby=None, standby_alive=None, submit=state["submit"], submit_alive=True)
    decision, state, _ = run(later, state)
    assert decision["action"] == NONE and state["submit"]["started_at"] == NOW + 5


def test_repeated_takeovers_page_once_the_incident_reaches_page_after_restarts():
    incident = {"id": "x", "opened_at": NOW - 200, "first_problem": "p", "restarts": 1, "paged": False}
    state = {"submit": {"at": NOW - 101, "pid": 41, "host": "h"}, "standby": dict(STANDBY), "incident": incident}
    decision, state, _ = run(taken_over(), state)
    assert decision["healthy"] and decision["page"] and state["incident"]["restarts"] == 2
    decision, _, _ = run(taken_over(), {**state, "standby": dict(STANDBY),
                                        "incident": {**incident, "restarts": 2, "paged": True}})
    assert not decision["page"]


@pytest.mark.parametrize("over, expected", [
    ({"standby_ready": True}, READY),
    ({"standby_ready": False}, STARTING),
    ({"standby_ready": False, "standby": {**STANDBY, "at": NOW - 121}}, STUCK),
    ({"standby_alive": False}, DEAD),
    ({"standby": None}, standby_slot.ABSENT),
])
def test_standby_status(over, expected):
    assert status({**taken_over(), **over}, SB) == expected


@pytest.mark.parametrize("over, settings, action", [
    ({}, SB, FAILOVER),                                                    # ready
    ({"standby_ready": False}, SB, FAILOVER),                              # still starting: wait for it
    ({}, S, RESTART),                                                      # ALDEBARAN_SUPERVISOR_STANDBY off
    ({"standby_alive": False}, SB, RESTART),                               # dead
    ({"standby_ready": False, "standby": {**STANDBY, "at": NOW - 121}}, SB, RESTART),  # stuck
    ({"standby": None}, SB, RESTART),
])
def test_an_unhealthy_active_fails_over_to_a_usable_standby(over, settings, action):
    # The active's driver hangs: it holds the lease, alive, but makes no progress.
    f = facts(heartbeat={"status": "running", "batch_id": 3, "updated_at_ms": (NOW - 61) * 1000}, holder_sid=41,
              standby=dict(STANDBY), standby_alive=True, standby_ready=True)
    decision, _, _ = run({**f, **over}, {"submit": f["submit"]}, settings)
    assert decision["action"] == action, decision
    if action == FAILOVER:
        assert "failover to the standby (spark-submit 77" in decision["reason"]


def test_a_failover_backs_off_like_a_restart():
    incident = {"id": "x", "opened_at": NOW - 500, "first_problem": "p", "restarts": 1, "paged": False}
    f = facts(holder_alive=False, submit={"at": NOW - 10, "pid": 41, "host": "h", "started_at": NOW - 5},
              standby=dict(STANDBY), standby_alive=True, standby_ready=True)
    decision, _, _ = run(f, {"incident": incident})
    assert decision["action"] == WAIT and "backing off" in decision["reason"]


def test_a_healthy_active_keeps_its_standby_waiting():
    f = facts(holder_sid=41, standby=dict(STANDBY), standby_alive=True, standby_ready=True)
    decision, state, _ = run(f, {"submit": f["submit"], "standby": dict(STANDBY)})
    assert decision["action"] == NONE and state["standby"] == STANDBY
    assert decision["standby"] == {"enabled": True, "status": READY, "pid": 77, "promoted": False}


@pytest.mark.parametrize("slot, now, wait", [
    ({"at": 1000.0}, 1000.0 + 60, 240.0),  # died a minute after its launch: four more minutes
    ({"at": 1000.0}, 1000.0 + 300, 0.0),
    ({"at": 1000.0}, 1000.0 + 3600, 0.0),  # ran an hour: relaunched at once
    ({"at": None}, 5000.0, 0.0),
    (None, 5000.0, 0.0),
])
def test_a_standby_that_dies_soon_after_its_launch_is_relaunched_after_a_backoff(slot, now, wait):
    assert standby_slot.relaunch_wait(slot, now, backoff=300.0) == wait


# --- the DAG's branch after assess: only the tasks a decision needs run (each task is a process) ------------
@pytest.mark.parametrize("decision, follow", [
    ({"action": NONE, "page": False, "standby_slot": False}, []),
    ({"action": WAIT, "page": True, "standby_slot": False}, ["page"]),
    ({"action": RESTART, "page": False, "standby_slot": False}, ["prepare_restart"]),
    ({"action": FAILOVER, "page": True, "standby_slot": True}, ["page", "prepare_restart", "prepare_standby"]),
    ({"action": NONE, "page": False, "standby_slot": True}, ["prepare_standby"]),
])
def test_route_runs_only_what_the_decision_needs(decision, follow):
    from aldebaran.platform.supervisor import route

    assert route(decision) == follow
