"""The pure parts of `aldebaran bench e2e`: latency figures, the sustained-rate decision, recipient
counts, the stable JSON keys and the report section (no services; made-up inputs)."""

from __future__ import annotations

import json
import math

from aldebaran_capacity.bench import e2e, report


def test_latency_is_receipt_minus_trigger_stamp_over_alerts_received():
    received_at = {"a": 10.0, "b": 10.5, "c": 11.0, "x": 12.0}
    trigger_ms = {"a": 9_900, "b": 10_000, "c": 10_000, "d": 1}
    lat = e2e.latency_ms(received_at, trigger_ms)
    assert lat["timed"] == 3
    assert lat["p50_ms"] == 500 and lat["max_ms"] == 1000 and lat["p99_ms"] == 1000
    assert math.isnan(e2e.latency_ms({}, trigger_ms)["p50_ms"])


def test_slope_of_a_line_and_degenerate_inputs():
    assert e2e.slope([(t, 2 * t + 1) for t in range(10)]) == 2.0
    assert e2e.slope([(1.0, 5)]) == 0.0
    assert e2e.slope([(1.0, 5), (1.0, 9)]) == 0.0


def test_backlog_growing_looks_at_the_second_half_of_the_producing_window():
    # 500 alerts/s offered; the backlog climbs 100 alerts/s: more than 10% of the alert rate.
    climbing = [(float(t), 100 * t) for t in range(21)]
    assert e2e.backlog_growing(climbing, 0, 20, alert_rate=500, tolerance=0.1)
    assert not e2e.backlog_growing(climbing, 0, 20, alert_rate=5000, tolerance=0.1)
    # Saw-toothed by micro-batches but level: kept up.
    saw = [(float(t), 400 if t % 2 else 0) for t in range(21)]
    assert not e2e.backlog_growing(saw, 0, 20, alert_rate=500)
    # A climb before the window's middle, then flat (start-up): not growing.
    startup = [(float(t), min(t, 5) * 100) for t in range(21)]
    assert not e2e.backlog_growing(startup, 0, 20, alert_rate=500)
    # Samples outside the window do not count; too few samples never decide "growing".
    assert not e2e.backlog_growing(climbing, 0, 3, alert_rate=10)
    assert not e2e.backlog_growing([(25.0, 1e6), (26.0, 2e6), (27.0, 3e6)], 0, 20, alert_rate=10)


def test_a_segment_is_sustained_only_if_every_required_channel_caught_up_and_did_not_grow():
    ok = {"webhook": True, "bus": True, "sms": False}
    flat = {"webhook": False, "bus": False, "sms": True}
    assert e2e.segment_sustained(ok, flat)  # SMS is not required
    assert not e2e.segment_sustained({**ok, "bus": False}, flat)
    assert not e2e.segment_sustained(ok, {**flat, "webhook": True})
    assert not e2e.segment_sustained({"webhook": True}, {"webhook": False})  # bus never measured


def test_recipient_counts_split_missing_into_lost_and_not_reached():
    counts = e2e.recipient_counts({"a", "b", "c", "d"}, {"a", "b", "x"}, duplicates=1, backlog={"c"})
    assert counts == {"expected": 4, "received": 2, "received_once": 1, "duplicates": 1, "missing": 2, "lost": 1,
                      "not_reached": 1, "unexpected": 1}


def _counts(**over) -> dict:
    return {"expected": 10, "received": 10, "received_once": 10, "duplicates": 0, "missing": 0, "lost": 0,
            "not_reached": 0, "unexpected": 0, **over}


def _segment(rate: int, achieved: float, sustained: bool, p99: float, warmup: bool = False) -> dict:
    ch = {"received": 10, "caught_up": sustained, "drain_s": 0.5, "deliveries_eps": rate / 11, "p50_ms": p99 / 2,
          "p95_ms": p99 * 0.9, "p99_ms": p99, "max_ms": p99, "timed": 10}
    return {"name": f"r{rate}", "rate": rate, "warmup": warmup, "trades": rate * 20, "achieved_rate": achieved,
            "alerts": 10, "from_s": 0.0, "to_s": 20.0, "load_avg": 1.0, "sustained": sustained,
            "growing": {"webhook": False, "bus": False, "sms": True},
            "backlog_max": {"webhook": 5, "bus": 3, "sms": 900}, "cpu_percent": {"auditor": 150.0},
            "alerts_topic": {"emitted": 10, "p50_ms": 100.0, "p95_ms": 200.0, "p99_ms": 300.0, "max_ms": 300.0,
                             "timed": 10},
            "channels": {"webhook": dict(ch), "bus": dict(ch), "sms": {**ch, "caught_up": False}}}


def test_headline_takes_the_highest_sustained_rate_and_its_figures():
    segs = [_segment(500, 500.0, True, 50, warmup=True), _segment(5_000, 4_990.0, True, 400),
            _segment(10_000, 9_950.0, True, 600), _segment(20_000, 18_000.0, False, 9_000)]
    counts = {"webhook": _counts(), "bus": _counts(), "sms": _counts(missing=4, not_reached=4)}
    h = e2e.headline(segs, counts)
    assert h["sustained_trades_eps"] == 9_950.0 and h["sustained_offered_rate"] == 10_000
    assert h["correct"] is True  # SMS behind (not reached) is not a loss
    for name in ("webhook", "bus", "sms"):
        c = h["channels"][name]
        assert set(c) >= {"deliveries_eps", "p50_ms", "p99_ms", "duplicates", "lost"}
    assert h["channels"]["webhook"]["p99_ms"] == 600


def test_headline_when_nothing_is_sustained_and_when_a_recipient_is_wrong():
    segs = [_segment(5_000, 5_000.0, False, 4_000)]
    h = e2e.headline(segs, {"webhook": _counts(), "bus": _counts()})
    assert h["sustained_trades_eps"] == 0.0 and h["figures_at_rate"] == 5_000
    assert h["channels"]["bus"]["p99_ms"] == 4_000
    assert not e2e.headline(segs, {"webhook": _counts(duplicates=1), "bus": _counts()})["correct"]
    assert not e2e.headline(segs, {"webhook": _counts(), "bus": _counts(missing=1, not_reached=1)})["correct"]
    assert not e2e.headline(segs, {"webhook": _counts(), "bus": _counts(), "sms": _counts(lost=1, missing=1)})["correct"]


def _results(e2e_result: dict) -> dict:
    machine = {"date": "2026-01-01 00:00 UTC", "cores": 2, "memory_gib": 8.0, "cpu": "x", "python": "3.11",
               "pyspark": "4.2.0", "confluent_kafka": "2.16.1", "load_avg_at_start": 1.0}
    return {"machine": machine, "config": {"quick": False}, "command": "aldebaran bench all", "seconds": 1.0,
            "correct": True, "e2e": e2e_result}


def _e2e_result() -> dict:
    segs = [_segment(500, 500.0, True, 50, warmup=True), _segment(5_000, 4_990.0, True, 400),
            _segment(50_000, 31_000.0, False, 7_000)]
    counts = {"webhook": _counts(), "bus": _counts(), "sms": _counts(missing=4, not_reached=4)}
    return {"mix": "original", "rates": [5_000, 50_000], "seconds": 20.0, "catch_up_s": 10.0, "growth_tolerance": 0.1,
            "webhook_batch": 1, "sustained_channels": ["webhook", "bus"], "segments": segs,
            "backlog": [{"t": float(t), "webhook": t, "bus": 0, "sms": 10 * t} for t in range(40)],
            "auditor": {"correct": True, "alerts": 30, "expected": 30, "missing": 0, "extra": 0},
            "auditor_drain_eps": 90_000.0, **e2e.headline(segs, counts)}


def test_report_renders_the_end_to_end_section_plot_and_stable_keys(tmp_path):
    written = report.write(_results(_e2e_result()), tmp_path)
    doc = written["markdown"].read_text()
    assert "### End to end" in doc
    assert "**Sustained: 4,990 trades/s**" in doc and "(0.06×)" in doc
    assert "| 5,000 | 4,990 | 10 | webhook | 10 | 455 | 200 | 360 | 400 | 0.5 | 5 | yes |" in doc
    assert "| 50,000 | 31,000 | 10 | sms |" in doc and "(not required)" in doc
    assert "*alerts topic (auditor)*" in doc
    assert "| sms | 10 | 10 | 0 | 4 | 0 | 4 | 0 |" in doc
    assert written["e2e"].read_bytes()[:4] == b"\x89PNG" and f"img/{written['e2e'].name}" in doc
    assert "trade → recipient p99 ≤ 1 s at 50k trades/s (webhook + bus) | webhook p99 7,000 ms, bus p99 7,000 ms | **NO** |" in doc
    raw = json.loads(written["results"].read_text())["e2e"]
    assert raw["sustained_trades_eps"] == 4_990.0 and raw["correct"] is True
    for name in ("webhook", "bus", "sms"):
        for key in ("deliveries_eps", "p50_ms", "p99_ms", "duplicates", "lost"):
            assert key in raw["channels"][name], (name, key)


def test_suite_and_capacity_accept_the_e2e_section():
    from aldebaran_capacity.bench import capacity, suite

    assert "e2e" in suite.SECTIONS and "e2e" in suite.Config.full().sections
    quick = suite.Config.quick_config()
    assert quick.e2e_rates == [500] and quick.e2e_seconds == 5.0
    quick.override("e2e_rates=1000,2000")
    assert quick.e2e_rates == [1000, 2000]
    config = capacity.config_from_params({"rates": [300], "duration_seconds": 2, "sections": ["e2e"]})
    assert config.sections == ("e2e",) and config.e2e_rates == [300] and config.e2e_seconds == 2.0
