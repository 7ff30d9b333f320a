"""The capacity report writer keeps every other section of docs/benchmarks.md and renders each
section it was given (no services; inputs are made-up results, the checks are about the document)."""

from __future__ import annotations

from aldebaran.bench import report

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
        "channels": {"bus": channel, "webhook": {**channel, "deliveries_eps": 1_020.0}},
    }
    doc = report.write(results, tmp_path)["markdown"].read_text()
    assert "| bus | 10,250 | 7,700 | 26 | 0.0012 | 0.05 | 50,000 / 50,000 | 0 | yes |" in doc
    assert "| dispatch bus: ≥ 50k deliveries/s on a Kafka-bus channel | 10,250/s | **NO** |" in doc
    assert "| dispatch webhook: ≥ 10k deliveries/s per webhook channel | 1,020/s | **NO** |" in doc
    assert "| ≤ 0.02 ledger object writes per delivery (channels that deduplicate) | 0.0012 | yes |" in doc
    assert "192,300" in doc


def test_merge_keeps_sections_and_book_sizes_this_run_did_not_measure(tmp_path):
    import json

    from aldebaran.bench import suite

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

    from aldebaran.bench import harness

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

    from aldebaran.bench import suite

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
