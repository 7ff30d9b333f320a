"""``bench low-latency --repeats N``: one rate's segments over N interleaved runs as one row of
``low_latency.segments[]`` (BRIEF §4: the median of ≥ 3 runs with the spread of their p99s beside it).

Each run measures every rate in turn (the lane alone), then, with ``--fast-webhook``, the fast rates once more with
the fast dispatcher and its recipient (aldebaran_capacity.bench.fast_delivery). :func:`combine` keeps the median
run whole (by p99: its series and box samples draw the plot and the table's box lines) and replaces the figures
with their medians over the runs, each run's own figures in ``per_run``. Pure: unit-tested without services.
"""

from __future__ import annotations

import statistics

#: The lane's own figures per run (``per_run[]``) and the fast dispatcher's (from the run's fast segment).
RUN_KEYS = ("p50_ms", "p99_ms", "floor_p99_ms", "other_cores", "quiet")
FAST_KEYS = ("fast_delivery_p50_ms", "fast_delivery_p99_ms", "fast_deliveries_eps", "fast_delivered",
             "fast_expected")
COUNTS = ("events", "alerts", "expected_alerts", "missing", "extra", "duplicates")


def median(values) -> float | None:
    """The median of the values that are there (None: none are)."""
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 1) if got else None


def spread(values) -> list[float] | None:
    """[min, max] of the values that are there (None: none are)."""
    got = [v for v in values if v is not None]
    return [min(got), max(got)] if got else None


def fast_part(lane_seg: dict, fast_seg: dict | None) -> dict:
    """What one run's fast segment (the same rate again, the fast dispatcher beside the lane) adds to its lane
    segment: trade → recipient, and the lane's figures meanwhile (``with_fast``)."""
    if fast_seg is None:
        return {}
    return {"fast_delivered": fast_seg["fast_delivered"], "fast_expected": fast_seg["expected_alerts"],
            "fast_delivery_p50_ms": fast_seg["fast_delivery_p50_ms"],
            "fast_delivery_p99_ms": fast_seg["fast_delivery_p99_ms"],
            "fast_deliveries_eps": fast_seg.get("fast_deliveries_eps"),
            "with_fast": {k: fast_seg.get(k) for k in ("p50_ms", "p99_ms", "floor_p99_ms", "lane_cores",
                                                       "other_cores", "quiet", "box", "series")}}


def combine(rate: int, lane_runs: list[dict], fast_runs: list[dict] | None = None) -> dict:
    """One row of ``low_latency.segments[]`` from a rate's runs (`fast_runs`, if given, pairs with them by run)."""
    if not lane_runs:
        raise ValueError(f"no segment measured at {rate} events/s")
    fast_runs = list(fast_runs or [])
    runs = [{**seg, **fast_part(seg, fast_runs[i] if i < len(fast_runs) else None)}
            for i, seg in enumerate(lane_runs)]
    by_p99 = sorted(runs, key=lambda s: float("inf") if s.get("p99_ms") is None else s["p99_ms"])
    out = dict(by_p99[(len(by_p99) - 1) // 2])  # the median run (the lower one of an even count), whole
    p99, floor_p99 = median(s.get("p99_ms") for s in runs), median(s.get("floor_p99_ms") for s in runs)
    out.update({
        "rate": rate, "runs": len(runs),
        "p50_ms": median(s.get("p50_ms") for s in runs), "p95_ms": median(s.get("p95_ms") for s in runs),
        "p99_ms": p99, "p99_spread_ms": spread([s.get("p99_ms") for s in runs]),
        "max_ms": max((s["max_ms"] for s in runs if s.get("max_ms") is not None), default=None),
        "floor_p50_ms": median(s.get("floor_p50_ms") for s in runs), "floor_p99_ms": floor_p99,
        "p99_to_floor": round(p99 / floor_p99, 2) if p99 is not None and floor_p99 else None,
        "achieved_rate": median(s.get("achieved_rate") for s in runs),
        "agreement": min(s["agreement"] for s in runs),
        "lane_cores": median(s.get("lane_cores") for s in runs),
        # a run where other work took more than 0.2 core is flagged: the worst run speaks for the row
        "other_cores": max((s["other_cores"] for s in runs if s.get("other_cores") is not None), default=None),
        "quiet": all(s.get("quiet") is not False for s in runs),
        **{k: sum(s.get(k) or 0 for s in runs) for k in COUNTS},
        "per_run": [{k: s.get(k) for k in (*RUN_KEYS, *FAST_KEYS) if k in s} for s in runs],
    })
    if fast_runs:
        out.update({
            "fast_delivered": sum(s.get("fast_delivered") or 0 for s in runs),
            "fast_expected": sum(s.get("fast_expected") or 0 for s in runs),
            "fast_delivery_p50_ms": median(s.get("fast_delivery_p50_ms") for s in runs),
            "fast_delivery_p99_ms": median(s.get("fast_delivery_p99_ms") for s in runs),
            "fast_delivery_p99_spread_ms": spread([s.get("fast_delivery_p99_ms") for s in runs]),
            "fast_deliveries_eps": median(s.get("fast_deliveries_eps") for s in runs),
        })
    return out
