"""The pure parts of `aldebaran chaos ha` (aldebaran_lab.chaos.ha_measure): batch commits from checkpoint
samples, a fault's gaps, latency and losses inside its window, the targets, the JSON entry."""

from __future__ import annotations

import json

from aldebaran_lab.chaos.ha_measure import (
    Fault, catch_up_end, commit_times, fault_figures, misses, phases, row, section, takeover_end, write_results,
)


def test_commit_times_are_the_samples_where_the_count_grew():
    samples = [(0.0, 5), (0.5, 5), (1.0, 6), (1.5, 6), (2.0, 9), (2.5, 8), (3.0, 9), (3.5, 10)]
    # the first sample is where counting starts; a lower re-read (8) neither counts nor resets
    assert commit_times(samples) == [1.0, 2.0, 3.5]
    assert commit_times([]) == []
    assert commit_times([(0.0, 3)]) == []


def figures(**overrides):
    fault = Fault("Kafka broker (the KRaft controller)", "kafka-2", start=100.0, end=130.0, restored_s=14.2)
    received = {"webhook": {"a": 101.0, "b": 112.5, "c": 129.0, "old": 90.0},
                "bus": {"a": 101.2, "b": 105.0, "c": 128.0, "old": 90.1}}
    trigger_ms = {"a": 100_500, "b": 101_000, "c": 127_000, "d": 128_000, "old": 89_900}
    args = dict(commits=[95.0, 101.0, 104.0, 115.0, 116.0, 120.0, 129.5], received_at=received, trigger_ms=trigger_ms,
                missing={"webhook": {"d"}, "bus": {"d"}}, duplicated={})
    args.update(overrides)
    return fault_figures(fault, **args)


def test_a_faults_gaps_are_the_longest_stretches_inside_its_window():
    e = figures()
    assert e["batch_gap_s"] == 11.0  # 104 → 115
    assert e["by_recipient"]["webhook"]["delivery_gap_s"] == 16.5  # 112.5 → 129
    assert e["by_recipient"]["bus"]["delivery_gap_s"] == 23.0  # 105 → 128
    assert e["delivery_gap_s"] == 23.0 and e["max_gap_s"] == 23.0
    assert (e["component"], e["member"], e["restored_s"], e["window_s"]) == (
        "Kafka broker (the KRaft controller)", "kafka-2", 14.2, 30.0)


def test_no_commit_or_receipt_in_the_window_is_a_gap_of_the_whole_window():
    e = figures(commits=[], received_at={"webhook": {}})
    assert (e["batch_gap_s"], e["delivery_gap_s"], e["max_gap_s"]) == (30.0, 30.0, 30.0)
    assert e["p99_ms"] is None  # nothing timed: no figure, not NaN (JSON)


def test_latency_and_losses_count_only_alerts_triggered_inside_the_window():
    e = figures()
    assert e["alerts_in_window"] == 4  # a, b, c, d; not "old"
    # webhook: a 500 ms, b 11,500 ms, c 2,000 ms; bus: 700, 4,000, 1,000 → p99 is the max of three
    assert e["by_recipient"]["webhook"]["p99_ms"] == 11_500
    assert e["by_recipient"]["bus"]["p99_ms"] == 4_000
    assert e["p99_ms"] == 11_500  # the worst recipient's
    assert e["lost"] == 2  # "d" at both recipients
    assert figures(missing={"webhook": {"old"}})["lost"] == 0  # lost outside the window: another fault's
    assert figures(duplicated={"bus": {"a", "old"}})["duplicated"] == 1


def test_targets():
    ok = {"lost": 0, "duplicated": 0, "max_gap_s": 10.0}
    assert misses(ok) == []
    assert misses({**ok, "max_gap_s": 10.1}) == ["gap 10.1 s > 10 s"]
    assert misses({**ok, "lost": 3, "duplicated": 1}) == ["3 lost", "1 duplicated"]
    assert misses({**ok, "max_gap_s": None}) == ["gap None s > 10 s"]


def test_row_and_section_shape():
    e = figures()
    r = row(e, 1)
    assert r["scenario"] == "SIGKILL Kafka broker (the KRaft controller) (`kafka-2`)"
    assert (r["lost"], r["duplicated"]) == (2, 0)
    assert "max gap 23.0 s" in r["recovery"] and "target missed: 2 lost, gap 23.0 s > 10 s" in r["recovery"]
    s = section([e], command="aldebaran chaos ha", achieved_trades_per_s=9_500)
    assert s["command"] == "aldebaran chaos ha" and s["met"] is False
    assert s["targets"] == {"lost": 0, "duplicated": 0, "detect_plus_takeover_s": 10.0}
    (f,) = s["faults"]
    assert {"component", "max_gap_s", "p99_ms", "lost", "duplicated"} <= f.keys()
    assert (f["component"], f["max_gap_s"], f["p99_ms"], f["lost"], f["duplicated"]) == (
        "Kafka broker (the KRaft controller)", 23.0, 11_500, 2, 0)
    assert section([])["met"] is False  # nothing measured is not a pass


def test_write_results_keeps_the_other_keys(tmp_path):
    path = tmp_path / "img" / "reliability-results.json"
    write_results({"faults": [1]}, path)
    assert json.loads(path.read_text()) == {"ha": {"faults": [1]}}
    path.write_text(json.dumps({"dispatch_failover": {"x": 1}, "ha": {"old": True}}))
    write_results({"faults": []}, path)
    assert json.loads(path.read_text()) == {"dispatch_failover": {"x": 1}, "ha": {"faults": []}}


def test_the_takeover_ends_when_the_last_stalled_path_produces_again():
    paths = {"auditor batches": [95.0, 99.0, 101.5, 104.0],  # kept committing: resumes 1.5 s after
             "webhook p0": [96.0, 99.5, 108.0],  # stalled: the dispatcher's partition, back at 108
             "webhook p1": [97.0, 100.5, 102.0],
             "bus p3": [50.0, 110.0]}  # idle in the look-back before the kill: not a stalled path
    assert takeover_end(paths, lo=90.0, at=100.0, hi=130.0) == (108.0, "webhook p0")
    assert takeover_end(paths, lo=90.0, at=100.0, hi=105.0) == (None, "webhook p0")  # not back in the window
    assert takeover_end({}, lo=90.0, at=100.0, hi=130.0) == (100.0, "")


def test_catch_up_ends_at_the_first_run_of_seconds_within_the_baseline_p99():
    # second 0 and 1 slow, 2 fine, 3 slow again, then 4, 5, 6 fine: the run starts at second 4
    lat = [(200.2, 9_000), (201.5, 5_000), (202.1, 800), (203.3, 2_500), (204.0, 900), (205.9, 700), (206.5, 600),
           (207.2, 650)]
    assert catch_up_end(lat, since=200.0, hi=220.0, p99_ms=1_000) == 204.0
    assert catch_up_end(lat, since=200.0, hi=205.5, p99_ms=1_000) is None  # not within the window
    gap = [(200.5, 500), (202.5, 500), (203.5, 500), (204.5, 500)]  # a second without alerts breaks a run
    assert catch_up_end(gap, since=200.0, hi=220.0, p99_ms=1_000) == 202.0


def test_phases_split_detection_takeover_and_catch_up():
    fault = Fault("streaming dispatcher", "d-1", start=100.0, end=140.0, detected=106.5)
    paths = {"auditor batches": [95.0, 98.0, 107.0], "webhook p0": [99.0, 109.0]}
    lat = [(109.0 + k, 3_000 - 600 * k) for k in range(8)]  # back within 1,000 ms from 113
    p = phases(fault, paths, lat, baseline_p99_ms=1_000)
    assert (p["detect_s"], p["takeover_s"], p["takeover_path"], p["catch_up_s"]) == (6.5, 2.5, "webhook p0", 4.0)
    never = phases(Fault("x", "m", start=100.0, end=140.0), paths, lat, 1_000)  # the probe never saw it
    assert (never["detect_s"], never["takeover_s"], never["catch_up_s"]) == (None, None, None)


def test_the_target_is_detection_plus_takeover():
    ok = {"lost": 0, "duplicated": 0, "detect_s": 3.0, "takeover_s": 7.0, "max_gap_s": 25.0}
    assert misses(ok) == []  # a long gap of catching up is no miss: it is reported apart
    assert misses({**ok, "takeover_s": 7.1}) == ["detection + takeover 3.0 + 7.1 s > 10 s"]
    assert misses({**ok, "detect_s": None}) == ["detection + takeover None + 7.0 s > 10 s"]


def test_the_section_carries_the_issues_keys():
    e = figures() | {"detect_s": 1.0, "takeover_s": 2.0, "catch_up_s": 3.0, "takeover_path": "bus p1"}
    s = section([e], offered_rate=2_000, baseline_p99_ms=850)
    assert (s["offered_rate"], s["baseline_p99_ms"]) == (2_000, 850)
    (f,) = s["faults"]
    assert {k: f[k] for k in ("component", "detect_s", "takeover_s", "catch_up_s", "max_gap_s", "lost", "duplicated")} == {
        "component": "Kafka broker (the KRaft controller)", "detect_s": 1.0, "takeover_s": 2.0, "catch_up_s": 3.0,
        "max_gap_s": 23.0, "lost": 2, "duplicated": 0}
    assert "detect **1.0 s**, takeover **2.0 s** (last: bus p1)" in row(e, 1)["recovery"]
