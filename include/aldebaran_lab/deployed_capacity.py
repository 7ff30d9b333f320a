"""The deployed capacity (``deployed.capacity[]`` and ``deployed.capacity_eps.<mix>``): the highest offered rate
the running platform carries with exact trade → alert p99 ≤ 2 s and a flat backlog (BRIEF §4).

A ladder of offered rates (``--capacity-rates``, in the order given), ``--rung-seconds`` per rung, in two mixes:

- ``one-alert``: the deployed bench's producer — a request for 100 shares, then two purchases of 60: one
  OVERFILL per order (3 events per order);
- ``publisher``: the original publisher's mix (aldebaran_capacity.loadgen.original_mix: a request of 50–100
  shares, four purchases of ``int(limit / 2 * random())``; 5 events per order), with order ids prefixed
  per rung so the taps count each rung apart; its expected alerts come from the reference model
  (aldebaran.audit.reference), computed before the rung from the same seeded orders.

Each rung reads ``alerts`` with a TopicTap (latency = seen − the trade's Kafka timestamp) and waits up to
``--drain-seconds`` after the last trade for every expected alert. **The rule**: a rung passes when

1. the producer achieved ≥ 95 % of the offered rate (else the rate was never offered: not claimed);
2. every expected alert arrived within the drain window;
3. trade → alert p99 ≤ 2,000 ms;
4. the backlog is flat: the median latency of the alerts whose trades came in the rung's last third
   exceeds that of its first third by at most 1,000 ms (a queue that grows shows as a rising latency).

``backlog_growing`` is true when 2 or 4 fails. The ladder stops at the first rung that fails;
``capacity_eps.<mix>`` is the highest rate that passed (None if none did).
"""

from __future__ import annotations

import logging
import random
import statistics
import time
import uuid
from typing import Callable

from aldebaran_lab.deployed_mixes import (  # noqa: F401 - the mixes, re-exported for the ladder's callers
    EVENTS_PER_ORDER, MIXES, expected_ids, order_count, order_values, orders_of,
)

log = logging.getLogger(__name__)

DEFAULT_RATES = (5000, 10000, 20000, 30000, 40000, 60000, 80000)
P99_LIMIT_MS = 2000.0
GROWTH_LIMIT_MS = 1000.0
ACHIEVED_FRACTION = 0.95


# --- the mixes (also what the producer process sends) -------------------------------------------------------
# --- the rule (pure) -----------------------------------------------------------------------------------------
def backlog(points: list[tuple[float, float]], seconds: float, expected: int, delivered: int,
            limit_ms: float = GROWTH_LIMIT_MS) -> dict:
    """Whether the backlog grew during a rung: `points` = (trade time since the rung's start, s; latency, ms)
    per alert seen. Growing when an expected alert is missing after the drain, or when the median latency
    of the last third of the rung exceeds the first third's by more than `limit_ms`."""
    first = [lat for t, lat in points if t < seconds / 3]
    last = [lat for t, lat in points if t >= seconds * 2 / 3]
    out = {"first_third_p50_ms": round(statistics.median(first), 1) if first else None,
           "last_third_p50_ms": round(statistics.median(last), 1) if last else None}
    if delivered < expected:
        return {**out, "growing": True, "why": f"{expected - delivered:,} of {expected:,} expected alerts not "
                                                "seen within the drain window"}
    if first and last and out["last_third_p50_ms"] - out["first_third_p50_ms"] > limit_ms:
        return {**out, "growing": True, "why": f"median latency rose from {out['first_third_p50_ms']:,.0f} to "
                                               f"{out['last_third_p50_ms']:,.0f} ms over the rung"}
    return {**out, "growing": False, "why": "flat"}


def verdict(rung: dict, limit_ms: float = P99_LIMIT_MS) -> tuple[bool, str]:
    """(passed, why) for one measured rung (the module docstring's rule)."""
    achieved = rung.get("achieved_eps") or 0
    if achieved < ACHIEVED_FRACTION * rung["rate"]:
        return False, f"the producer achieved {achieved:,} events/s of {rung['rate']:,} offered"
    if rung.get("backlog_growing"):
        return False, f"backlog growing: {rung.get('backlog_why')}"
    p99 = rung.get("alert_p99_ms")
    if p99 is None or p99 > limit_ms:
        return False, f"trade → alert p99 {p99} ms > {limit_ms:,.0f} ms"
    return True, f"p99 {p99:,.0f} ms, flat"


def ladder(rates, measure: Callable[[int], dict], judge: Callable[[dict], tuple[bool, str]] = verdict) -> dict:
    """Measure each rate in turn (`measure(rate)` → the rung's figures) until the first rung that fails.
    Returns {"rungs": [... with "passed" and "why"], "capacity_eps": the highest rate that passed, or None}."""
    rungs, capacity = [], None
    for rate in rates:
        rung = dict(measure(rate))
        rung["passed"], rung["why"] = judge(rung)
        rungs.append(rung)
        if not rung["passed"]:
            break
        capacity = rate if capacity is None else max(capacity, rate)
    return {"rungs": rungs, "capacity_eps": capacity}


# --- a rung on the running platform -------------------------------------------------------------------------
def rung(ctx, mix: str, rate: int, seconds: float) -> dict:
    """One rung: `mix` at `rate` for `seconds` on the running platform, read on ``alerts``."""
    from aldebaran_capacity.bench.boxstate import BoxSampler
    from aldebaran_capacity.taps import TopicTap, percentile
    from aldebaran_lab.deployed_parts import Watcher, produce_in_process
    from aldebaran_lab.deployed_figures import timeline

    prefix = f"cap{uuid.uuid4().hex[:6]}{mix[0]}r{rate}"
    seed = random.randrange(2**31)
    orders = order_count(mix, rate, seconds)
    log.info("deployed: capacity %s %d/s: the reference model's alerts for %d orders", mix, rate, orders)
    want = expected_ids(mix, prefix, orders, seed)  # before the rung: the model's CPU stays out of it

    def keep(order_id) -> bool:
        return isinstance(order_id, str) and order_id.startswith(prefix + "-")

    tap, box, watcher = TopicTap(ctx.kafka, ctx.kafka.alerts_topic, keep), BoxSampler(), Watcher(ctx.query, [])
    for t in (tap, box, watcher):
        t.start()
    t0 = time.time() * 1000
    try:
        sent = produce_in_process(ctx.kafka, rate, seconds, prefix, mix, seed)
        box_state = box.stop()
        deadline = time.monotonic() + ctx.drain_s
        while time.monotonic() < deadline and len(tap.seen) < len(want):
            time.sleep(1.0)
    finally:
        tap.stop()
        watcher.stop()
    seen = dict(tap.seen)
    lat = [s.at_ms - s.trigger_ms for a, s in seen.items() if a in want and s.trigger_ms is not None]
    points = [((s.trigger_ms - t0) / 1000, s.at_ms - s.trigger_ms) for a, s in seen.items()
              if a in want and s.trigger_ms is not None]
    delivered = len(want & set(seen))
    growth = backlog(points, seconds, len(want), delivered)
    trig = {a: s.trigger_ms for a, s in seen.items() if s.trigger_ms is not None}
    return {"mix": mix, "rate": rate, "seconds": seconds,
            "achieved_eps": round(sent["events"] / sent["seconds"]) if sent.get("seconds") else None,
            "orders": sent["orders"], "expected": len(want), "delivered": delivered,
            "unexpected": len(set(seen) - want),
            "alert_p50_ms": _r(percentile(lat, 50)), "alert_p99_ms": _r(percentile(lat, 99)),
            "alert_max_ms": _r(max(lat) if lat else None),
            "backlog_growing": growth["growing"], "backlog_why": growth["why"],
            "first_third_p50_ms": growth["first_third_p50_ms"], "last_third_p50_ms": growth["last_third_p50_ms"],
            "restarts": watcher.restarts(), "box": box_state,
            "timeline": timeline(t0, trig, {"alert": {a: s.at_ms for a, s in seen.items()}})}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def run(ctx, rates, seconds: float, settle=None) -> tuple[list[dict], dict]:
    """Both mixes' ladders: (``capacity``: every rung of both, ``capacity_eps``: {mix: rate or None}).
    `settle()` runs after a ladder that failed a rung (its backlog must drain before the next measurement)."""
    rungs, capacity = [], {}
    for mix in MIXES:
        def measure(rate: int, mix: str = mix) -> dict:
            log.info("deployed: capacity %s: %d events/s for %.0f s", mix, rate, seconds)
            r = rung(ctx, mix, rate, seconds)
            log.info("deployed: capacity %s %d/s: achieved %s, alert p50/p99 %s/%s ms, %d/%d alerts, backlog %s",
                     mix, rate, r["achieved_eps"], r["alert_p50_ms"], r["alert_p99_ms"], r["delivered"],
                     r["expected"], r["backlog_why"])
            return r

        result = ladder(rates, measure)
        rungs += result["rungs"]
        capacity[mix] = result["capacity_eps"]
        log.info("deployed: capacity %s: %s events/s (%s)", mix, capacity[mix], result["rungs"][-1]["why"]
                 if result["rungs"] else "no rung")
        if settle is not None and result["rungs"] and not result["rungs"][-1]["passed"]:
            settle()
    return rungs, capacity
