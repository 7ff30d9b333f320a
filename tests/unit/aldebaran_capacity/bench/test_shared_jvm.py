"""bench shared-jvm: the figures per shape from the runs (pure), and the interleaving."""

from __future__ import annotations

from aldebaran_capacity.bench.shared_jvm import SHAPES, summarise


def _run(shape: str, rest: float, exact_p99: float, fast_p99: float, received: int = 10) -> dict:
    return {"shape": shape, "start_s": 30.0, "rest_cores": rest, "rss_mb": 900.0,
            "segments": [{"rate": 1000, "events": 6000, "expected": 10, "load_cores": 0.5,
                          "exact": {"received": received, "p50_ms": 100.0, "p99_ms": exact_p99},
                          "fast": {"received": 10, "p50_ms": 10.0, "p99_ms": fast_p99}}]}


def test_medians_and_spreads_per_shape():
    runs = [_run("apart", 0.20, 900, 90), _run("shared", 0.15, 1200, 300, received=9), _run("shared", 0.17, 800, 200),
            _run("apart", 0.22, 700, 70), _run("apart", 0.30, 1100, 110), _run("shared", 0.16, 1000, 250)]
    out = summarise(runs, (1000,))
    assert set(out) == set(SHAPES)
    assert out["apart"]["rest_cores"] == 0.22 and out["apart"]["rest_cores_spread"] == [0.20, 0.30]
    assert out["shared"]["rest_cores"] == 0.16 and out["shared"]["runs"] == 3
    seg = out["shared"]["segments"][0]
    assert seg["exact_p99_ms"] == 1000 and seg["exact_p99_spread_ms"] == [800, 1200]
    assert seg["fast_p99_ms"] == 250 and seg["fast_p99_spread_ms"] == [200, 300]
    assert seg["missing"] == 1 and out["apart"]["segments"][0]["missing"] == 0


def test_the_runs_alternate_the_shapes(monkeypatch):
    from aldebaran_capacity.bench import shared_jvm

    seen = []
    monkeypatch.setattr(shared_jvm, "one_run", lambda shape, *a, **k: seen.append(shape) or _run(shape, 0.1, 1, 1))
    result = shared_jvm.run((1000,), seconds=1, rest_s=1, repeats=3)
    assert seen == ["apart", "shared", "shared", "apart", "apart", "shared"] == result["order"]
