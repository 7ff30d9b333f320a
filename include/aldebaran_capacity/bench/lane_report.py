"""The low-latency lane's figures in docs: its section of docs/benchmarks.md, the ``low_latency`` key of
docs/img/bench-results.json and the latency-over-time plot (docs/img/bench-low-latency.png).

Two writers share the key: ``aldebaran bench low-latency --report`` (the lane as shipped: ``segments``,
``warmup``, ``agreement``, …) and ``aldebaran bench lane-tuning --report`` (``tuning``); each keeps what the
other wrote.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

BEGIN, END = "<!-- low-latency:begin -->", "<!-- low-latency:end -->"
TUNING_BEGIN, TUNING_END = "<!-- lane-tuning:begin -->", "<!-- lane-tuning:end -->"
PLOT = "bench-low-latency.png"
# Targets on this box with only the core services (BRIEF §4): p99 ≤ 250 ms and ≤ 2× the same run's floor at
# 10k events/s; p50 ≤ 50 ms at 1k.
P99_TARGET_MS, FLOOR_RATIO_TARGET, P50_TARGET_MS = 250, 2.0, 50
# Issue 38: trade → fast recipient p99 ≤ 300 ms at 10k events/s, and ≤ the lane's own p99 + 100 ms at 1k.
FAST_P99_TARGET_MS, FAST_OVER_LANE_MS = 300, 100


def _slim(segment: dict | None) -> dict | None:
    return None if segment is None else {k: v for k, v in segment.items() if k not in ("series", "box")}


def summary(result: dict) -> dict:
    """The run without its per-second series and box samples (what the command prints)."""
    ll = dict(result["low_latency"])
    ll["segments"] = [_slim(s) for s in ll["segments"]]
    for s in ll["segments"]:
        if s.get("with_fast"):
            s["with_fast"] = _slim(s["with_fast"])
    ll["warmup"] = _slim(ll.get("warmup"))
    return {**{k: v for k, v in result.items() if k != "low_latency"}, "low_latency": ll}


def targets(segments: list[dict]) -> list[str]:
    """One line per target: met or missed, with its figure."""
    out = []
    by_rate = {s["rate"]: s for s in segments}
    s10 = by_rate.get(10_000)
    if s10 and s10["p99_ms"] is not None:
        ratio = s10.get("p99_to_floor")
        ok = s10["p99_ms"] <= P99_TARGET_MS and ratio is not None and ratio <= FLOOR_RATIO_TARGET
        out.append(f"- 10k events/s: p99 {s10['p99_ms']:,} ms (target ≤ {P99_TARGET_MS}), {ratio}× the same run's "
                   f"floor p99 of {s10['floor_p99_ms']} ms (target ≤ {FLOOR_RATIO_TARGET:g}×): "
                   f"**{'met' if ok else 'missed'}**")
    s1 = by_rate.get(1_000)
    if s1 and s1["p50_ms"] is not None:
        ok = s1["p50_ms"] <= P50_TARGET_MS
        out.append(f"- 1k events/s: p50 {s1['p50_ms']:,} ms (target ≤ {P50_TARGET_MS}): **{'met' if ok else 'missed'}**")
    if s10 and s10.get("fast_delivery_p99_ms") is not None:
        ok = s10["fast_delivery_p99_ms"] <= FAST_P99_TARGET_MS
        out.append(f"- 10k events/s: trade → fast recipient p99 {_fmt(s10['fast_delivery_p99_ms'])} ms "
                   f"({_spread(s10.get('fast_delivery_p99_spread_ms'))}; target ≤ {FAST_P99_TARGET_MS}): "
                   f"**{'met' if ok else 'missed'}**")
    if s1 and s1.get("fast_delivery_p99_ms") is not None and s1.get("p99_ms") is not None:
        ok = s1["fast_delivery_p99_ms"] <= s1["p99_ms"] + FAST_OVER_LANE_MS
        out.append(f"- 1k events/s: trade → fast recipient p99 {_fmt(s1['fast_delivery_p99_ms'])} ms "
                   f"({_spread(s1.get('fast_delivery_p99_spread_ms'))}; target ≤ the lane's p99 {_fmt(s1['p99_ms'])} "
                   f"+ {FAST_OVER_LANE_MS}): **{'met' if ok else 'missed'}**")
    return out


def _spread(values) -> str:
    """A p99 spread as "runs a–b ms" (or "one run")."""
    if not values or values[0] == values[-1]:
        return "one run" if not values else f"runs {_fmt(values[0])} ms"
    return f"runs {_fmt(values[0])}–{_fmt(values[-1])} ms"


def _fmt(v, digits: int = 0) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}" if isinstance(v, (int, float)) else str(v)


def _fast(s: dict) -> str:
    if s.get("fast_delivered") is None:
        return "—"
    meanwhile = (s.get("with_fast") or {}).get("p99_ms")
    return (f"{_fmt(s['fast_delivery_p50_ms'], 1)} / {_fmt(s['fast_delivery_p99_ms'], 1)} "
            f"({_spread(s.get('fast_delivery_p99_spread_ms'))}; the lane's p99 meanwhile {_fmt(meanwhile)}; "
            f"{s['fast_delivered']:,}"
            + (f" of {s['fast_expected']:,}" if s.get("fast_expected") is not None else "") + " delivered"
            + (f", {_fmt(s['fast_deliveries_eps'])}/s" if s.get("fast_deliveries_eps") is not None else "") + ")")


def _runs(spread) -> str:
    return f" ({_fmt(spread[0])}–{_fmt(spread[1])})" if spread and spread[0] != spread[1] else ""


def render(result: dict, plot: str | None) -> str:
    """The section of docs/benchmarks.md for one run."""
    ll, m = result["low_latency"], result["machine"]
    lines = [BEGIN, "## Low-latency lane: trade → alert in real-time mode", "",
             f"`{result['command']}` — {m['date']}, {m['cores']} cores, load average {m['load_avg_at_start']:.1f} "
             f"at start; {ll['runtime']}, {ll['mode']}, `{ll['master']}`; trades paced by the Java client "
             "(bench/paced.py); the floor is the same trades read back by a plain Java consumer in the same run "
             "(bench/floor.py). How the lane works and how it is measured: docs/design.md, \"The low-latency "
             "lane\"; `aldebaran_capacity.bench.low_latency`.", ""]
    lines += targets(ll["segments"]) + [""]
    runs = ll.get("runs") or 1
    if runs > 1:
        lines += [f"Each row is the median of {runs} runs (every rate once per run, interleaved), the p99s' spread "
                  "beside it; counts are summed over the runs; the box lines are the median run's.", ""]
    lines += ["| rate (events/s) | runs | achieved | alerts | p50 ms | p95 ms | p99 ms (runs) | max ms | floor p50 / p99 ms "
              "| p99 ÷ floor | trade → fast recipient p50 / p99 ms | agreement | lane CPU (cores) "
              "| other processes (cores, the worst run) | quiet |",
              "|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---|---:|---:|---:|---|"]
    rows = ([("warm-up (left out)", ll["warmup"])] if ll.get("warmup") else []) + [(None, s) for s in ll["segments"]]
    for label, s in rows:
        rate = label or f"{s['rate']:,}"
        if label:
            rate = f"{s['rate']:,} — {label}"
        lines.append(
            f"| {rate} | {s.get('runs', 1)} | {_fmt(s['achieved_rate'])} | {s['alerts']:,} | {_fmt(s['p50_ms'])} | "
            f"{_fmt(s['p95_ms'])} | {_fmt(s['p99_ms'])}{_runs(s.get('p99_spread_ms'))} | {_fmt(s['max_ms'])} | {_fmt(s['floor_p50_ms'], 1)} / {_fmt(s['floor_p99_ms'], 1)} | "
            f"{_fmt(s['p99_to_floor'], 2)} | {_fast(s)} | "
            f"{s['agreement']:.4f} | {_fmt(s['lane_cores'], 2)} | {_fmt(s['other_cores'], 2)} | "
            f"{'yes' if s['quiet'] else '**no**'} |")
    agreement = ll.get("agreement")
    if isinstance(agreement, dict):
        lines += ["", f"Against the exact lane (the micro-batch auditor over the same trades afterwards, "
                      f"{agreement['exact_seconds']} s): **{agreement['confirmed']:,} confirmed, "
                      f"{agreement['unconfirmed']} unconfirmed, {agreement['missed']} missed** "
                      f"({agreement['fast_alerts']:,} fast-lane alerts, {agreement['exact_overfills']:,} exact-lane "
                      f"OVERFILLs of {agreement['exact_alerts']:,} exact-lane alerts)."]
    lines += ["", f"The lane started in {ll.get('started_seconds')} s (submit to its first alert) and used "
                  f"{ll.get('idle_cores')} cores idle. The box per segment (bench/boxstate.py, mean cores by role): "]
    for s in ([{**ll["warmup"], "label": " (warm-up)"}] if ll.get("warmup") else []) + ll["segments"]:
        box = s.get("box") or {}
        roles = ", ".join(f"{k} {v:.2f}" for k, v in sorted((box.get("cores_by_role") or {}).items(), key=lambda x: -x[1]))
        gc = s.get("gc") or {}
        lines.append(f"- {s['rate']:,}/s{s.get('label', '')}: load {box.get('load1_mean')} (max {box.get('load1_max')}), run queue max "
                     f"{box.get('run_queue_max')}, steal {box.get('steal_cores_mean')} cores; {roles}; the lane JVM's "
                     f"GC pauses {gc.get('count')}, {gc.get('total_ms')} ms in all, the longest {gc.get('max_ms')} ms")
    if plot:
        lines += ["", f"![lane and floor latency per second]({plot})"]
    lines += ["", END]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> bool:
    """p50 and p99 per second of each segment (warm-up first), the lane against its floor (log scale)."""
    from aldebaran_capacity.bench.plots import segment_panels

    ll = result["low_latency"]
    segments = ([ll["warmup"]] if ll.get("warmup") else []) + ll["segments"]

    def draw(ax, s: dict) -> None:
        for name, style in (("lane", "-"), ("floor", ":")):
            rows = s["series"][name]
            for col, q in ((3, "p99"), (2, "p50")):
                ax.plot([r[0] for r in rows], [max(0.5, r[col] or 0.5) for r in rows], style,
                        label=f"{name} {q}", linewidth=1.2)

    def title(i: int, s: dict) -> str:
        return f"{s['rate']:,} events/s" + (" (warm-up)" if ll.get("warmup") and i == 0 else "")

    return segment_panels(segments, path, draw, title, "latency from the trade, ms")


def _merge_key(docs: Path, **values) -> Path:
    raw = docs / "img" / "bench-results.json"
    data = json.loads(raw.read_text()) if raw.exists() else {}
    data["low_latency"] = {**data.get("low_latency", {}), **values}
    raw.write_text(json.dumps(data, indent=1, default=str))
    return raw


def write_report(result: dict, docs: Path) -> None:
    """Splice the section into docs/benchmarks.md and the run into ``low_latency`` (its ``tuning`` kept)."""
    from aldebaran_capacity.bench import sections

    (docs / "img").mkdir(parents=True, exist_ok=True)
    has_plot = plot(result, docs / "img" / PLOT)
    doc = docs / "benchmarks.md"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    doc.write_text(sections.splice(text, render(result, f"img/{PLOT}" if has_plot else None), BEGIN, END))
    ll = result["low_latency"]
    keep = {k: v for k, v in ll.items() if k != "tuning"}
    raw = _merge_key(docs, **keep, command=result["command"], machine=result["machine"])
    log.info("low-latency: section written to %s, results to %s", doc, raw)


def _tuning_table(run: dict, rows: list[dict]) -> list[str]:
    rates = run["rates"]
    lines = [f"`{run['command']}` — {run['machine']['date']}, {run['machine']['cores']} cores, {run['minutes']} min.", "",
             "| variant | setting | " + " | ".join(f"{r:,}/s p50 ms | {r:,}/s p99 ms" for r in rates)
             + " | floor p99 ms (10k) | lane cores | lane / Kafka cores per rate | quiet runs |",
             "|---|---|" + "---:|---:|" * len(rates) + "---:|---:|---|---:|"]
    for v in rows:
        cells = []
        for r in rates:
            agg = v["by_rate"].get(str(r)) or {}
            cells.append(f"{_fmt(agg.get('p50_ms'))} ({', '.join(_fmt(x) for x in agg.get('p50_runs', []))})")
            cells.append(f"{_fmt(agg.get('p99_ms'))} ({', '.join(_fmt(x) for x in agg.get('p99_runs', []))})")
        lines.append(f"| {v['name']} | {v['setting']} | " + " | ".join(cells) +
                     f" | {_fmt(v.get('floor_p99_ms'), 1)} | {_fmt(v.get('lane_cores'), 2)} | {_per_rate(v, rates)} | "
                     f"{v['quiet_runs']}/{v['runs']} |")
    if run.get("failed"):
        lines += ["", "Did not run: " + "; ".join(f"{f['name']} (round {f['round']}): {f['error']}"
                                                  for f in run["failed"])]
    return lines


def _per_rate(variant: dict, rates) -> str:
    """`1,000/s: 0.41 / 0.12; ...` (older runs did not record it: –)."""
    by = variant.get("cores_by_rate") or {}
    return "; ".join(f"{r:,}/s: {_fmt(by[str(r)]['lane'], 2)} / {_fmt(by[str(r)]['kafka'], 2)}"
                     for r in rates if str(r) in by) or "–"


def render_tuning(runs: list[dict], rows: list[dict]) -> str:
    """Every tuning run's table (each setting's A/B rounds, interleaved) for docs/benchmarks.md."""
    lines = [TUNING_BEGIN, "## Low-latency lane: tuning, A/B interleaved", "",
             "Each round starts the lane once per variant, in a new order (so a change of the box hits every variant "
             "alike), warms it up (left out) and measures each rate; a cell is the median over the rounds, with every "
             "round's figure after it. A variant differs from that run's baseline in the one setting named. "
             "`aldebaran_capacity.bench.lane_tuning`; the reading is in docs/design.md, \"The low-latency lane\"."]
    for i, run in enumerate(runs):
        lines += ["", f"### Run {i + 1}", ""] + _tuning_table(run, [r for r in rows if r.get("run", 0) == i])
    lines += ["", TUNING_END]
    return "\n".join(lines)


def write_tuning(result: dict, docs: Path, append: bool = False) -> None:
    """The run's rows into ``low_latency.tuning`` (each with its run's index) and its meta into
    ``low_latency.tuning_runs``; `append` keeps the earlier runs (another A/B of the same day), else replaces."""
    from aldebaran_capacity.bench import sections

    raw = docs / "img" / "bench-results.json"
    old = json.loads(raw.read_text()).get("low_latency", {}) if raw.exists() else {}
    runs = list(old.get("tuning_runs") or []) if append else []
    rows = list(old.get("tuning") or []) if append else []
    meta = {k: v for k, v in result["tuning"].items() if k not in ("variants", "raw")}
    runs.append({**meta, "command": result["command"], "machine": result["machine"]})
    rows += [{**v, "run": len(runs) - 1} for v in result["tuning"]["variants"]]
    doc = docs / "benchmarks.md"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    doc.write_text(sections.splice(text, render_tuning(runs, rows), TUNING_BEGIN, TUNING_END))
    _merge_key(docs, tuning=rows, tuning_runs=runs)
    log.info("lane-tuning: section written to %s, results to %s", doc, raw)
