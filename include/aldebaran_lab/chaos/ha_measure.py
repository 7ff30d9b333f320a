"""The pure parts of `aldebaran chaos ha` (aldebaran_lab.chaos.ha): a fault's window, the gaps and the
latency measured inside it, the targets, and the `ha` entry of docs/img/reliability-results.json.
No processes, no I/O but the JSON file (tests/unit/test_chaos_ha.py)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from aldebaran_capacity.bench.e2e import latency_ms
from aldebaran_lab.chaos.common import longest_pause

# The failover target (BRIEF § 4): for every single failure nothing lost, nothing duplicated, processing
# stops ≤ 10 s.
TARGET_GAP_S = 10.0


@dataclass
class Fault:
    """One injected failure. `start`: the kill (epoch s); `end`: the end of its measured window (the member
    healthy again, plus a settling time); `restored_s`: kill → the member (or its replacement) healthy."""

    component: str  # the name: "kafka broker (controller)", "minio node", "auditor (active)", …
    member: str  # what was killed: "kafka-2", "minio-3", an auditor's or dispatcher's name
    start: float
    end: float = 0.0
    restored_s: float | None = None
    note: str = ""


def commit_times(samples: Iterable[tuple[float, int]]) -> list[float]:
    """From samples (time, batches committed so far) of the auditor's checkpoint: the times at which the
    count was first seen higher (a batch committed since the sample before). The first sample is a start
    point, not a commit; a count seen lower (a re-read of a checkpoint being rewritten) is ignored."""
    out: list[float] = []
    best: int | None = None
    for t, n in samples:
        if best is not None and n > best:
            out.append(t)
        best = n if best is None else max(best, n)
    return out


def _finite(x: float | None, digits: int = 1) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, digits)


def fault_figures(fault: Fault, commits: Iterable[float], received_at: Mapping[str, Mapping[str, float]],
                  trigger_ms: Mapping[str, int], missing: Mapping[str, Iterable[str]],
                  duplicated: Mapping[str, Iterable[str]]) -> dict:
    """One fault's entry: within [fault.start, fault.end] the longest stretch without a committed auditor
    batch (`batch_gap_s`) and without a receipt at each recipient (`delivery_gap_s`, the longest over them),
    `max_gap_s` the longer of the two (what the target bounds: nothing reaches a recipient while either
    stands); `p99_ms` trade → recipient (receipt − the trigger trade's Kafka timestamp) over the alerts
    whose trigger trade was produced inside the window, the worst recipient's; `lost`/`duplicated` the
    alerts of that window missing / duplicated at any recipient (per recipient in `by_recipient`).

    `received_at`: recipient → alert id → first receipt (epoch s); `trigger_ms`: alert id → its trigger
    trade's timestamp (epoch ms); `missing` / `duplicated`: recipient → alert ids."""
    lo, hi = fault.start, fault.end
    batch_gap, _ = longest_pause(commits, lo, hi)
    window = {a for a, ts in trigger_ms.items() if lo * 1000 <= ts <= hi * 1000}
    by_recipient = {}
    for name, at in received_at.items():
        lat = latency_ms({a: at[a] for a in window if a in at}, {a: trigger_ms[a] for a in window})
        by_recipient[name] = {
            "delivery_gap_s": longest_pause(at.values(), lo, hi)[0], "p99_ms": _finite(lat["p99_ms"], 0),
            "p50_ms": _finite(lat["p50_ms"], 0), "timed": lat["timed"],
            "lost": len(set(missing.get(name, ())) & window), "duplicated": len(set(duplicated.get(name, ())) & window),
        }
    delivery_gap = max((r["delivery_gap_s"] for r in by_recipient.values()), default=0.0)
    p99 = [r["p99_ms"] for r in by_recipient.values() if r["p99_ms"] is not None]
    return {
        "component": fault.component, "member": fault.member,
        "max_gap_s": round(max(batch_gap, delivery_gap), 1), "p99_ms": max(p99) if p99 else None,
        "lost": sum(r["lost"] for r in by_recipient.values()),
        "duplicated": sum(r["duplicated"] for r in by_recipient.values()),
        "batch_gap_s": round(batch_gap, 1), "delivery_gap_s": round(delivery_gap, 1),
        "window_s": round(hi - lo, 1), "restored_s": _finite(fault.restored_s), "alerts_in_window": len(window),
        "by_recipient": by_recipient, **({"note": fault.note} if fault.note else {}),
    }


def misses(entry: Mapping) -> list[str]:
    """Which targets a fault's entry misses ([] = all met); an unmeasured gap (None) is a miss."""
    out = []
    if entry.get("lost"):
        out.append(f"{entry['lost']} lost")
    if entry.get("duplicated"):
        out.append(f"{entry['duplicated']} duplicated")
    gap = entry.get("max_gap_s")
    if gap is None or gap > TARGET_GAP_S:
        out.append(f"gap {gap} s > {TARGET_GAP_S:.0f} s")
    return out


def row(entry: Mapping, runs: int) -> dict:
    """The entry as a row of the campaign's table in docs/reliability.md (common.markdown's columns; the
    gaps and the p99 go in its last column)."""
    p99 = "–" if entry["p99_ms"] is None else f"{entry['p99_ms']:,.0f} ms"
    missed = misses(entry)
    return {"scenario": f"SIGKILL {entry['component']} (`{entry['member']}`)", "runs": runs, "faults": 1,
            "lost": entry["lost"], "duplicated": entry["duplicated"],
            "recovery": f"max gap **{entry['max_gap_s']} s** (batches {entry['batch_gap_s']} s, deliveries "
                        f"{entry['delivery_gap_s']} s); p99 trade → recipient {p99}; member back after "
                        f"{entry['restored_s']} s; target {'met' if not missed else 'missed: ' + ', '.join(missed)}"}


def section(faults: list[dict], **about) -> dict:
    """The `ha` value of reliability-results.json: ``faults`` (each {component, max_gap_s, p99_ms, lost,
    duplicated} and the measurement's details) and what the run was (``about``: command, rate, load…)."""
    short = [{k: f[k] for k in ("component", "max_gap_s", "p99_ms", "lost", "duplicated")} |
             {k: f[k] for k in ("member", "batch_gap_s", "delivery_gap_s", "restored_s", "window_s",
                                "alerts_in_window") if k in f} for f in faults]
    return {**about, "targets": {"lost": 0, "duplicated": 0, "max_gap_s": TARGET_GAP_S},
            "met": all(not misses(f) for f in faults) and bool(faults), "faults": short}


def write_results(ha: dict, path: Path) -> Path:
    """Set the `ha` key of the JSON at `path` (created if absent), keeping every other key."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data["ha"] = ha
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path
