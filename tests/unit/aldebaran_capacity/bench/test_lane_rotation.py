"""The rotation bench's arithmetic (pure): the longest run of seconds that should have alerted and did not,
and its report."""

from __future__ import annotations

from aldebaran_capacity.bench import lane_rotation
from aldebaran_capacity.bench.lane_rotation import gap_seconds


def test_a_gap_is_the_longest_run_of_alerting_seconds_without_an_alert():
    assert gap_seconds(set(), set()) == 0
    assert gap_seconds({0, 1, 2, 3}, {0, 1, 2, 3}) == 0
    assert gap_seconds({0, 1, 2, 3, 4, 5}, {0, 4, 5}) == 3
    assert gap_seconds({0, 1, 2, 3, 4, 5}, {0, 2, 5}) == 2
    # seconds with nothing to alert on (here 2 and 3) neither break a run nor lengthen it
    assert gap_seconds({0, 1, 4, 5}, {0, 5}) == 2


def test_the_report_names_each_figure():
    seg = {"rate": 5000, "runs": 3, "gap_s": 0, "missing": 0, "received_twice": 41, "p99_ms": 812.0,
           "p99_spread_ms": [640.0, 990.0], "start_s": 41.5, "start_spread_s": [35.2, 60.1], "rotation_s": 52.0, "quiet": True}
    text = lane_rotation.render({"command": "aldebaran bench lane-rotation", "machine": {"date": "today"},
                                 "lane_rotation": {"seconds": 90, "rotate_at": 30, "overlap_s": 15, "repeats": 3,
                                                   "segments": [seg]}})
    assert text.startswith(lane_rotation.BEGIN) and text.endswith(lane_rotation.END)
    assert "| 5,000 | 3 | 0 | 0 | 41 | 812 (640–990) | 52 | 41.5 (35.2–60.1) | yes |" in text
