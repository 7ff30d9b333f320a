"""bench low-latency --repeats: a rate's runs as one row (medians, the p99s' spread, per_run), and the
recipient's receive rate."""

from __future__ import annotations

import pytest

from aldebaran_capacity.bench import lane_report, lane_runs, low_latency


def _seg(p50, p99, floor_p99=100.0, other=0.02, quiet=True, events=20_000, alerts=1_800, series="s"):
    return {"rate": 1_000, "p50_ms": p50, "p95_ms": p99 - 1, "p99_ms": p99, "max_ms": p99 + 5, "floor_p50_ms": 5.0,
            "floor_p99_ms": floor_p99, "achieved_rate": 999, "agreement": 1.0, "lane_cores": 0.8,
            "other_cores": other, "quiet": quiet, "events": events, "alerts": alerts, "expected_alerts": alerts,
            "missing": 0, "extra": 0, "duplicates": 0, "series": series, "box": {"run": series}}


def _fast(p50, p99, delivered=1_800, eps=90.0):
    return {**_seg(10, 60, series="fast"), "fast_delivered": delivered, "expected_alerts": delivered,
            "fast_delivery_p50_ms": p50, "fast_delivery_p99_ms": p99, "fast_deliveries_eps": eps}


def test_three_runs_give_medians_the_spread_and_the_median_run_whole():
    runs = [_seg(10, 300, series="a"), _seg(20, 100, floor_p99=50, series="b"), _seg(15, 200, series="c")]
    row = lane_runs.combine(1_000, runs)
    assert row["runs"] == 3
    assert row["p50_ms"] == 15 and row["p99_ms"] == 200 and row["p99_spread_ms"] == [100, 300]
    assert row["floor_p99_ms"] == 100 and row["p99_to_floor"] == 2.0
    assert row["series"] == "c" and row["box"] == {"run": "c"}  # the run whose p99 is the median
    assert row["events"] == 60_000 and row["alerts"] == 5_400  # counts summed over the runs
    assert row["max_ms"] == 305
    assert [r["p99_ms"] for r in row["per_run"]] == [300, 100, 200]  # in the order they ran
    assert "fast_delivery_p99_ms" not in row  # no fast runs: no fast figures


def test_one_unquiet_run_flags_the_row_with_its_other_cores():
    row = lane_runs.combine(1_000, [_seg(10, 100), _seg(10, 110, other=0.35, quiet=False), _seg(10, 120)])
    assert row["quiet"] is False and row["other_cores"] == 0.35


def test_fast_runs_pair_with_the_lane_runs_by_run():
    runs = [_seg(10, 100), _seg(12, 120), _seg(11, 110)]
    fast = [_fast(80, 500, eps=88.0), _fast(70, 300, eps=90.0), _fast(90, 900, eps=91.0)]
    row = lane_runs.combine(1_000, runs, fast)
    assert row["fast_delivery_p50_ms"] == 80 and row["fast_delivery_p99_ms"] == 500
    assert row["fast_delivery_p99_spread_ms"] == [300, 900]
    assert row["fast_deliveries_eps"] == 90.0
    assert row["fast_delivered"] == 5_400 and row["fast_expected"] == 5_400
    assert [r["fast_delivery_p99_ms"] for r in row["per_run"]] == [500, 300, 900]
    assert row["with_fast"]["series"] == "fast"  # the lane's figures while the dispatcher shared the box


def test_no_run_is_an_error_not_an_empty_row():
    with pytest.raises(ValueError, match="5,000|5000"):
        lane_runs.combine(5_000, [])


def test_receive_rate_first_to_last_receipt():
    assert low_latency.receive_rate([1_000.0, 1_500.0, 2_000.0]) == 2.0  # 2 intervals in 1 s
    assert low_latency.receive_rate([1_000.0]) is None
    assert low_latency.receive_rate([5.0, 5.0]) is None


def test_the_targets_name_the_fast_recipient_against_its_limits():
    s1 = {**lane_runs.combine(1_000, [_seg(10, 100), _seg(10, 120), _seg(10, 110)],
                              [_fast(50, 200), _fast(50, 250), _fast(50, 190)]), "rate": 1_000}
    s10 = {**lane_runs.combine(10_000, [_seg(50, 400), _seg(60, 450), _seg(55, 420)],
                               [_fast(300, 1_800), _fast(250, 250), _fast(280, 900)]), "rate": 10_000}
    lines = "\n".join(lane_report.targets([s1, s10]))
    assert "trade → fast recipient p99 900 ms (runs 250–1,800 ms; target ≤ 300): **missed**" in lines
    # 1k: 200 ≤ the lane's median p99 110 + 100
    assert "trade → fast recipient p99 200 ms (runs 190–250 ms; target ≤ the lane's p99 110 + 100): **met**" in lines


def test_the_fast_dispatchers_paced_rows_take_the_median_run_and_render():
    from aldebaran_capacity.bench import fast_paced, report

    def run(p99):
        return {"rate": 100, "seconds": 20.0, "alerts": 2_000, "delivered": 2_000, "produced_to_tap_p50_ms": 3.0,
                "produced_to_tap_p99_ms": 40.0, "tap_to_recipient_p50_ms": 57.0, "tap_to_recipient_p99_ms": p99 - 10,
                "produced_to_recipient_p50_ms": 60.0, "produced_to_recipient_p99_ms": p99, "posts": 660,
                "alerts_per_post": 3.0}

    (row,) = fast_paced.rows({100: [run(300.0), run(140.0), run(200.0)]})
    assert row["produced_to_recipient_p99_ms"] == 200.0 and row["runs"] == 3
    assert row["p99_runs_ms"] == [300.0, 140.0, 200.0]
    text = "\n".join(report._fast_paced_markdown([row]))
    assert "| 100 | 3 | 3 / 40 | 57 / 190 | 60 / 200 (300, 140, 200) | 3 | 2,000/2,000 |" in text
    assert report._fast_paced_markdown([]) == []


def test_the_lanes_start_is_its_first_probe_alerts_receipt_not_when_the_probe_loop_looks(monkeypatch):
    """The lane answers the third probe; the start is that alert's receive stamp (the loop used to look only every
    5 s). The Kafka send and the alerts reader are fakes: what is checked is the arithmetic on the stamps."""
    import time as _time

    class AlertsFake:
        seen: list = []

    sent: list[str] = []

    def send_fake(recs, topic, **_kw):
        order = recs[0].key.decode()
        sent.append(order)
        if len(sent) == 3:  # the lane is up: this probe's alert arrives 20 ms after it was sent
            AlertsFake.seen.append((int(_time.time() * 1000) + 20, {"order_id": order}))

    monkeypatch.setattr(low_latency.loadgen, "send", send_fake)
    t0 = _time.time()
    started = low_latency._probe(None, "trades", AlertsFake, timeout=30, every=0.1)
    assert len(sent) == 3
    assert 0.2 <= started <= (_time.time() - t0) + 0.05  # two cadences before it, not a 5 s look
