"""The deployed-path bench's figures (aldebaran_lab.deployed_figures) and its report's target lines, from
hand-made tap contents: latency from the trade's timestamp, per channel, the stages, the timeline."""

from __future__ import annotations

from types import SimpleNamespace

from aldebaran_capacity.taps import Seen, percentile
from aldebaran_lab import deployed_report
from aldebaran_lab.deployed_figures import figures, timeline


def _tap(seen: dict) -> SimpleNamespace:
    return SimpleNamespace(seen=seen)


def _segment():
    t0 = 1_000_000.0
    # 4 orders: trades at t0 + 0, 100, 1100, 1200 ms; each alert seen on `alerts` 300 ms later.
    trig = {f"a{i}": t0 + off for i, off in enumerate((0, 100, 1100, 1200))}
    alerts = {a: Seen(t + 300, t, t + 200, t + 250, f"o{a}") for a, t in trig.items()}
    logs = {a: Seen(t + 400, t, t + 200) for a, t in trig.items() if a != "a3"}  # one not delivered yet
    bus = {a: Seen(t + 350, t, t + 200, t + 250) for a, t in trig.items()}
    webhook = {a: t + 500 for a, t in trig.items()} | {"other-run": t0}
    taps = {"alerts": _tap(alerts), "log": _tap(logs), "bus": _tap(bus)}
    watcher = SimpleNamespace(batches={7: {"batch_ms": 180.0, "steps_ms": {"parse_shards": 120.0}, "misrouted": 0,
                                           "trigger_ms": 260}},
                              restarts=lambda: {})
    return figures(10000, {"orders": 4, "events": 12, "seconds": 2.0}, t0, taps, webhook, set(alerts),
                   watcher=watcher, box={"quiet": True})


def test_latencies_are_measured_from_the_trades_timestamp_per_channel():
    s = _segment()
    assert (s["alert_p50_ms"], s["alert_p99_ms"]) == (300.0, 300.0)
    assert s["achieved_eps"] == 6 and s["alerts"] == 4
    ch = s["channels"]
    assert (ch["log"]["expected"], ch["log"]["delivered"], ch["log"]["p99_ms"]) == (4, 3, 400.0)
    assert (ch["webhook"]["delivered"], ch["webhook"]["p50_ms"]) == (4, 500.0)  # the other run's alert is not counted
    assert ch["bus"]["after_alert_p99_ms"] == 50.0


def test_stages_split_the_path():
    st = _segment()["stages_ms"]
    assert (st["trade_to_detected"], st["detected_to_produced"], st["produced_to_seen"]) == (200.0, 50.0, 50.0)
    assert (st["alert_to_log"], st["alert_to_webhook"], st["alert_to_bus"]) == (100.0, 200.0, 50.0)
    assert (st["batch_p50"], st["batch_parse_shards_p50"], st["batch_trigger_p50"]) == (180.0, 120.0, 260.0)


def test_the_timeline_buckets_by_second_of_trade_time():
    t0 = 0.0
    out = timeline(t0, {"x": 10.0, "y": 1500.0, "z": 1600.0}, {"alert": {"x": 110.0, "y": 1800.0, "z": 1700.0}})
    assert out == {"alert": [[0, 100.0], [1, 300.0]]}


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50, 99, 100)
    assert percentile([], 99) is None


def test_targets_name_met_and_missed_with_the_figure():
    s = _segment()
    lines = deployed_report.targets([s])
    assert lines[0] == "- trade → alert at 1,000/s: not measured (no segment at this rate)"
    assert lines[1] == "- trade → alert p99 ≤ 1,000 ms at 10,000/s: **met** (300 ms)"
    log_line = next(line for line in lines if "trade → log" in line)
    assert "**MISSED**" in log_line and "3/4 delivered" in log_line  # on time, but one short
    assert lines[-1].startswith("- 0 supervisor restarts under steady load: **met**")


def test_rest_capacity_and_lane_targets_say_met_or_missed():
    rest = deployed_report.rest_targets({"total_cores": 1.3, "exact_auditor_cores": 0.04})
    assert rest == ["- the platform at rest ≤ 0.3 core: **MISSED** (1.300 core)",
                    "- the exact auditor at rest (JVM + driver + Python workers) ≤ 0.05 core: **met** (0.040 core)"]
    assert "**MISSED** (20,000 events/s)" in deployed_report.capacity_targets({"one-alert": 20000})[0]
    assert "**met** (40,000 events/s)" in deployed_report.capacity_targets({"one-alert": 40000})[0]
    assert "**MISSED** (– events/s)" in deployed_report.capacity_targets({"one-alert": None})[0]
    lane = deployed_report.lane_targets([{"rate": 10000, "fast_p99_ms": 240.0, "peer_p99_ms": 40.0,
                                          "fast_ratio_to_peer": 6.0, "exact_p99_ms": 2500.0}])
    assert lane[0].endswith("**met** (240 ms)")
    assert "**MISSED** (240 vs 40 ms: 6.00×)" in lane[1]  # 240 > 5 × 40
    assert lane[2].endswith("**MISSED** (2,500 ms)")
    recipient = deployed_report.fast_recipient_targets([
        {"rate": 1000, "fast_p99_ms": 130.0, "fast_delivery_p99_ms": 200.0, "fast_delivery_p99_spread_ms": [150.0, 900.0]},
        {"rate": 5000, "fast_p99_ms": 400.0, "fast_delivery_p99_ms": 800.0},  # no target at 5k
        {"rate": 10000, "fast_p99_ms": 900.0, "fast_delivery_p99_ms": 1900.0}])
    assert recipient == ["- trade → fast recipient p99 ≤ the lane's p99 + 100 ms at 1,000/s: **met** (200 vs 130 + 100 ms"
                         "; runs 150–900 ms)",
                         "- trade → fast recipient p99 ≤ 300 ms at 10,000/s: **MISSED** (1,900 ms)"]
    slow_lane = deployed_report.fast_recipient_targets([{"rate": 1000, "fast_p99_ms": 4880.0,
                                                         "fast_delivery_p99_ms": 3829.0}])
    assert "**met** (3,829 vs 4,880 + 100 ms) — only because the lane's own p99" in slow_lane[0]


def test_cpu_per_event_is_each_platform_roles_cores_over_the_events_per_second():
    from aldebaran_lab.deployed_figures import cpu_per_event

    cores = {"auditor JVM": 0.5, "kafka": 0.1, "bench": 0.9, "other": 0.3, "minio": 0.001}
    # 0.5 core at 1,000 events/s = 500 CPU-µs per event; the bench, other processes and a role under
    # 0.005 core are left out
    assert cpu_per_event(cores, 1000.0) == {"auditor JVM": 500.0, "kafka": 100.0}
    assert cpu_per_event(cores, None) == {}


def test_a_segment_carries_its_cpu_per_event():
    t0 = 1_000_000.0
    alerts = {"a0": Seen(t0 + 300, t0, t0 + 200, t0 + 250, "o")}
    taps = {"alerts": _tap(alerts), "log": _tap({}), "bus": _tap({})}
    seg = figures(1000, {"orders": 1, "events": 2000, "seconds": 2.0}, t0, taps, {}, set(alerts),
                  box={"quiet": True, "cores_by_role": {"auditor JVM": 0.25}})
    assert seg["cpu_us_per_event"] == {"auditor JVM": 250.0}


def test_a_lane_only_run_keeps_the_earlier_exact_figures_and_adds_its_nice_levels(tmp_path):
    import json

    from aldebaran.runtime import paths

    earlier = json.loads((paths.ROOT / "docs" / "img" / "bench-results.json").read_text())["deployed"]
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "bench-results.json").write_text(json.dumps({"deployed": earlier, "other": 1}))

    def lane(p99: float) -> dict:
        return {"rate": 1000, "runs": 3, "fast_p50_ms": 20.0, "fast_p99_ms": p99, "fast_p99_spread_ms": [p99, p99],
                "fast_delivered": 3, "fast_expected": 3, "exact_p50_ms": 900.0, "exact_p99_ms": 2000.0,
                "exact_p99_spread_ms": [1900.0, 2100.0], "peer_p99_ms": 100.0, "fast_ratio_to_peer": p99 / 100.0,
                "quiet": True}

    machine = {"date": "2026-11-28 10:00 UTC", "cores": 2, "memory_gib": 23.5, "load_avg_at_start": 0.5}
    with_lane = {"segments": [lane(400.0)], "exact_nice": 0,
                 "exact_nice_ab": [{"nice": 0, "segments": [lane(400.0)]}, {"nice": 10, "segments": [lane(90.0)]}]}
    deployed_report.write({"deployed": {"with_lane": with_lane}, "command": "bench deployed --lane-only",
                           "machine": machine}, tmp_path, lane_only=True)
    data = json.loads((tmp_path / "img" / "bench-results.json").read_text())
    assert data["other"] == 1 and data["deployed"]["segments"] == earlier["segments"]
    assert data["deployed"]["command"] == earlier["command"]
    assert data["deployed"]["with_lane"]["command"] == "bench deployed --lane-only"
    assert [ab["nice"] for ab in data["deployed"]["with_lane"]["exact_nice_ab"]] == [0, 10]
    assert "with_lane" not in (data["deployed"].get("kept") or {})  # this run's now, not an earlier one's
    text = (tmp_path / "benchmarks.md").read_text()
    assert "reniced to **10**" in text and "`bench deployed --lane-only`" in text
    assert "*with lane: not measured by this run" not in text


def test_a_run_without_the_capacity_ladder_keeps_the_earlier_ladder_and_says_whose_it_is(tmp_path):
    import json

    from aldebaran.runtime import paths

    earlier = json.loads((paths.ROOT / "docs" / "img" / "bench-results.json").read_text())["deployed"]
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "bench-results.json").write_text(json.dumps({"deployed": earlier}))
    machine = {"date": "2026-11-29 10:00 UTC", "cores": 2, "memory_gib": 23.5, "load_avg_at_start": 0.5}
    new = {key: earlier[key] for key in ("rates", "seconds", "runs", "channels", "producer", "order", "peer")}
    new["segments"] = earlier["segments"][:1]
    deployed_report.write({"deployed": new, "command": "bench deployed --no-capacity --no-rest",
                           "machine": machine}, tmp_path)
    got = json.loads((tmp_path / "img" / "bench-results.json").read_text())["deployed"]
    assert got["command"] == "bench deployed --no-capacity --no-rest" and got["segments"] == new["segments"]
    assert got["capacity"] == earlier["capacity"] and got["capacity_eps"] == earlier["capacity_eps"]
    assert got["rest"] == earlier["rest"] and got["with_lane"] == earlier["with_lane"]
    # The ladder's own run: the published file's, or the one it already names when it kept the ladder too.
    origin = (earlier.get("kept") or {}).get("capacity") or {"command": earlier["command"],
                                                             "date": earlier["machine"]["date"]}
    assert got["kept"]["capacity"] == origin
    assert got["kept"]["with_lane"]["command"] == earlier["with_lane"]["command"]
    text = (tmp_path / "benchmarks.md").read_text()
    assert f"*capacity: not measured by this run; the figures are the earlier run's: `{origin['command']}`" in text


def test_a_rest_only_run_replaces_the_rest_and_keeps_every_other_figure(tmp_path):
    import json

    from aldebaran.runtime import paths
    from aldebaran_lab.deployed_rest import combine

    earlier = json.loads((paths.ROOT / "docs" / "img" / "bench-results.json").read_text())["deployed"]
    (tmp_path / "img").mkdir()
    # an earlier note that the rest was kept from a run before it: this run's rest replaces that too
    stale = {**earlier, "kept": {**(earlier.get("kept") or {}), "rest": {"command": "an older run", "date": "x"}}}
    (tmp_path / "img" / "bench-results.json").write_text(json.dumps({"deployed": stale}))
    machine = {"date": "2026-11-30 10:00 UTC", "cores": 2, "memory_gib": 23.5, "load_avg_at_start": 0.7}
    runs = [{**earlier["rest"], "total_cores": t, "exact_auditor_cores": e} for t, e in ((0.21, 0.04), (0.19, 0.06),
                                                                                       (0.33, 0.05))]
    deployed_report.write({"deployed": {"rest": combine(runs)}, "command": "bench deployed --rest-only --rest-runs 3",
                           "machine": machine}, tmp_path, rest_only=True)
    got = json.loads((tmp_path / "img" / "bench-results.json").read_text())["deployed"]
    assert (got["rest"]["total_cores"], got["rest"]["exact_auditor_cores"]) == (0.21, 0.05)
    assert got["rest"]["command"] == "bench deployed --rest-only --rest-runs 3"
    assert got["segments"] == earlier["segments"] and got["command"] == earlier["command"]
    assert got["capacity_eps"] == earlier["capacity_eps"] and got["with_lane"] == earlier["with_lane"]
    assert "rest" not in got.get("kept", {}) and got.get("kept", {}) == (earlier.get("kept") or {})
    text = (tmp_path / "benchmarks.md").read_text()
    assert "*rest: not measured by this run" not in text
    assert "`bench deployed --rest-only --rest-runs 3` — 2026-11-30 10:00 UTC" in text
    assert "the median of 3 runs, each right after its own `aldebaran demo` (platform 0.190–0.330" in text
    assert "the platform at rest ≤ 0.3 core: **met** (0.210 core)" in text
