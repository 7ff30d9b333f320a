"""The pure parts of `aldebaran chaos ha` (aldebaran_lab.chaos.ha): a fault's window, the gaps and the
latency measured inside it, its three phases, the targets, and the `ha` entry of
docs/img/reliability-results.json. No processes, no I/O but the JSON file (tests/unit/aldebaran_lab/chaos/test_chaos_ha.py).

A fault's phases, each measured on its own:

- **detection**: the kill → the platform noticed it (`detected`, from the component's probe, see
  aldebaran_lab.chaos.ha_probes; the kill itself for a member nothing on the data path waits for);
- **takeover**: noticed → the first output of every path the kill stopped. The paths are the auditor's
  batch commits and each recipient's receipts per alerts-topic partition (a dispatcher owns partitions, a
  broker leads some): the takeover ends when the last of them, among those that were producing before
  the kill, produced again;
- **catch-up**: the takeover's end → trade → alert latency back to the baseline's p99: the first of
  ``CATCH_UP_RUN`` consecutive seconds of alerts (by the time they reached the alerts topic) whose p99
  is within it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from aldebaran_capacity.bench.e2e import latency_ms
from aldebaran_capacity.bench.harness import percentile
from aldebaran_lab.chaos.common import longest_pause

# The failover target (BRIEF § 4): for every single failure nothing lost, nothing duplicated, detection +
# takeover ≤ 10 s.
TARGET_GAP_S = 10.0
CATCH_UP_RUN = 3  # seconds in a row within the baseline's p99 that end a catch-up
LOOKBACK_S = 10.0  # a path counts as producing before a kill if it produced this long before it


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
    detected: float | None = None  # when the platform noticed the kill (epoch s); None: never seen


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


def takeover_end(paths: Mapping[str, Iterable[float]], lo: float, at: float, hi: float) -> tuple[float | None, str]:
    """When every path that produced in [lo, at] had produced again after `at` (epoch s, ≤ hi), and the
    path that was last; (None, path) when one never did within the window."""
    last, which = at, ""
    for name, times in paths.items():
        ts = sorted(times)
        if not any(lo <= t <= at for t in ts):
            continue  # idle before the kill: nothing of it to resume
        nxt = next((t for t in ts if at < t <= hi), None)
        if nxt is None:
            return None, name
        if nxt > last:
            last, which = nxt, name
    return last, which


def catch_up_end(latency: Iterable[tuple[float, float]], since: float, hi: float, p99_ms: float,
                 run: int = CATCH_UP_RUN) -> float | None:
    """`latency`: (when the alert reached the alerts topic, epoch s; trade → alert ms). The start of the
    first of `run` consecutive whole seconds from `since` whose alerts' p99 is ≤ `p99_ms` (a second
    without an alert breaks the run); None if none within [since, hi]."""
    buckets: dict[int, list[float]] = {}
    for t, ms in latency:
        if since <= t <= hi:
            buckets.setdefault(int(t - since), []).append(ms)
    good = 0
    for k in range(int(hi - since) + 1):
        vals = buckets.get(k)
        good = good + 1 if vals and percentile(vals, 99) <= p99_ms else 0
        if good == run:
            return since + k - run + 1
    return None


def phases(fault: Fault, paths: Mapping[str, Iterable[float]], latency: Iterable[tuple[float, float]],
           baseline_p99_ms: float | None) -> dict:
    """The fault's detection, takeover and catch-up (seconds; None where not reached within its window)."""
    lo = fault.start - LOOKBACK_S
    detect = fault.detected
    end, last_path = (None, "") if detect is None else takeover_end(paths, lo, detect, fault.end)
    caught = None
    if end is not None and baseline_p99_ms is not None:
        caught = catch_up_end(latency, end, fault.end, baseline_p99_ms)
    return {"detect_s": _finite(None if detect is None else detect - fault.start),
            "takeover_s": _finite(None if end is None else end - detect), "takeover_path": last_path,
            "catch_up_s": _finite(None if caught is None else caught - end)}


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
    """Which targets a fault's entry misses ([] = all met): nothing lost or duplicated, detection +
    takeover ≤ TARGET_GAP_S (an unmeasured phase, None, is a miss). An entry without phases (older runs)
    is held to its max gap instead."""
    out = []
    if entry.get("lost"):
        out.append(f"{entry['lost']} lost")
    if entry.get("duplicated"):
        out.append(f"{entry['duplicated']} duplicated")
    if "detect_s" in entry:
        d, t = entry.get("detect_s"), entry.get("takeover_s")
        if d is None or t is None or d + t > TARGET_GAP_S:
            out.append(f"detection + takeover {d} + {t} s > {TARGET_GAP_S:.0f} s")
        return out
    gap = entry.get("max_gap_s")
    if gap is None or gap > TARGET_GAP_S:
        out.append(f"gap {gap} s > {TARGET_GAP_S:.0f} s")
    return out


def row(entry: Mapping, runs: int) -> dict:
    """The entry as a row of the campaign's table in docs/reliability.md (common.markdown's columns; the
    phases, the gaps and the p99 go in its last column)."""
    p99 = "–" if entry["p99_ms"] is None else f"{entry['p99_ms']:,.0f} ms"
    missed = misses(entry)
    phase = ""
    if "detect_s" in entry:
        phase = (f"detect **{entry['detect_s']} s**, takeover **{entry['takeover_s']} s** "
                 f"(last: {entry.get('takeover_path') or '–'}), catch-up {entry['catch_up_s']} s; ")
    return {"scenario": f"SIGKILL {entry['component']} (`{entry['member']}`)", "runs": runs, "faults": 1,
            "lost": entry["lost"], "duplicated": entry["duplicated"],
            "recovery": f"{phase}max gap {entry['max_gap_s']} s (batches {entry['batch_gap_s']} s, deliveries "
                        f"{entry['delivery_gap_s']} s); p99 trade → recipient {p99}; member back after "
                        f"{entry['restored_s']} s; target {'met' if not missed else 'missed: ' + ', '.join(missed)}"}


FAULT_KEYS = ("component", "detect_s", "takeover_s", "catch_up_s", "max_gap_s", "lost", "duplicated")
DETAIL_KEYS = ("member", "takeover_path", "p99_ms", "batch_gap_s", "delivery_gap_s", "restored_s", "window_s",
               "alerts_in_window", "note")


def section(faults: list[dict], offered_rate: float | None = None, baseline_p99_ms: float | None = None,
            **about) -> dict:
    """The `ha` value of reliability-results.json: ``offered_rate``, ``baseline_p99_ms``, ``faults`` (each
    FAULT_KEYS, then the measurement's details) and what the run was (``about``: command, load…)."""
    short = [{k: f.get(k) for k in FAULT_KEYS} | {k: f[k] for k in DETAIL_KEYS if k in f} for f in faults]
    return {"offered_rate": offered_rate, "baseline_p99_ms": baseline_p99_ms, **about,
            "targets": {"lost": 0, "duplicated": 0, "detect_plus_takeover_s": TARGET_GAP_S},
            "met": all(not misses(f) for f in faults) and bool(faults), "faults": short}


def write_results(ha: dict, path: Path) -> Path:
    """Set the `ha` key of the JSON at `path` (created if absent), keeping every other key."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data["ha"] = ha
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path
