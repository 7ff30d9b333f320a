"""The load of `aldebaran chaos ha` and the rate it is run at.

The campaign measures failovers, not a queue: it runs at the offered rate at which, with no fault, trade
→ alert p99 stays within ``P99_LIMIT_MS``. :func:`find_rate` finds that rate on the platform the
campaign has just started (same auditors, dispatchers, topics): it offers the rates of a ladder in turn,
``step_s`` each with fresh orders (a seed of their own), waits until the auditor has caught up, and
reads each step's trade → alert latency off the alerts topic; it stops at the first rate over the limit
(or that the producers cannot offer) and picks the highest rate within it.

A just-started auditor's first batches are not its steady state: on the profile (2026-11-30 09:29) the first
batch with trades took 22 s (15.9 s of it the executor opening its Kafka consumer), the next 8.5 s, and its
standby's first prefetch (110 s after its start) stalled the active for 7 s more. A ladder that began there
measured p50/p99 12.2/23.7 s at 250 trades/s. So :func:`warm_up` offers the first rung once, unmeasured by the
ladder but recorded apart (``rate_ladder.warm_up``), and the campaign waits for a prefetched standby before
the ladder starts.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from aldebaran.kafka import io as kio
from aldebaran_capacity.bench.harness import percentile
from aldebaran_lab.chaos.common import ChaosError, Workspace, caught_up, wait_for
from aldebaran_lab.chaos.under_load import EVENTS_PER_ORDER, ORDERS_PER_CHUNK, expected_keys

log = logging.getLogger(__name__)

LADDER = (250, 500, 1000, 2000, 4000, 8000)
P99_LIMIT_MS = 2000.0
STEP_WARMUP_S = 10.0  # the first seconds of a step are not measured (the rate settles)


def start_load(ws: Workspace, orders: int, seed: int, rate: float, producers: int) -> list[subprocess.Popen]:
    """under_load's producer processes (`python -m aldebaran_lab.chaos.under_load`), each a share of the mix.
    The mix is shared out by chunks of ORDERS_PER_CHUNK orders: no more producers than chunks (a producer
    without a chunk would leave its share of the rate unoffered)."""
    producers = max(1, min(producers, -(-orders // ORDERS_PER_CHUNK)))
    err = open(ws.logs / "producer.log", "ab")  # noqa: SIM115 - the children write it until they exit
    return [subprocess.Popen([sys.executable, "-m", "aldebaran_lab.chaos.under_load", "--orders", str(orders),
                              "--seed", str(seed), "--rate", str(rate / producers), "--part", f"{k}/{producers}"],
                             env=ws.env(), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
            for k in range(producers)]


def load_result(procs: list[subprocess.Popen], ws: Workspace) -> dict:
    outs = [(p, p.communicate()[0]) for p in procs]
    if bad := [p.returncode for p, _ in outs if p.returncode != 0]:
        raise ChaosError(f"producer(s) exited {bad}; see {ws.logs / 'producer.log'}")
    parts = [json.loads(out.decode().strip().splitlines()[-1]) for _, out in outs]
    count, seconds = sum(p["count"] for p in parts), max(p["seconds"] for p in parts)
    return {"sent": count, "elapsed_s": round(seconds, 1), "achieved_per_s": round(count / seconds)}


def expected_alerts(orders: int, seed: int, workers: int = 2) -> dict[str, tuple]:
    """under_load.expected_keys over the whole mix, its chunks shared by `workers` processes (~25 s per 20k
    orders and process on this machine under load: a full run's reference would take longer than the run)."""
    out: dict[str, tuple] = {}
    with ProcessPoolExecutor(workers) as pool:
        for part in pool.map(expected_keys, [orders] * workers, [seed] * workers,
                             [(k, workers) for k in range(workers)]):
            if twice := out.keys() & part.keys():
                raise ChaosError(f"the reference expects alerts {sorted(twice)[:3]} twice")
            out |= part
    return out


def read_alerts(ws: Workspace, timeout: float = 300.0) -> tuple[dict[str, dict], dict[str, tuple[int, float]], int]:
    """The alerts topic: (alert id → its first copy, alert id → (partition, when it reached the topic, epoch
    s), copies read). The topic is at-least-once: a repeat after a failover keeps the first copy's time."""
    seen: dict[str, dict] = {}
    where: dict[str, tuple[int, float]] = {}
    raw = 0
    for m in kio.read_topic(ws.kafka, ws.kafka.alerts_topic, timeout=timeout):
        a = json.loads(m.value())
        raw += 1
        if a["alert_id"] not in seen:
            seen[a["alert_id"]] = a
            where[a["alert_id"]] = (m.partition(), m.timestamp()[1] / 1000)
    return seen, where, raw


def trade_to_alert(seen: dict[str, dict], where: dict[str, tuple[int, float]]) -> list[tuple[float, float, float]]:
    """(trigger trade's time, epoch s; when the alert reached the topic, epoch s; trade → alert ms) per alert."""
    out = []
    for i, a in seen.items():
        trig = int(a["trigger_event_ts"]) / 1000
        out.append((trig, where[i][1], (where[i][1] - trig) * 1000))
    return out


def step(ws: Workspace, rate: float, step_s: float, seed: int, producers: int = 1,
         drain_timeout: float = 180.0) -> dict:
    """Offer `rate` for `step_s` with the seeded mix `seed`, wait until the auditor has caught up, and read
    trade → alert latency of the alerts whose trade came after the step's first STEP_WARMUP_S."""
    orders = max(1, int(rate * step_s) // EVENTS_PER_ORDER)
    t0 = time.time()
    trades = load_result(start_load(ws, orders, seed, rate, producers), ws)
    t1 = time.time()
    ends = kio.end_offsets(ws.kafka, ws.kafka.trades_topic)
    try:
        wait_for(lambda: caught_up(ws, ends), drain_timeout, 1.0, f"the auditor caught up after {rate}/s")
    except ChaosError:
        return {"rate": rate, "achieved": trades["achieved_per_s"], "p99_ms": None,
                "note": f"not caught up {drain_timeout:.0f} s after the step"}
    seen, where, _ = read_alerts(ws)
    lat = [ms for trig, _, ms in trade_to_alert(seen, where) if t0 + STEP_WARMUP_S <= trig <= t1]
    return {"rate": rate, "achieved": trades["achieved_per_s"], "alerts": len(lat),
            "p50_ms": round(percentile(lat, 50)) if lat else None,
            "p99_ms": round(percentile(lat, 99)) if lat else None}


def warm_up(ws: Workspace, rate: float, step_s: float = 40.0, seed: int = 1, producers: int = 1) -> dict:
    """The first rung offered once before the ladder (its own seed, `seed` × 1000 + 999, apart from the ladder's
    `seed` × 1000 + 1… and the campaign's `seed`): a fresh auditor's first batches. Its figures are recorded, not
    used to pick the rate."""
    out = step(ws, rate, step_s, seed * 1000 + 999, producers)
    log.info("chaos ha: warm-up at %s/s (not a rung): trade → alert p50 %s ms, p99 %s ms", rate,
             out.get("p50_ms"), out.get("p99_ms"))
    return out


def find_rate(ws: Workspace, rates=LADDER, step_s: float = 40.0, producers: int = 1, seed: int = 1,
              limit_ms: float = P99_LIMIT_MS, drain_timeout: float = 180.0) -> dict:
    """Offer each rate of `rates` (ascending) for `step_s`; {"rate": the highest whose trade → alert p99
    stayed ≤ `limit_ms` (the lowest tried if none did, with "met": False), "steps": each step's figures}."""
    steps = []
    for k, rate in enumerate(sorted(rates)):
        s = step(ws, rate, step_s, seed * 1000 + k + 1, producers, drain_timeout)
        steps.append(s)
        if s["p99_ms"] is None:
            break
        log.info("chaos ha: rate %s/s (achieved %s/s): trade → alert p50 %s ms, p99 %s ms over %d alerts", rate,
                 s["achieved"], s["p50_ms"], s["p99_ms"], s["alerts"])
        if s["p99_ms"] > limit_ms or s["achieved"] < 0.95 * rate:
            break
    good = [s["rate"] for s in steps if s.get("p99_ms") is not None and s["p99_ms"] <= limit_ms
            and s["achieved"] >= 0.95 * s["rate"]]
    return {"rate": max(good) if good else min(rates), "met": bool(good), "limit_ms": limit_ms,
            "step_s": step_s, "steps": steps}
