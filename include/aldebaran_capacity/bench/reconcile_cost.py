"""What the lane keeper's reconciliation costs per alert once it has run a while: the shipped
:class:`aldebaran.lanes.judge.Reconciliation` (time-ordered, judging costs what it decides) against
:class:`Scanning`, the design it replaced (each step scanned every pending and remembered id), same run,
interleaved.

    aldebaran bench reconcile-cost [--rates 1000,5000] [--repeats 3] [--report]

Why it matters: the keeper steps about 5 times a second, and the reconciliation remembers every judged id for
4 × the confirmation TTL (300 s by default: 20 minutes of alerts). A scan per step grows with the rate times
that window, so a keeper beside a busy lane took CPU the exact lane needed (both lanes on a 2-core box).

Method, per rate R and variant: the state is first filled with a steady history (R alerts/s confirmed by
both lanes over the retention window, and the alerts of the last TTL still pending), then the measured
window feeds R alerts/s on both topics (the exact copy 2 s after the fast one) in 0.2 s steps, each step
ending with ``caught_up`` and ``judge`` as the keeper does. CPU time (``process_time``) of the measured
window ÷ its messages = CPU-µs per message; × 2R = the cores at that rate. The decode of a message
(:meth:`aldebaran.model.Alert.from_json`, what the reconciler does to each) is timed apart. Pure CPU in one
process: run it on a quiet box; the box's load average is recorded.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time

from aldebaran.lanes.judge import Reconciliation, Verdicts

STEP_MS = 200  # the keeper's consume timeout: one step per 0.2 s when messages keep coming
EXACT_DELAY_MS = 2_000  # the exact copy of an alert arrives this long after the fast one
DEFAULT_RATES = (1000, 5000)
BEGIN, END = "<!-- reconcile-cost:begin -->", "<!-- reconcile-cost:end -->"


class Scanning(Reconciliation):
    """The reconciliation's judge before time order (kept for this A/B only): every step scans all pending
    and remembered ids. Its arrivals still push to the shipped class's heaps, which it clears each step
    (that costs it well under a µs per alert)."""

    def judge(self) -> Verdicts:
        out = Verdicts()
        for alert_id, ts in list(self.pending_fast.items()):
            if self.exact_horizon >= ts + self.ttl_ms:
                del self.pending_fast[alert_id]
                self.unconfirmed[alert_id] = ts
                self.counts.unconfirmed += 1
                out.unconfirmed.append(alert_id)
        for alert_id, ts in list(self.pending_exact.items()):
            if self.fast_horizon >= ts + self.ttl_ms:
                del self.pending_exact[alert_id]
                self.counts.missed += 1
                self.done[alert_id] = ts
                out.missed.append(alert_id)
        oldest = min(self.fast_horizon, self.exact_horizon) - self.retain_ms
        for alert_id in [a for a, ts in self.done.items() if ts < oldest]:
            del self.done[alert_id]
        self._fast_order.clear(), self._exact_order.clear(), self._done_order.clear()
        return out

    def oldest_pending(self) -> tuple[int | None, int | None]:
        return min(self.pending_fast.values(), default=None), min(self.pending_exact.values(), default=None)


VARIANTS = {"time-ordered": Reconciliation, "scanning": Scanning}


def _filled(cls, rate: int, ttl_ms: int, now_ms: int) -> Reconciliation:
    """A reconciliation as a keeper leaves it after a long steady run at `rate` alerts/s, at `now_ms`."""
    r = cls(ttl_ms)
    every = 1000 / rate
    n = int(r.retain_ms * rate / 1000)
    for i in range(n):
        ts = now_ms - r.retain_ms + int(i * every)
        r.fast(f"h-{i}", ts)
        if ts <= now_ms - EXACT_DELAY_MS:
            r.exact(f"h-{i}", "OVERFILL", ts + EXACT_DELAY_MS)
    r.caught_up(fast_at=now_ms, exact_at=now_ms)
    r.judge()
    return r


def measure(cls, rate: int, seconds: float, ttl_ms: int) -> dict:
    now = 10 ** 12
    r = _filled(cls, rate, ttl_ms, now)
    remembered = len(r.done)
    history, lag = int(r.retain_ms * rate / 1000), int(EXACT_DELAY_MS * rate / 1000)
    per_step = max(1, int(rate * STEP_MS / 1000))
    steps = int(seconds * 1000 / STEP_MS)
    messages = 0
    gc.collect()
    t0 = time.process_time()
    for step in range(steps):
        now += STEP_MS
        base = step * per_step
        for i in range(per_step):
            ts = now - STEP_MS + i * STEP_MS // per_step
            r.fast(f"m-{base + i}", ts)
            j = base + i - lag  # the exact copy of the alert the fast lane raised 2 s ago
            r.exact(f"m-{j}" if j >= 0 else f"h-{history + j}", "OVERFILL", ts)
        messages += 2 * per_step
        r.caught_up(fast_at=now, exact_at=now)
        r.judge()
    cpu = time.process_time() - t0
    us = cpu / messages * 1e6
    return {"cpu_us_per_message": round(us, 2), "cores_at_rate": round(us * 2 * rate / 1e6, 4),
            "remembered_ids": remembered, "steps": steps, "messages": messages,
            "unconfirmed": r.counts.unconfirmed}


def decode_cost(n: int = 50_000) -> float:
    """CPU-µs to decode one alert message as the reconciler does (Alert.from_json)."""
    from aldebaran.model import Alert

    raw = json.dumps({"alert_id": "OVERFILL-ord-123456", "kind": "OVERFILL", "order_id": "ord-123456",
                      "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120,
                      "purchase_count": 2, "trigger_event_id": "p-2", "trigger_event_ts": 1764300000000,
                      "detected_at": 1764300000123}).encode()
    t0 = time.process_time()
    for _ in range(n):
        Alert.from_json(raw)
    return round((time.process_time() - t0) / n * 1e6, 2)


def run(rates=DEFAULT_RATES, repeats: int = 3, seconds: float = 20.0, ttl_seconds: float = 300.0) -> dict:
    ttl_ms = int(ttl_seconds * 1000)
    out = {"rates": list(rates), "repeats": repeats, "seconds": seconds, "ttl_seconds": ttl_seconds,
           "load1_at_start": round(os.getloadavg()[0], 2), "segments": []}
    for rate in rates:
        runs = {name: [] for name in VARIANTS}
        for k in range(repeats):
            order = list(VARIANTS) if k % 2 == 0 else list(VARIANTS)[::-1]  # interleaved, alternating first
            for name in order:
                m = measure(VARIANTS[name], rate, seconds, ttl_ms)
                runs[name].append(m)
                print(f"reconcile-cost: {rate}/s {name} run {k + 1}: {m['cpu_us_per_message']} µs/message "
                      f"({m['remembered_ids']} ids remembered)", file=sys.stderr, flush=True)
        seg = {"rate": rate}
        for name, ms in runs.items():
            us = [m["cpu_us_per_message"] for m in ms]
            seg[name] = {"cpu_us_per_message": statistics.median(us), "spread": [min(us), max(us)],
                         "cores_at_rate": round(statistics.median(us) * 2 * rate / 1e6, 4),
                         "remembered_ids": ms[0]["remembered_ids"]}
        seg["ratio"] = round(seg["scanning"]["cpu_us_per_message"] / seg["time-ordered"]["cpu_us_per_message"], 1)
        out["segments"].append(seg)
    out["decode_us_per_message"] = decode_cost()
    out["load1_at_end"] = round(os.getloadavg()[0], 2)
    return out


def render(result: dict) -> str:
    r = result["reconcile_cost"]
    lines = [BEGIN, "## The lane keeper's reconciliation: CPU per alert once it has run a while", "",
             f"`{result['command']}` — {result['machine']['date']}, load average {r['load1_at_start']} at start, "
             f"{r['load1_at_end']} at the end. TTL {r['ttl_seconds']:.0f} s (the shipped default), so the "
             "reconciliation remembers 4 × TTL of judged ids; each step reads 0.2 s of both topics. Medians of "
             f"{r['repeats']} interleaved runs of {r['seconds']:.0f} s simulated each (spread = min–max); "
             "`aldebaran_capacity.bench.reconcile_cost`.", "",
             "| alerts/s | ids remembered | time-ordered (shipped) µs/message | scanning (before) µs/message | "
             "ratio | cores at the rate, shipped / before |",
             "|---:|---:|---:|---:|---:|---|"]
    for s in r["segments"]:
        t, sc = s["time-ordered"], s["scanning"]
        lines.append(f"| {s['rate']:,} | {t['remembered_ids']:,} | {t['cpu_us_per_message']} "
                     f"({t['spread'][0]}–{t['spread'][1]}) | {sc['cpu_us_per_message']} "
                     f"({sc['spread'][0]}–{sc['spread'][1]}) | {s['ratio']}× | "
                     f"{t['cores_at_rate']} / {sc['cores_at_rate']} |")
    lines += ["", f"Decoding a message (`Alert.from_json`, which the reconciler does to each): "
              f"{r['decode_us_per_message']} µs. Both lanes' topics carry each alert, so a keeper reads 2 "
              "messages per alert.", "", END]
    return "\n".join(lines)


def main(args) -> int:
    from aldebaran.runtime import paths
    from aldebaran_capacity.bench import machine, sections

    rates = tuple(int(x) for x in args.rates.split(",")) if args.rates else DEFAULT_RATES
    result = {"machine": machine.describe(), "command": "aldebaran bench reconcile-cost " + " ".join(sys.argv[3:]),
              "reconcile_cost": run(rates, repeats=args.repeats, seconds=args.seconds)}
    print(render(result))
    if args.report:
        sections.write_report(paths.ROOT / "docs", "reconcile_cost", result, render(result), BEGIN, END)
    return 0
