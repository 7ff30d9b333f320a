"""The metrics cost bench (aldebaran_capacity.bench.metrics_cost): every case runs, small (a smoke run, no
figure is asserted)."""

from __future__ import annotations


def test_the_cost_bench_runs_every_case_small():
    from aldebaran_capacity.bench import metrics_cost

    result = metrics_cost.run(updates=50, repeats=1)  # a smoke run, not a measurement
    assert set(result["cases"]) == {
        "prometheus_counter_inc_bound", "prometheus_counter_inc_labels", "prometheus_gauge_set",
        "prometheus_histogram_observe", "statsd_udp_send", "statsd_format_and_send", "scrape_one_dispatcher"}
    assert all(case["median_ns"] > 0 for case in result["cases"].values())
    assert result["cases"]["scrape_one_dispatcher"]["bytes"] > 1000
    assert result["prometheus_client"] == "0.26.0"
