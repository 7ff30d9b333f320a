"""The low-latency bench's own logic: per-second series, GC pauses from a JVM log, the box's roles, the tuning
medians and the targets' verdicts."""

from __future__ import annotations

from datetime import datetime, timezone

from aldebaran_capacity.bench import boxstate, lane_report, lane_tuning, low_latency


def test_series_buckets_by_second_since_start():
    t0 = 1_000_000
    points = [(t0 + 10, 5.0), (t0 + 900, 7.0), (t0 + 1_500, 100.0), (t0 + 3_100, 1.0)]
    rows = low_latency.series(points, t0)
    assert [r[0] for r in rows] == [0, 1, 3]  # an empty second is left out, not zero
    assert rows[0][1] == 2 and rows[0][4] == 7.0
    assert rows[1] == [1, 1, 100.0, 100.0, 100.0]


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+0000"


def test_gc_pauses_in_the_window_only(tmp_path):
    log = tmp_path / "lane.gc.log"
    log.write_text("\n".join([
        f"[{_stamp(100.0)}] Using G1",
        f"[{_stamp(101.0)}] GC(0) Pause Young (Normal) (G1 Evacuation Pause) 31M->25M(380M) 11.716ms",
        f"[{_stamp(105.0)}] GC(1) Pause Young (Normal) (G1 Evacuation Pause) 40M->26M(380M) 4.274ms",
        f"[{_stamp(106.0)}] GC(2) Pause Remark 50M->40M(380M) 2.500ms",
        f"[{_stamp(106.5)}] GC(2) Concurrent Mark Cycle 30.000ms",
        f"[{_stamp(120.0)}] GC(3) Pause Full (System.gc()) 60M->20M(380M) 90.000ms",
    ]))
    assert low_latency.gc_pauses(log, 104.0, 110.0) == {"count": 2, "total_ms": 6.8, "max_ms": 4.3}
    assert low_latency.gc_pauses(tmp_path / "missing.log", 0, 1) is None


def test_a_foreign_dispatcher_counts_against_quiet_and_the_bench_own_does_not():
    cmd = ["python", "aldebaran", "dispatch", "--follow"]
    foreign = ("auditor", "dispatcher", "lane")
    assert boxstate.role_of(cmd, bench_pids=set(), pid=10, foreign=foreign) == "other"
    assert boxstate.role_of(cmd, bench_pids={10}, pid=10, foreign=foreign) == "dispatcher"
    assert boxstate.role_of(cmd, bench_pids=set(), pid=10) == "dispatcher"  # the deployed bench's platform
    lane = ["java", "org.apache.spark.deploy.SparkSubmit", "spark_apps/realtime_lane.py"]
    assert boxstate.role_of(lane, bench_pids={11}, pid=11, foreign=foreign) == "lane"
    assert boxstate.role_of(["java", "PacedProducer"], bench_pids={12}, pid=12) == "bench"
    client = ["java", "-cp", "/jars/kafka_2.13-4.1.0.jar:/jars/kafka-clients.jar", "FloorConsumer"]
    assert boxstate.role_of(client, bench_pids={14}, pid=14) == "bench"  # a client, not the broker
    broker = ["java", "-Xmx1g", "-cp", "/jars/kafka_2.13-4.1.0.jar", "kafka.Kafka", "/run/server.properties"]
    assert boxstate.role_of(broker, bench_pids=set(), pid=15) == "kafka"
    assert boxstate.role_of(["pytest"], bench_pids=set(), pid=13) == "other"


def _seg(rate, p50, p99, floor, quiet=True, cores=0.5):
    return {"rate": rate, "p50_ms": p50, "p99_ms": p99, "floor_p99_ms": floor, "quiet": quiet, "lane_cores": cores,
            "missing": 0, "extra": 0}


def test_tuning_medians_keep_every_round():
    variant = lane_tuning.BY_NAME["flush-10"]
    runs = [{"started_seconds": 15, "segments": [_seg(10_000, 40, 300, 20), _seg(1_000, 10, 90, 15)]},
            {"started_seconds": 16, "segments": [_seg(10_000, 60, 200, 30, quiet=False), _seg(1_000, 12, 80, 10)]},
            {"started_seconds": 14, "segments": [_seg(10_000, 50, 900, 25), _seg(1_000, 11, 70, 12)]}]
    agg = lane_tuning.aggregate(variant, runs, (10_000, 1_000))
    assert agg["by_rate"]["10000"]["p99_ms"] == 300 and agg["by_rate"]["10000"]["p99_runs"] == [300, 200, 900]
    assert agg["by_rate"]["1000"]["p50_ms"] == 11
    assert agg["floor_p99_ms"] == 25 and agg["quiet_runs"] == 2 and agg["runs"] == 3


def test_variants_each_change_one_thing_from_the_baseline():
    base = lane_tuning.BY_NAME["baseline"]
    for v in lane_tuning.VARIANTS[1:]:
        fields = [f for f in ("conf", "master", "shuffle_partitions", "source_options", "driver_memory", "plan",
                              "producer_linger_ms")
                  if getattr(v, f) != getattr(base, f)]
        assert len(fields) == 1 or fields == ["master", "shuffle_partitions"], (v.name, fields)


def test_targets_say_met_or_missed_with_the_figure():
    met = [{**_seg(10_000, 50, 240, 130), "p99_to_floor": 1.85}, {**_seg(1_000, 40, 90, 20), "p99_to_floor": 4.5}]
    lines = lane_report.targets(met)
    assert "p99 240 ms" in lines[0] and "**met**" in lines[0] and "**met**" in lines[1]
    over_floor = [{**_seg(10_000, 50, 240, 100), "p99_to_floor": 2.4}]
    assert "**missed**" in lane_report.targets(over_floor)[0]
    slow = [{**_seg(1_000, 51, 90, 20), "p99_to_floor": 4.5}]
    assert "**missed**" in lane_report.targets(slow)[0]


def _full(rate, p50, p99, floor):
    return {**_seg(rate, p50, p99, floor), "achieved_rate": rate, "alerts": 10, "p95_ms": p99, "max_ms": p99 + 1,
            "floor_p50_ms": floor / 2, "p99_to_floor": round(p99 / floor, 2), "fast_delivery_p50_ms": None,
            "fast_delivery_p99_ms": None, "agreement": 1.0, "other_cores": 0.03,
            "box": {"load1_mean": 1.2, "load1_max": 1.5, "run_queue_max": 3, "steal_cores_mean": 0.0,
                    "cores_by_role": {"lane": 0.4, "kafka": 0.3}},
            "gc": {"count": 1, "total_ms": 4.0, "max_ms": 4.0},
            "series": {"lane": [[0, 5, p50, p99, p99]], "floor": [[0, 5, 1.0, floor, floor]]}}


def test_the_section_names_the_warm_up_the_floor_and_an_unquiet_segment():
    result = {"command": "aldebaran bench low-latency", "machine": {"date": "2026-11-26 09:00 UTC", "cores": 2,
                                                                     "load_avg_at_start": 0.4},
              "low_latency": {"runtime": "pyspark 4.3.0", "mode": "real-time", "master": "local[4]",
                              "started_seconds": 15.0, "idle_cores": 0.05, "agreement": None,
                              "warmup": _full(10_000, 2_000, 3_000, 100),
                              "segments": [_full(1_000, 20, 80, 30), {**_full(10_000, 60, 400, 100), "quiet": False}]}}
    text = lane_report.render(result, "img/x.png")
    assert "10,000 — warm-up (left out)" in text
    assert "| **no** |" in text and "4.0×" in text and "![lane and floor" in text
    assert lane_report.summary(result)["low_latency"]["segments"][0].get("series") is None


def _tuning_result(names, date):
    variants = [lane_tuning.aggregate(lane_tuning.BY_NAME[n], [{"started_seconds": 15, "segments": [
        _seg(10_000, 50, 300, 20), _seg(1_000, 3, 30, 10)]}], (10_000, 1_000)) for n in names]
    return {"command": f"aldebaran bench lane-tuning --variants {','.join(names)}",
            "machine": {"date": date, "cores": 2},
            "tuning": {"rates": [10_000, 1_000], "rounds": 1, "minutes": 2.0, "failed": [], "raw": {},
                       "variants": variants}}


def test_a_second_tuning_run_is_appended_not_replacing_the_first(tmp_path):
    import json

    (tmp_path / "img").mkdir()
    lane_report.write_tuning(_tuning_result(["baseline", "flush-10"], "d1"), tmp_path)
    lane_report.write_tuning(_tuning_result(["baseline", "producer-linger-0"], "d2"), tmp_path, append=True)
    data = json.loads((tmp_path / "img" / "bench-results.json").read_text())["low_latency"]
    assert [(r["name"], r["run"]) for r in data["tuning"]] == [
        ("baseline", 0), ("flush-10", 0), ("baseline", 1), ("producer-linger-0", 1)]
    assert [r["machine"]["date"] for r in data["tuning_runs"]] == ["d1", "d2"]
    text = (tmp_path / "benchmarks.md").read_text()
    assert "### Run 1" in text and "### Run 2" in text and "| flush-10 |" in text
    lane_report.write_tuning(_tuning_result(["baseline"], "d3"), tmp_path)  # not appended: replaces
    data = json.loads((tmp_path / "img" / "bench-results.json").read_text())["low_latency"]
    assert len(data["tuning_runs"]) == 1 and len(data["tuning"]) == 1
