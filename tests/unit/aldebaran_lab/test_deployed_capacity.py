"""The deployed capacity (aldebaran_lab.deployed_capacity): the backlog rule, a rung's verdict, the ladder's stop
rule (driven by a callback, no services), and the two mixes with the alerts the reference model expects."""

from __future__ import annotations

import random

from aldebaran_lab import deployed_capacity as cap


def test_a_flat_rung_is_not_growing():
    points = [(t / 10, 400.0 + (t % 7) * 10) for t in range(600)]  # 60 s, latency 400–460 ms throughout
    b = cap.backlog(points, 60.0, expected=600, delivered=600)
    assert b["growing"] is False and b["why"] == "flat"


def test_latency_rising_by_more_than_a_second_over_the_rung_is_growing():
    points = [(t / 10, 300.0 + t * 3.0) for t in range(600)]  # 300 ms at the start, ~2.1 s at the end
    b = cap.backlog(points, 60.0, expected=600, delivered=600)
    assert b["growing"] is True and "rose" in b["why"]
    assert b["first_third_p50_ms"] < 700 and b["last_third_p50_ms"] > 1500


def test_a_rise_under_a_second_is_flat_and_a_missing_alert_is_growing():
    points = [(t / 10, 300.0 + t * 1.5) for t in range(600)]  # the thirds' medians ~600 ms apart
    assert cap.backlog(points, 60.0, expected=600, delivered=600)["growing"] is False
    b = cap.backlog(points, 60.0, expected=601, delivered=600)
    assert b["growing"] is True and "1 of 601" in b["why"]


def test_a_rung_fails_on_p99_backlog_or_a_short_producer():
    ok = {"rate": 10000, "achieved_eps": 9990, "alert_p99_ms": 1999.0, "backlog_growing": False}
    assert cap.verdict(ok)[0] is True
    assert cap.verdict({**ok, "alert_p99_ms": 2001.0})[0] is False
    assert cap.verdict({**ok, "alert_p99_ms": None})[0] is False
    assert cap.verdict({**ok, "backlog_growing": True, "backlog_why": "x"})[0] is False
    passed, why = cap.verdict({**ok, "achieved_eps": 9000})
    assert passed is False and "achieved 9,000" in why


def test_the_ladder_stops_at_the_first_failing_rung_and_reports_the_last_passed():
    p99 = {5000: 800.0, 10000: 1200.0, 20000: 2600.0, 30000: 900.0}
    asked = []

    def measure(rate):
        asked.append(rate)
        return {"rate": rate, "achieved_eps": rate, "alert_p99_ms": p99[rate], "backlog_growing": False}

    result = cap.ladder([5000, 10000, 20000, 30000], measure)
    assert asked == [5000, 10000, 20000]  # 30000 is never offered once 20000 failed
    assert result["capacity_eps"] == 10000
    assert [r["passed"] for r in result["rungs"]] == [True, True, False]


def test_no_rung_passed_is_no_capacity():
    result = cap.ladder([5000], lambda r: {"rate": r, "achieved_eps": r, "alert_p99_ms": 5000.0,
                                           "backlog_growing": False})
    assert result["capacity_eps"] is None and len(result["rungs"]) == 1


def test_the_one_alert_mix_expects_one_overfill_per_order():
    ids = cap.expected_ids("one-alert", "t1", 50, seed=3)
    assert len(ids) == 50


def test_the_publisher_mix_is_the_original_draws_and_expects_the_overfilled_orders():
    orders = list(cap.orders_of("publisher", "p", 200, seed=11))
    rng = random.Random(11)
    for oid, values in orders[:3]:  # the original publisher's draws, in its order
        limit = rng.randint(50, 100)
        amounts = [int(limit / 2 * rng.random()) for _ in range(4)]
        assert values[0] == {"id": oid, "#shares": limit, "client": "Goldman", "stock": "AAPL"}
        assert [v["#shares"] for v in values[1:]] == amounts
        assert all(v["initial_order_id"] == oid for v in values[1:])
    over = {oid for oid, values in orders if sum(v["#shares"] for v in values[1:]) > values[0]["#shares"]}
    assert 0 < len(over) < 200
    from aldebaran.audit.findings import alert_id

    assert cap.expected_ids("publisher", "p", 200, seed=11) == {alert_id("OVERFILL", o) for o in over}
    assert cap.order_count("publisher", 10000, 60) == 120000 and cap.order_count("one-alert", 3000, 1) == 1000
