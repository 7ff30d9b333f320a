"""The capacity report writer keeps every other section of docs/benchmarks.md and renders each
section it was given (no services; inputs are made-up results, the checks are about the document)."""

from __future__ import annotations

from aldebaran_capacity.bench import report

OTHER = "<!-- state-design:begin -->\n## State designs\n| a | b |\n<!-- state-design:end -->\n"


def _results() -> dict:
    machine = {"date": "2026-01-01 00:00 UTC", "cores": 2, "memory_gib": 8.0, "cpu": "x", "python": "3.11",
               "pyspark": "4.2.0", "confluent_kafka": "2.16.1", "load_avg_at_start": 1.0}
    seg = {"rate": 50_000, "events": 10, "achieved_rate": 49_000.0, "alerts": 5, "caught_up": True, "p50_ms": 100,
           "p95_ms": 200, "p99_ms": 300, "max_ms": 400, "load_avg": 1.0}
    return {
        "machine": machine, "config": {"quick": False, "drain_orders": 10, "drain_repeats": 1, "mix": {"seed": 1}},
        "command": "aldebaran bench all", "seconds": 1.0, "correct": False,
        "drain": {"events": 50, "produce_eps": 1.0, "auditor_eps": 100.0, "auditor_overall_eps": 90.0, "correct": True,
                  "load_avg_start": [1, 1, 1], "load_avg_end": [1, 1, 1],
                  "runs": [{"sustained_eps": 100.0, "overall_eps": 90.0, "batches": 2, "peak_rss_mib": 1.0,
                            "alerts": 3, "expected": 3}],
                  "spark_batch": {"eps": 200.0, "correct": True, "auditor_ratio": 0.5},
                  "kafka_consume": {"eps": 1000.0, "incl_join_eps": 900.0, "correct": True, "auditor_ratio": 0.1,
                                    "command": "java ..."},
                  "python_peer": {"eps": 150.0, "correct": False, "auditor_ratio": 0.67}},
        "latency": {"segments": [seg], "duration_s": 1.0, "correct": True, "alerts": 5, "expected": 5},
        "books": {"rows": [{"books": 100, "events": 200, "sustained_eps": 10.0, "last_batches_eps": 9.0,
                            "peak_rss_mib": 10.0, "baseline_rss_mib": 5.0, "correct": True, "load_avg": 1.0}],
                  "correct": True},
    }


def test_splice_replaces_only_its_own_section():
    first = report.splice("# Benchmarks\n\n" + OTHER, report.BEGIN + "\nold\n" + report.END)
    assert OTHER in first and "old" in first
    second = report.splice(first, report.BEGIN + "\nnew\n" + report.END)
    assert OTHER in second and "new" in second and "old" not in second
    assert second.count(report.BEGIN) == 1


def test_write_renders_tables_plots_and_keeps_other_sections(tmp_path):
    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\n" + OTHER)
    written = report.write(_results(), tmp_path)
    doc = written["markdown"].read_text()
    assert OTHER in doc
    assert "| **auditor** (sustained) | 100 |" in doc
    assert "| single-threaded confluent-kafka + dict (hand-written peer) | 150 | 0.67 | **NO** |" in doc
    assert "| 50,000 | 49,000 | 5 | 100 | 200 | 300 | 400 | yes |" in doc
    for name in ("drain", "latency", "books"):
        assert written[name].read_bytes()[:4] == b"\x89PNG"
        assert f"img/{written[name].name}" in doc
    assert "Overall: **NO**" in doc


def test_dispatch_section_shows_channels_writes_per_delivery_and_the_ledger_ceiling(tmp_path):
    results = _results()
    channel = {"alerts": 50_000, "received": 50_000, "received_twice": 0, "runs": 26, "deliveries_eps": 10_250.0,
               "deliveries_eps_incl_start": 7_700.0, "ledger_writes_per_delivery": 0.0012,
               "ratio_to_ledger_ceiling": 0.05, "correct": True}
    results["dispatch"] = {
        "alerts": 50_000, "sms_alerts": 500, "repeats": 1, "all_correct": True, "ledger_writes_per_delivery": 0.0012,
        "ledger_ceiling": {"run_size": 1923, "concurrency": 8, "runs_per_s": 100.0, "conditional_puts_per_s": 200.0,
                           "deliveries_per_s": 192_300.0},
        "channels": {"bus": channel, "webhook": {**channel, "deliveries_eps": 1_020.0},
                     "log": {**channel, "deliveries_eps": 31_206.0}},
    }
    doc = report.write(results, tmp_path)["markdown"].read_text()
    assert "| bus | 10,250 | 7,700 | 26 | 0.0012 | 0.05 | 50,000 / 50,000 | 0 | yes |" in doc
    assert "| dispatch bus: ≥ 50k deliveries/s on a Kafka-bus channel | 10,250/s | **NO** |" in doc
    assert "| dispatch webhook: ≥ 10k deliveries/s per webhook channel | 1,020/s | **NO** |" in doc
    assert "| dispatch log: ≥ 5k deliveries/s on the log channel | 31,206/s | yes |" in doc
    assert "| ≤ 0.02 ledger object writes per delivery (every channel that is not provider-bound) | 0.0012 | yes |" in doc
    assert "192,300" in doc


def test_merge_adds_the_channels_this_run_measured_beside_the_earlier_ones(tmp_path):
    from aldebaran_capacity.bench import suite

    channel = {"alerts": 100, "received": 100, "received_twice": 0, "runs": 2, "deliveries_eps": 500.0,
               "deliveries_eps_incl_start": 400.0, "ledger_writes_per_delivery": 0.02,
               "ratio_to_ledger_ceiling": 0.01, "correct": True}
    old = {"channels": {"webhook": channel, "pagerduty": {**channel, "deliveries_eps": 1.0}},
           "ledger_writes_per_delivery": 0.02}
    new = {"alerts": 100, "sms_alerts": 100, "repeats": 1, "ledger_writes_per_delivery": 0.5,
           "channels": {"pagerduty": {**channel, "deliveries_eps": 900.0, "ledger_writes_per_delivery": 0.01},
                        "apns": {**channel, "ledger_writes_per_delivery": 0.5, "correct": False}}}
    origin = {"command": "aldebaran bench all", "date": "2026-01-01 00:00 UTC"}

    merged = suite.merge_dispatch(new, old, origin)

    assert list(merged["channels"]) == ["webhook", "pagerduty", "apns"]
    assert merged["channels"]["webhook"]["from_run"] == origin
    assert merged["channels"]["pagerduty"]["deliveries_eps"] == 900.0
    assert "from_run" not in merged["channels"]["pagerduty"]
    # apns cannot deduplicate: its sent markers do not count against the ledger-writes budget
    assert merged["ledger_writes_per_delivery"] == 0.02
    assert merged["correct"] is False and merged["all_correct"] is False


def test_merge_keeps_sections_and_book_sizes_this_run_did_not_measure(tmp_path):
    import json

    from aldebaran_capacity.bench import suite

    previous = _results()
    previous["books"]["rows"].append({**previous["books"]["rows"][0], "books": 1_000, "sustained_eps": 8.0})
    path = tmp_path / "img" / "bench-results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(previous))
    machine = {**previous["machine"], "date": "2026-02-02 00:00 UTC"}
    new_row = {**previous["books"]["rows"][0], "books": 1_000, "sustained_eps": 7.0}
    big_row = {**previous["books"]["rows"][0], "books": 10_000, "sustained_eps": 5.0, "correct": False}
    now = {"machine": machine, "config": {"book_sizes": [1_000, 10_000]}, "command": "aldebaran bench all --sections books",
           "seconds": 1.0, "books": {"rows": [new_row, big_row], "correct": False}}

    merged = suite.merge(now, path)

    assert [(r["books"], r["sustained_eps"], "from_run" in r) for r in merged["books"]["rows"]] == [
        (100, 10.0, True), (1_000, 7.0, False), (10_000, 5.0, False)]
    assert merged["drain"]["from_run"] == {"command": "aldebaran bench all", "date": "2026-01-01 00:00 UTC"}
    assert "from_run" not in merged["books"] and merged["config"]["drain_orders"] == 10
    assert merged["books"]["correct"] is False and merged["correct"] is False
    doc = report.write(merged, tmp_path)["markdown"].read_text()
    assert "*From an earlier run: `aldebaran bench all` — 2026-01-01 00:00 UTC.*" in doc
    assert "Rows from an earlier run (`--merge`): 100 books: `aldebaran bench all`, 2026-01-01 00:00 UTC." in doc


def test_books_that_cannot_fit_are_reported_as_not_run(tmp_path):
    import psutil

    from aldebaran_capacity.bench import harness

    measured = {"books": 1_000, "peak_rss_mib": 200.0, "baseline_rss_mib": 100.0, "sustained_eps": 10.0}
    available = psutil.virtual_memory().available / harness.MIB
    fits = int(0.5 * available / 0.1 * 1_000 / 1_000)  # 0.1 MiB per book: half the available memory
    assert harness._books_preflight([measured], fits) is None
    assert harness._books_preflight([], 10**12) is None  # nothing measured yet: nothing to project from
    why = harness._books_preflight([measured], 100 * fits)
    assert why and "102.40 KiB per open book, RSS growth at 1,000" in why
    # Two sizes: the slope between them (the fixed costs cancel), applied to the books still to add.
    larger = {"books": 11_000, "peak_rss_mib": 210.0, "baseline_rss_mib": 100.0, "sustained_eps": 10.0}
    per_book = 10.0 / 10_000  # MiB: ~1 KiB per book, where the single-size rule would see ~10 KiB
    assert harness._books_preflight([larger, measured], 11_000 + int(0.5 * available / per_book)) is None
    slope = harness._books_preflight([measured, larger], 11_000 + int(2 * available / per_book))
    assert slope and "1.02 KiB per open book, slope between 1,000 and 11,000" in slope

    results = _results()
    results["books"]["rows"].append({"books": 10_000_000, "skipped": why})
    doc = report.write(results, tmp_path)["markdown"].read_text()
    assert f"| 10,000,000 | – | not run: {why} |" in doc
    assert "books held (largest measured); throughput there 1.00× that at 100; 10,000,000 not run (projected memory)" in doc


def test_merge_keeps_the_run_a_merged_section_came_from_on_its_rows(tmp_path):
    """A books section that was itself merged from an earlier run (section-level mark, rows unmarked)
    keeps naming that run on its rows when a later run measures other sizes."""
    import json

    from aldebaran_capacity.bench import suite

    previous = _results()
    previous["command"] = "aldebaran bench all --sections drain --merge"
    previous["books"]["from_run"] = {"command": "aldebaran bench all --sections books", "date": "2026-01-01 12:00 UTC"}
    path = tmp_path / "bench-results.json"
    path.write_text(json.dumps(previous))
    new_row = {**previous["books"]["rows"][0], "books": 1_000, "sustained_eps": 7.0}
    now = {"machine": {**previous["machine"], "date": "2026-02-02 00:00 UTC"}, "config": {}, "seconds": 1.0,
           "command": "aldebaran bench all --sections books", "books": {"rows": [new_row], "correct": True}}

    rows = suite.merge(now, path)["books"]["rows"]

    assert [(r["books"], r.get("from_run")) for r in rows] == [
        (100, {"command": "aldebaran bench all --sections books", "date": "2026-01-01 12:00 UTC"}), (1_000, None)]


def _slow_batch(batch_id: int, trigger: int, **over) -> dict:
    parts = {"latestOffset": 3, "queryPlanning": 5, "walCommit": 2, "addBatch": trigger - 20, "commitOffsets": 4,
             "spark_other": 6, "foreach_batch": trigger - 25, "steps.parse_shards": trigger - 60,
             "steps.alerts": 20, "steps.archive": 15, "shard_step_max": 300.0, "jvm_gc": 12.0}
    return {"batch_id": batch_id, "trade_rows": 35_000, "trigger_ms": trigger, "parts_ms": parts,
            "shard_loads": {"cache": 2}, "snapshots": [], "cpu_pct": {"auditor": 150, "others": 30},
            "alert_latency_ms": {"alerts": 3_500, "p50": 900, "max": 1_400}, **over}


def test_latency_renders_the_slowest_batches_and_each_part_per_segment(tmp_path):
    results = _results()
    seg = results["latency"]["segments"][0]
    seg.update({
        "batches": 40, "batches_with_trades": 38,
        "slowest_batches": [
            _slow_batch(60, 4_200, shard_loads={"cold": 1, "replay": 1},
                        snapshots=[{"shard": 0, "bytes": 3 * 2**20}, {"shard": 1, "bytes": 2 * 2**20}],
                        parts_ms={"latestOffset": 3, "addBatch": 4_150, "steps.parse_shards": 4_000,
                                  "steps.snapshot": 1_250.5, "shard_step_max": 3_700.0, "jvm_gc": 40.0}),
            _slow_batch(41, 1_100),
        ],
        "parts_p50_ms": {"trigger": 700, "trade_rows": 34_000, "latestOffset": 3, "addBatch": 650,
                         "steps.parse_shards": 500, "shard_step_max": 250.0, "jvm_gc": 0.0},
        "parts_p99_ms": {"trigger": 4_200, "trade_rows": 180_000, "latestOffset": 9, "addBatch": 4_150,
                         "steps.parse_shards": 4_000, "shard_step_max": 3_700.0, "jvm_gc": 40.0},
        "p99_alert_batches": [{"batch_id": 61, "alerts": 700}, {"batch_id": None, "alerts": 2}],
    })
    results["latency"]["batch_log"] = ".run/bench/batches/latency-x.jsonl"

    doc = report.write(results, tmp_path)["markdown"].read_text()

    assert "(`.run/bench/batches/latency-x.jsonl`)" in doc
    assert "| part | 50,000/s p50 | 50,000/s p99 |" in doc
    assert "| trigger | 700 | 4,200 |" in doc
    assert "| steps.parse_shards | 500 | 4,000 |" in doc
    assert "| *trades per batch* | 34,000 | 180,000 |" in doc
    assert "Slowest batches at 50,000 events/s and where their time went (40 batches, 38 with trades):" in doc
    # The columns: every part either row names, in first-seen order (a step only the first batch has
    # — an engine's new steps_ms key — gets its column; the other row shows – there).
    assert ("| batch | trades | trigger ms | latestOffset | addBatch | steps.parse_shards | steps.snapshot | "
            "shard_step_max | jvm_gc | queryPlanning | walCommit | commitOffsets | spark_other | foreach_batch | "
            "steps.alerts | steps.archive | shard loads | snapshots | CPU % auditor / others | alerts | "
            "alerts' max ms |") in doc
    assert ("| 60 | 35,000 | 4,200 | 3 | 4,150 | 4,000 | 1,250 | 3,700 | 40 | – | – | – | – | – | – | – | "
            "cold 1, replay 1 | shard 0 3.0 MiB, shard 1 2.0 MiB | 150 / 30 | 3,500 | 1,400 |") in doc
    assert ("| 41 | 35,000 | 1,100 | 3 | 1,080 | 1,040 | – | 300 | 12 | 5 | 2 | 4 | 6 | 1,075 | 20 | 15 | "
            "cache 2 | – | 150 / 30 | 3,500 | 1,400 |") in doc
    assert "The alerts at or above p99 (300 ms) came from: 700 from batch 61, 2 outside any logged batch." in doc


def test_latency_results_without_batch_figures_render_the_summary_only(tmp_path):
    doc = report.write(_results(), tmp_path)["markdown"].read_text()
    assert "| 50,000 | 49,000 | 5 | 100 | 200 | 300 | 400 | yes |" in doc
    assert "Where a batch's time goes" not in doc


def test_batch_records_join_progress_and_engine_figures_by_batch_id():
    from aldebaran_capacity.bench import harness

    t0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
    progress = {
        7: {"batchId": 7, "timestamp": "2023-11-14T22:13:20.000Z", "numInputRows": 1_001,
            "sources": [{"description": "KafkaV2[Subscribe[t]]", "numInputRows": 1_000},
                        {"description": "RateStreamV2[...]", "numInputRows": 1}],
            "durationMs": {"triggerExecution": 900, "latestOffset": 10, "queryPlanning": 20, "walCommit": 30,
                           "addBatch": 800, "commitOffsets": 25, "getBatch": 0, "setOffsetRange": 1}},
        8: {"batchId": 8, "timestamp": "2023-11-14T22:13:21.000Z", "numInputRows": 1,
            "sources": [{"description": "KafkaV2[Subscribe[t]]", "numInputRows": 0}],
            "durationMs": {"triggerExecution": 100, "addBatch": 90}},
    }
    figures = {7: {"batch_id": 7, "batch_ms": 780.4, "state_ms_max": 400.04, "shard_loads": {"replay": 2},
                   "steps_ms": {"parse_shards": 700.0, "alerts": 50.0, "read_parse_ms": 123.0, "note": "x"},
                   "open_books": 5, "worker_rss_mib_max": 60.0, "received_ms": 1.0}}
    windows = [("warmup", 200, t0 - 5_000), ("r50000", 50_000, t0 - 100)]
    alerts = [({"kind": "OVERFILL", "trigger_event_ts": t0 - 300}, t0 + 850),
              ({"kind": "OVERFILL", "trigger_event_ts": t0 - 100}, t0 + 850),
              ({"kind": "ORPHAN", "trigger_event_ts": t0 - 900}, t0 + 850),
              ({"kind": "OVERFILL", "trigger_event_ts": t0 + 900}, t0 + 1_050)]

    records = harness.batch_records(progress, figures, windows, alerts)

    first, second = records
    assert (first["batch_id"], first["segment"], first["rate"], first["start_ms"]) == (7, "r50000", 50_000, t0)
    assert (first["rows"], first["trade_rows"], first["trigger_ms"]) == (1_001, 1_000, 900)
    assert first["parts_ms"] == {"latestOffset": 10, "getBatch": 0, "queryPlanning": 20, "walCommit": 30,
                                 "addBatch": 800, "commitOffsets": 25, "setOffsetRange": 1, "spark_other": 14,
                                 "foreach_batch": 780.4, "steps.parse_shards": 700.0, "steps.alerts": 50.0,
                                 "steps.read_parse_ms": 123.0, "shard_step_max": 400.0}
    assert first["shard_loads"] == {"replay": 2} and "received_ms" not in first["engine"]
    assert first["alert_latency_ms"] == {"alerts": 2, "p50": 950, "max": 1_150}
    assert second["alert_latency_ms"] == {"alerts": 1, "p50": 150, "max": 150}
    assert second["parts_ms"] == {"addBatch": 90, "spark_other": 10}  # no engine figures for it

    summary = harness.segment_batches(records, "r50000", slowest=1)
    assert (summary["batches"], summary["batches_with_trades"]) == (2, 1)
    assert [r["batch_id"] for r in summary["slowest_batches"]] == [7]
    assert summary["parts_p99_ms"]["trigger"] == 900 and summary["parts_p50_ms"]["trade_rows"] == 1_000
    assert harness.p99_alert_batches(records, "r50000", alerts, 900.0) == [{"batch_id": 7, "alerts": 2}]


def test_plans_section_renders_each_variant_against_both_ceilings():
    from aldebaran_capacity.bench.report import _plans_markdown

    run = {"sustained_eps": 20_000.0, "shard_loads": {"cold": 2, "cache": 20}}
    p = {"events": 1_000_000, "repeats": 1, "max_offsets_per_trigger": 100_000, "load_avg_start": [1.5],
         "load_avg_end": [2.25],
         "variants": [{"plan": "copartitioned", "parser": "python", "host": "dedicated", "sustained_eps": 20_000.0,
                       "spark_read_ratio": 0.125, "spark_batch_ratio": 1.25, "correct": True, "runs": [run]}],
         "spark_read": {"eps": 160_000.0}, "spark_batch": {"eps": 16_000.0}}
    text = "\n".join(_plans_markdown(p, {"plans_orders": 200_000}))
    assert ("| co-partitioned, Python parse, books in dedicated shard hosts (default) | 20,000 | 0.12 | 1.25 | "
            "cache 20, cold 2 | yes |") in text
    assert "| Spark's Kafka source alone (read, no parse) | 160,000 | 1.00 | – | – | – |" in text
    assert "| Spark batch job (JVM parse + dedupe + aggregate) | 16,000 | 0.10 | 1.00 | – | – |" in text
    assert "Load average 1.50 → 2.25." in text


def test_write_keeps_the_json_keys_other_benches_own_and_replaces_its_own(tmp_path):
    import json

    (tmp_path / "img").mkdir()
    before = {"deployed": {"segments": [1]}, "batch_cost": {"runs": 3}, "low_latency": {"p99_ms": 32},
              "churn": {"stale": True}, "drain": {"auditor_eps": 1.0}}
    (tmp_path / "img" / "bench-results.json").write_text(json.dumps(before))
    report.write(_results(), tmp_path)
    after = json.loads((tmp_path / "img" / "bench-results.json").read_text())
    for key in ("deployed", "batch_cost", "low_latency"):  # written by `bench deployed`, `batch-cost`, ... --report
        assert after[key] == before[key]
    assert after["drain"]["auditor_eps"] == 100.0  # the suite's own sections are this run's
    assert "churn" not in after  # not measured, not merged: gone, as from the document
