"""aldebaran_lab.batch_cost's pure parts: the medians per variant and rate with the p99's spread, and the
benchmarks.md section naming every variant's change."""

from __future__ import annotations

from aldebaran_lab import batch_cost


def _seg(variant: str, rate: int, run: int, ms: float, p99: float) -> dict:
    return {"variant": variant, "rate": rate, "run": run, "jvm_cores": ms / 1000 * 3, "jit_cores": 0.3,
            "gc_cores": 0.01, "python_cores": 0.2, "jvm_us_per_event": ms, "python_us_per_event": 50.0,
            "box_busy_cores": 1.5, "batches_per_s": 3.0, "jvm_ms_per_batch": ms, "alert_p50_ms": p99 / 2,
            "alert_p99_ms": p99}


def test_the_summary_is_the_median_of_the_runs_with_the_p99_spread():
    segs = [_seg("bulk-delete", 1000, r, ms, p99) for r, ms, p99 in ((1, 150, 900), (2, 110, 1200), (3, 140, 800))]
    segs.append(_seg("interval-1s", 1000, 1, 180, 1500))
    got = batch_cost.summarize(segs)
    assert got["bulk-delete"]["1000"]["jvm_ms_per_batch"] == 140
    assert got["bulk-delete"]["1000"]["alert_p99_ms"] == 900
    assert got["bulk-delete"]["1000"]["alert_p99_spread_ms"] == [800, 1200]
    assert got["bulk-delete"]["1000"]["runs"] == 3
    assert got["interval-1s"]["1000"]["runs"] == 1


def test_the_section_names_each_variant_and_its_command():
    segs = [_seg(v, 1000, 1, 120, 900) for v in ("spark-delete", "bulk-delete", "interval-500ms")]
    result = {"machine": {"date": "2026-11-28", "cores": 2}, "command": "aldebaran bench batch-cost --runs 1",
              "batch_cost": {"runs": 1, "seconds": 30.0, "summary": batch_cost.summarize(segs)}}
    text = batch_cost.render(result)
    assert text.startswith(batch_cost.BEGIN) and text.endswith(batch_cost.END)
    assert "`aldebaran bench batch-cost --runs 1`" in text
    for variant in ("spark-delete", "bulk-delete", "interval-500ms"):
        assert batch_cost.LABELS[variant] in text


def test_every_variant_changes_one_thing_and_the_intervals_are_flags():
    assert batch_cost.VARIANTS["bulk-delete"] == {}  # the shipped settings: the baseline
    assert batch_cost.VARIANTS["spark-delete"] == {"spark.hadoop.aldebaran.checkpoint.delete": "filecontext"}
    assert set(batch_cost.INTERVALS) == {"interval-0", "interval-500ms", "interval-1s"}
    assert set(batch_cost.LABELS) >= set(batch_cost.VARIANTS) | {"interval-500ms", "interval-1s"}
