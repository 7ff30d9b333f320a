"""The deployed bench's interleaved runs (aldebaran_lab.deployed_runs): the order they run in, and a rate's
figures from its runs — medians, the p99 spread, the hand-rolled loop's p99 and the ratio, channel sums."""

from __future__ import annotations

from aldebaran_lab.deployed_runs import aggregate, interleave, lane_aggregate


def _run(p50, p99, log_delivered=10, log_p99=None, quiet=True, restarts=None, fast=None):
    run = {"rate": 5000, "achieved_eps": 4990, "orders": 10, "alerts": 10, "alert_p50_ms": p50, "alert_p99_ms": p99,
           "channels": {"log": {"expected": 10, "delivered": log_delivered, "p50_ms": 1.0, "p99_ms": log_p99}},
           "restarts": restarts or {}, "stages_ms": {"trade_to_detected": p50}, "box": {"quiet": quiet,
                                                                                        "other_cores_mean": 0.1},
           "timeline": {"alert": [[0, p99]]}}
    if fast is not None:
        run["extra"] = {"fast": fast}
    return run


def test_runs_are_interleaved_every_rate_per_run():
    assert interleave([1000, 5000], 3) == [(1, 1000), (1, 5000), (2, 1000), (2, 5000), (3, 1000), (3, 5000)]


def test_a_rate_reports_the_median_of_its_runs_and_the_p99_spread():
    runs = [_run(100.0, 900.0), _run(300.0, 4000.0), _run(200.0, 1500.0)]
    peers = [{"p50_ms": 5.0, "p99_ms": 30.0, "delivered": 10, "expected": 10},
             {"p50_ms": 6.0, "p99_ms": 90.0, "delivered": 10, "expected": 10},
             {"p50_ms": 4.0, "p99_ms": 50.0, "delivered": 9, "expected": 10}]
    s = aggregate(5000, runs, peers)
    assert (s["runs"], s["alert_p50_ms"], s["alert_p99_ms"]) == (3, 200.0, 1500.0)  # not the mean (2,133)
    assert s["alert_p99_spread_ms"] == [900.0, 4000.0]
    assert (s["peer_p99_ms"], s["peer_p99_spread_ms"]) == (50.0, [30.0, 90.0])
    assert s["ratio_to_peer"] == 30.0
    assert (s["peer_delivered"], s["peer_expected"]) == (29, 30)
    assert s["timeline"] == {"alert": [[0, 1500.0]]}  # the run at the median
    assert len(s["per_run"]) == 3 and s["per_run"][1]["peer"]["p99_ms"] == 90.0


def test_channels_sum_deliveries_and_take_the_median_p99_and_restarts_add_up():
    runs = [_run(1, 2, log_delivered=10, log_p99=100.0, restarts={"auditor": 1}),
            _run(1, 2, log_delivered=7, log_p99=300.0),
            _run(1, 2, log_delivered=10, log_p99=200.0, restarts={"auditor": 1, "dispatcher log": 2})]
    s = aggregate(1000, runs, [{}, {}, {}])
    assert s["channels"]["log"] == {"delivered": 27, "expected": 30, "p50_ms": 1.0, "p99_ms": 200.0}
    assert s["restarts"] == {"auditor": 2, "dispatcher log": 2}
    assert s["peer_p99_ms"] is None and s["ratio_to_peer"] is None


def test_one_run_on_a_busy_box_flags_the_rate():
    s = aggregate(1000, [_run(1, 2), _run(1, 2, quiet=False), _run(1, 2)], [{}, {}, {}])
    assert s["box"]["quiet"] is False and s["box"]["not_quiet_runs"] == [2]


def test_an_even_number_of_runs_takes_the_middle_two():
    s = aggregate(1000, [_run(100.0, 1000.0), _run(300.0, 2000.0)], [{}, {}])
    assert (s["alert_p50_ms"], s["alert_p99_ms"]) == (200.0, 1500.0)


def test_beside_the_lane_the_fast_topic_and_the_exact_one_are_reported_apart():
    fast = [{"p50_ms": 20.0, "p99_ms": 200.0, "delivered": 10, "expected": 10},
            {"p50_ms": 30.0, "p99_ms": 600.0, "delivered": 10, "expected": 10},
            {"p50_ms": 25.0, "p99_ms": 250.0, "delivered": 8, "expected": 10}]
    runs = [_run(500.0, 1800.0, fast=fast[0]), _run(700.0, 2500.0, fast=fast[1]), _run(600.0, 2100.0, fast=fast[2])]
    peers = [{"p99_ms": 40.0}, {"p99_ms": 50.0}, {"p99_ms": 60.0}]
    s = lane_aggregate(10000, runs, peers)
    assert (s["fast_p50_ms"], s["fast_p99_ms"], s["fast_p99_spread_ms"]) == (25.0, 250.0, [200.0, 600.0])
    assert (s["fast_delivered"], s["fast_expected"]) == (28, 30)
    assert (s["exact_p99_ms"], s["exact_p99_spread_ms"]) == (2100.0, [1800.0, 2500.0])
    assert (s["peer_p99_ms"], s["fast_ratio_to_peer"]) == (50.0, 5.0)


def test_the_report_renders_every_part_from_aggregated_runs():
    from aldebaran_lab import deployed_report

    seg = aggregate(10000, [_run(100.0, 900.0, log_p99=950.0)], [{"p99_ms": 45.0}])
    rest = {"seconds": 60, "total_cores": 0.4, "exact_auditor_cores": 0.1, "other_cores": 0.0, "quiet": True,
            "roles": {"auditor JVM": 0.1, "kafka": 0.3}}
    rung = {"mix": "one-alert", "rate": 5000, "achieved_eps": 5000, "delivered": 10, "expected": 10,
            "alert_p50_ms": 1.0, "alert_p99_ms": 2.0, "first_third_p50_ms": 1.0, "last_third_p50_ms": 1.0,
            "passed": True, "why": "flat", "box": {"quiet": True}}
    lane = lane_aggregate(10000, [_run(1, 2, fast={"p99_ms": 100.0, "delivered": 10, "expected": 10})],
                          [{"p99_ms": 45.0}])
    result = {"command": "aldebaran bench deployed", "machine": {"date": "d", "cores": 2, "memory_gib": 8,
                                                                  "load_avg_at_start": 0.5},
              "deployed": {"producer": "p", "order": "o", "seconds": 30, "runs": 1, "segments": [seg], "rest": rest,
                           "capacity": [rung], "capacity_eps": {"one-alert": 5000, "publisher": None},
                           "capacity_rates": [5000], "rung_seconds": 60,
                           "with_lane": {"rest": rest, "segments": [lane]}}}
    text = deployed_report.render(result, None)
    assert "| **platform total** (not bench, not other) | **0.400** |" in text
    assert "- deployed capacity ≥ 40,000 events/s (one-alert mix): **MISSED** (5,000 events/s)" in text
    assert "| 10,000 | 1 | 4,990 | 10 | 100 / 900 | 900–900 | 45 (45–45) | 20.0× |" in text
    assert "fast p99 ≤ 250 ms at 10,000/s beside the exact lane: **met** (100 ms)" in text


class BacklogProbeFake:
    """Failure injection for quiesce: the platform's backlog as a scripted sequence of probes."""

    def __init__(self, answers):
        self.answers, self.calls = list(answers), 0

    def __call__(self):
        self.calls += 1
        return self.answers.pop(0) if self.answers else {}


def test_quiesce_waits_for_the_exact_auditor_not_only_the_channels():
    from aldebaran_lab.deployed_runs import quiesce

    # The channels are idle from the first probe; the auditor still has trades to read for two more.
    probe = BacklogProbeFake([{"auditor": 120_000, "aldebaran-dispatch-log on alerts": 0},
                              {"auditor": 30_000}, {"auditor": 0, "lane keeper on alerts.fast": 0}])
    waited, left = quiesce(None, probe=probe, step=0.0)
    assert probe.calls == 3 and left == {} and waited >= 0.0


def test_quiesce_gives_up_after_its_bound_and_says_what_was_left():
    from aldebaran_lab.deployed_runs import quiesce

    probe = BacklogProbeFake([{"auditor": 5}] * 1000)
    waited, left = quiesce(None, max_wait=0.05, probe=probe, step=0.01)
    assert left == {"auditor": 5} and waited > 0.05


def test_with_a_fast_webhook_its_recipient_is_trade_to_fast_recipient():
    runs = [_run(500.0, 1800.0, fast={"p99_ms": 100.0}), _run(700.0, 2500.0, fast={"p99_ms": 120.0}),
            _run(600.0, 2100.0, fast={"p99_ms": 110.0})]
    for run, (p50, p99, got) in zip(runs, [(60.0, 400.0, 10), (80.0, 900.0, 10), (70.0, 300.0, 9)]):
        run["channels"]["webhook"] = {"expected": 10, "delivered": got, "p50_ms": p50, "p99_ms": p99}
    peers = [{"p99_ms": 40.0}] * 3
    s = lane_aggregate(1000, runs, peers, fast_channel="webhook")
    assert s["fast_channel"] == "webhook"
    assert (s["fast_delivery_p50_ms"], s["fast_delivery_p99_ms"]) == (70.0, 400.0)
    assert s["fast_delivery_p99_spread_ms"] == [300.0, 900.0]
    assert (s["fast_delivery_delivered"], s["fast_delivery_expected"]) == (29, 30)
    assert "fast_delivery_p99_ms" not in lane_aggregate(1000, runs, peers)  # no fast channel: no such figure
