"""``bench dispatch``'s fast-lane figure (dispatch.fast): the cheapest correct cross-lane design is the one
published, every design is kept beside it, and an incorrect design is never the figure."""

from __future__ import annotations

from aldebaran_capacity.bench.dispatch import CHANNELS, FAST_KINDS, fast_summary


def design(eps: float, writes: float, correct: bool = True) -> dict:
    return {"deliveries_eps": eps, "ledger_writes_per_delivery": writes, "runs_eps": [eps], "correct": correct}


def test_the_fewest_writes_per_delivery_among_the_correct_designs_is_the_figure():
    got = fast_summary({"markers": design(450, 1.02), "log": design(5200, 0.006)})
    assert (got["design"], got["deliveries_eps"], got["ledger_writes_per_delivery"]) == ("log", 5200, 0.006)
    assert set(got["designs"]) == {"markers", "log"}


def test_a_design_that_lost_or_doubled_an_alert_is_not_the_figure():
    got = fast_summary({"markers": design(450, 1.02), "log": design(9000, 0.004, correct=False)})
    assert got["design"] == "markers" and got["designs"]["log"]["correct"] is False


def test_no_correct_design_publishes_no_figure():
    assert fast_summary({"log": design(9000, 0.004, correct=False)})["deliveries_eps"] is None


def test_one_bench_command_knows_every_design():
    assert set(FAST_KINDS) <= set(CHANNELS) and set(FAST_KINDS.values()) == {"markers", "log"}


def test_merging_into_a_previous_report_keeps_the_fast_figure_apart_from_the_platform_s_writes():
    from aldebaran_capacity.bench.suite import merge_dispatch

    webhook = {**design(12_000, 0.004), "channel": "webhook"}
    new = {"channels": {"fast_markers": design(450, 1.02), "fast_log": design(5200, 0.006)}}
    merged = merge_dispatch(new, {"channels": {"webhook": webhook}}, {"command": "earlier"})
    assert merged["ledger_writes_per_delivery"] == 0.004  # the webhook's, not the markers candidate's 1.02
    assert merged["fast"]["design"] == "log" and merged["channels"]["webhook"]["from_run"] == {"command": "earlier"}
