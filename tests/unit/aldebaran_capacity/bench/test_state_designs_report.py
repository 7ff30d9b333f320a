"""The state-design comparison renders one row per candidate and keeps the rest of the document
(no services; the inputs are made-up results, the checks are about the document)."""

from __future__ import annotations

from aldebaran_capacity.bench import state_designs

MACHINE = {"date": "2026-01-01 00:00 UTC", "cores": 2, "memory_gib": 8.0, "pyspark": "4.2.0"}


def _row(eps, correct=True, partial=False, re_emitted=0):
    return {"eps": eps, "batches": 3, "rows": 100, "wall_s": 1.0, "emitted": 10 + re_emitted,
            "re_emitted": re_emitted, "missing": None if partial else 0, "extra": 0,
            "correct": None if partial else correct, "partial": partial, "events": 500,
            "peak_rss_mib": 100.0, "load_avg": 1.5, "ratio_to_batch": eps / 1000}


def test_render_rows_and_splice_keep_other_sections():
    result = {"events": 500, "mix": {"orders": 100}, "max_offsets_per_trigger": 50, "expected_overfills": 10,
              "buckets": 16, "median_load": 1.5,
              "rows": {"auditor": _row(500.0), "jvm_agg_update": _row(900.0, correct=False, re_emitted=4),
                       "pandas_per_order": _row(20.0, partial=True), "spark_batch": _row(1000.0)}}
    section = state_designs.render([result], MACHINE, "aldebaran bench state-designs")
    assert "| 100 | **auditor** (shipped: one Python call per shard per batch, a dict loop over its events, batch-id keyed deltas) | 500 | 0.50 | 3 |" in section
    assert "| 100 | JVM groupBy + agg, update mode (wrong semantics) | 900 | 0.90 | 3 | 14 | 4 | 0 | 0 | **NO** |" in section
    assert "— 100 of 500 events in the time allowed | 20 | 0.02 | 3 | 10 | 0 | – | 0 | – |" in section
    doc = "# Benchmarks\n\n<!-- capacity:begin -->\nkeep\n<!-- capacity:end -->\n"
    once = state_designs.splice(doc, section)
    twice = state_designs.splice(once, section.replace("| 500 |", "| 501 |"))
    assert "keep" in twice and twice.count(state_designs.BEGIN) == 1 and "| 501 |" in twice
