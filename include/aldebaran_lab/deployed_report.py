"""The deployed-path section of docs/benchmarks.md (it leads the document: it is the figure we publish),
its latency-over-time plot, and the ``deployed`` key of docs/img/bench-results.json."""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

BEGIN, END = "<!-- deployed:begin -->", "<!-- deployed:end -->"
PLOT = "bench-deployed.png"
# BRIEF §4, the deployed path: rate → (alert p99 limit ms, alert p50 limit ms)
TARGETS = {1000: (None, 500.0), 5000: (1000.0, None), 20000: (2000.0, None)}
RECIPIENT_SLACK_MS = 500.0  # trade → recipient p99 ≤ the alert's p99 + this, on log, webhook and bus (at 5k/s)


def _n(v, digits: int = 0) -> str:
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def targets(segments: list[dict]) -> list[str]:
    """One line per target: met or missed, with the figure."""
    lines = []
    by_rate = {s["rate"]: s for s in segments}
    for rate, (p99, p50) in TARGETS.items():
        s = by_rate.get(rate)
        if s is None:
            continue
        if p99 is not None:
            ok = s["alert_p99_ms"] is not None and s["alert_p99_ms"] <= p99
            lines.append(f"- trade → alert p99 ≤ {p99:,.0f} ms at {rate:,}/s: **{'met' if ok else 'missed'}** "
                         f"({_n(s['alert_p99_ms'])} ms)")
        if p50 is not None:
            ok = s["alert_p50_ms"] is not None and s["alert_p50_ms"] <= p50
            lines.append(f"- trade → alert p50 ≤ {p50:,.0f} ms at {rate:,}/s: **{'met' if ok else 'missed'}** "
                         f"({_n(s['alert_p50_ms'])} ms)")
    s = by_rate.get(5000)
    if s is not None and s["alert_p99_ms"] is not None:
        for name, c in s["channels"].items():
            ok = c["p99_ms"] is not None and c["p99_ms"] <= s["alert_p99_ms"] + RECIPIENT_SLACK_MS and \
                c["delivered"] >= c["expected"]
            lines.append(f"- trade → {name} p99 ≤ alert p99 + 500 ms at 5,000/s: **{'met' if ok else 'missed'}** "
                         f"({_n(c['p99_ms'])} vs {_n(s['alert_p99_ms'])} + 500 ms; {c['delivered']:,}/"
                         f"{c['expected']:,} delivered)")
    restarts = sum(sum(s["restarts"].values()) for s in segments)
    lines.append(f"- 0 supervisor restarts under steady load: **{'met' if restarts == 0 else 'missed'}** "
                 f"({restarts})")
    return lines


def render(result: dict, plot: str | None) -> str:
    d, m = result["deployed"], result["machine"]
    lines = [BEGIN, "## The deployed path: trade → alert → recipients (the figure we publish)", "",
             f"`{result['command']}` — {m['date']}, {m['cores']} cores, {m['memory_gib']} GiB; load average "
             f"{m['load_avg_at_start']:.2f} at start. The platform as `make demo` leaves it: Airflow supervising the "
             f"auditor (s3a checkpoint in MinIO) and the streaming dispatchers; channels log, webhook (a receiver "
             f"process) and bus (a Kafka topic), configured through Airflow. Producer: {d['producer']}; {d['order']}; "
             f"{d['seconds']:g} s per rate after an unreported warm-up. Latency = seen − the trade's Kafka timestamp, "
             "same clock (`aldebaran_lab.deployed`).", "",
             "| rate (events/s) | achieved | alerts | trade → alert p50 / p99 ms | log p50 / p99 ms (delivered) "
             "| webhook p50 / p99 ms (delivered) | bus p50 / p99 ms (delivered) | restarts | box: load, other cores, quiet |",
             "|---:|---:|---:|---|---|---|---|---|---|"]
    for s in d["segments"]:
        ch = s["channels"]
        cells = [f"{_n(ch[c]['p50_ms'])} / {_n(ch[c]['p99_ms'])} ({ch[c]['delivered']:,}/{ch[c]['expected']:,})"
                 for c in ("log", "webhook", "bus")]
        box = s.get("box") or {}
        quiet = {True: "yes", False: "**no**", None: "–"}[box.get("quiet")]
        lines.append(f"| {s['rate']:,} | {_n(s['achieved_eps'])} | {s['alerts']:,} | {_n(s['alert_p50_ms'])} / "
                     f"{_n(s['alert_p99_ms'])} | {' | '.join(cells)} | {sum(s['restarts'].values())} | "
                     f"{box.get('load1_mean', '–')}, {box.get('other_cores_mean', '–')}, {quiet} |")
    lines += ["", "**Targets** (BRIEF §4):", *targets(d["segments"]), "",
              "Where the time goes (medians, ms): trade → the book step (`detected_at`), → produced to `alerts`, → "
              "seen by a consumer; `alerts` → each recipient; and the auditor's batches during the segment "
              "(from its heartbeat).", "",
              "| rate | trade→detected | detected→produced | produced→seen | alerts→log | alerts→webhook | alerts→bus "
              "| batch | batch trigger | parse+shards | alerts produce | archive |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in d["segments"]:
        st = s["stages_ms"]
        keys = ("trade_to_detected", "detected_to_produced", "produced_to_seen", "alert_to_log", "alert_to_webhook",
                "alert_to_bus", "batch_p50", "batch_trigger_p50", "batch_parse_shards_p50", "batch_alerts_p50",
                "batch_archive_p50")
        lines.append(f"| {s['rate']:,} | " + " | ".join(_n(st.get(k)) for k in keys) + " |")
    if plot:
        lines += ["", f"![deployed path: p99 per second of trade time]({plot})"]
    lines += ["", END]
    return "\n".join(lines)


def plot(segments: list[dict], path: Path) -> bool:
    """p99 per second of trade time, one panel per rate: the alert and each channel (log scale)."""
    from aldebaran_capacity.bench.plots import segment_panels

    def draw(ax, s: dict) -> None:
        for name, series in s["timeline"].items():
            if series:
                ax.plot([x for x, _ in series], [max(1.0, y) for _, y in series], label=name, linewidth=1.2)

    return segment_panels(segments, path, draw, lambda _i, s: f"{s['rate']:,} events/s",
                          "p99 latency from the trade, ms")


def splice_first(existing: str, section: str) -> str:
    """Replace the section between its markers; absent, put it first, after the title and its line."""
    if BEGIN in existing and END in existing:
        head, rest = existing.split(BEGIN, 1)
        return head + section + rest.split(END, 1)[1]
    lines = existing.split("\n")
    cut = next((i for i, line in enumerate(lines) if line.startswith("<!--") or line.startswith("## ")), len(lines))
    return "\n".join(lines[:cut]).rstrip("\n") + "\n\n" + section + "\n\n" + "\n".join(lines[cut:])


def write(result: dict, docs: Path) -> None:
    img = docs / "img"
    img.mkdir(parents=True, exist_ok=True)
    has_plot = plot(result["deployed"]["segments"], img / PLOT)
    doc = docs / "benchmarks.md"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n\nFigures from `make bench`; each section names its command.\n"
    doc.write_text(splice_first(text, render(result, f"img/{PLOT}" if has_plot else None)))
    raw = img / "bench-results.json"
    data = json.loads(raw.read_text()) if raw.exists() else {}
    data["deployed"] = {**result["deployed"], "command": result["command"], "machine": result["machine"]}
    raw.write_text(json.dumps(data, indent=1, default=str))
    log.info("deployed: section written to %s, results to %s", doc, raw)
