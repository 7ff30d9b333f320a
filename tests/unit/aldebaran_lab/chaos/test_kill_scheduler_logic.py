"""The kill-scheduler campaign's pure parts: the kill plan, timestamps from the Airflow API, the first
task instance finished after a restart, and what became of the task instances running at a kill."""

from __future__ import annotations

import datetime as dt
import random

from aldebaran_lab.chaos.kill_scheduler import (
    KillPlan, descendants, fate, fate_summary, first_finished_after, parse_ts, plan_kills,
)

UTC = dt.UTC


def test_plan_alternates_group_and_process_kills_within_the_ranges():
    plans = plan_kills(4, random.Random(7), delay=(0.5, 8.0), pause=(5.0, 20.0))
    assert [p.mode for p in plans] == ["tree", "process", "tree", "process"]
    assert all(0.5 <= p.delay <= 8.0 and 5.0 <= p.pause <= 20.0 for p in plans)
    assert plan_kills(4, random.Random(7), (0.5, 8.0), (5.0, 20.0)) == plans  # same seed, same plan
    assert plan_kills(1, random.Random(7), (1.0, 1.0), (3.0, 3.0)) == [KillPlan("tree", 1.0, 3.0)]


def test_descendants_follow_the_parent_chain_across_process_groups():
    # 10 scheduler → 11, 12 executor workers → 13 task supervisor → 14 task process; 20 → 21 unrelated
    parents = {10: 1, 11: 10, 12: 10, 13: 11, 14: 13, 20: 1, 21: 20}
    assert descendants(10, parents) == [11, 12, 13, 14]
    assert descendants(13, parents) == [14]
    assert descendants(14, parents) == [] and descendants(99, parents) == []


def test_parse_ts_reads_z_and_offsets():
    assert parse_ts("2026-11-23T14:00:05.250000Z") == dt.datetime(2026, 11, 23, 14, 0, 5, 250000, tzinfo=UTC)
    assert parse_ts("2026-11-23T15:00:05+01:00") == dt.datetime(2026, 11, 23, 14, 0, 5, tzinfo=UTC)
    assert parse_ts(None) is None and parse_ts("") is None


def test_first_finished_after_ignores_instances_started_before_the_restart():
    restart = dt.datetime(2026, 11, 23, 14, 0, 0, tzinfo=UTC)
    tis = [
        # started before the restart (an orphan finishing): not the new scheduler's work
        {"state": "success", "start_date": "2026-11-23T13:59:50Z", "end_date": "2026-11-23T14:00:02Z"},
        {"state": "running", "start_date": "2026-11-23T14:00:10Z", "end_date": None},
        {"state": "success", "start_date": "2026-11-23T14:00:12Z", "end_date": "2026-11-23T14:00:30Z"},
        {"state": "failed", "start_date": "2026-11-23T14:00:11Z", "end_date": "2026-11-23T14:00:25Z"},
        {"state": None, "start_date": None, "end_date": None},
    ]
    assert first_finished_after(tis, restart) == dt.datetime(2026, 11, 23, 14, 0, 25, tzinfo=UTC)
    assert first_finished_after(tis[:2], restart) is None


def test_fate_of_a_task_instance_reset_and_run_again():
    at_kill = {"dag_run_id": "manual__1", "task_id": "dispatch", "map_index": 1, "try_number": 1, "state": "running"}
    final = dict(at_kill, state="success", try_number=2)
    tries = [{"try_number": 2, "state": "success", "end_date": "2026-11-23T14:01:10Z"},
             {"try_number": 1, "state": "failed", "end_date": "2026-11-23T14:00:31.5Z"}]
    f = fate(at_kill, final, tries, killed_at=dt.datetime(2026, 11, 23, 14, 0, 0, tzinfo=UTC))
    assert f == {"task": "dispatch[1]", "run": "manual__1", "killed_try": 1, "killed_try_recorded_as": "failed",
                 "killed_try_ended_s_after_kill": 31.5, "final_state": "success", "final_try": 2,
                 "tries": [(1, "failed"), (2, "success")]}
    assert fate_summary([f]) == "dispatch[1] try 1 → failed, re-run as try 2: success"


def test_fate_of_an_orphan_that_finished_its_own_try():
    at_kill = {"dag_run_id": "manual__2", "task_id": "dispatch", "map_index": 0, "try_number": 1}
    f = fate(at_kill, dict(at_kill, state="success"), [{"try_number": 1, "state": "success"}])
    assert fate_summary([f]) == "dispatch[0] try 1 → success, finished in try 1: success"
    assert fate_summary([]) == "no task instance running"
    assert fate(at_kill, None, [])["final_state"] is None
