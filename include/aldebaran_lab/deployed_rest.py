"""The platform at rest (``deployed.rest`` in docs/img/bench-results.json): the CPU of each of its roles over
``--rest-seconds`` with no load, as ``make demo`` leaves it (services, Airflow, the exact auditor, the log
dispatcher; with ``--with-lane`` once more with the lane switched on: ``deployed.with_lane.rest``).

Sampled with psutil (aldebaran_capacity.bench.boxstate.BoxSampler, every second, per process's CPU time)
and split by :func:`aldebaran_capacity.bench.boxstate.platform_role` (roles from the command lines the
platform's code starts). ``total_cores`` is the platform's roles only: not ``bench`` (this process and its
children) nor ``other`` (anything else on the box); ``other_cores`` above 0.2 core flags ``quiet: false``.
Keys: ``total_cores``, ``exact_auditor_cores`` (auditor JVM + auditor driver + spark python workers),
``roles.<role>`` (cores, every role seen, bench and other included), ``other_cores``, ``bench_cores``,
``quiet``, ``seconds``, ``processes`` (the busiest, for the breakdown's why).
"""

from __future__ import annotations

import logging
import time

from aldebaran_capacity.bench.boxstate import EXACT_AUDITOR, NOT_PLATFORM, OTHER_LIMIT_CORES

log = logging.getLogger(__name__)

TOP_PROCESSES = 15


def summarise(cores_by_role: dict[str, float]) -> dict:
    """The rest figures from the mean cores per role (pure)."""
    roles = {r: round(c, 3) for r, c in sorted(cores_by_role.items(), key=lambda x: -x[1])}
    other = roles.get("other", 0.0)
    return {
        "total_cores": round(sum(c for r, c in roles.items() if r not in NOT_PLATFORM), 3),
        "exact_auditor_cores": round(sum(roles.get(r, 0.0) for r in EXACT_AUDITOR), 3),
        "roles": roles,
        "other_cores": other,
        "bench_cores": roles.get("bench", 0.0),
        "quiet": other <= OTHER_LIMIT_CORES,
    }


def measure(seconds: float, label: str = "rest") -> dict:
    """Sample the box for `seconds` with no load and return :func:`summarise`'s figures plus the box."""
    from aldebaran_capacity.bench.boxstate import BoxSampler, platform_role

    log.info("deployed: %s: sampling the platform's CPU per role for %.0f s, no load", label, seconds)
    box = BoxSampler(period=1.0, classify=platform_role)
    box.start()
    time.sleep(seconds)
    state = box.stop()
    out = summarise(state.get("cores_by_role") or {})
    span = max(1.0, seconds)
    busiest = sorted(box.per_process.items(), key=lambda x: -x[1])[:TOP_PROCESSES]
    import psutil

    # The whole box from /proc/stat beside the per-process sum: a process born and gone between two samples
    # (a short Airflow task) is in this figure only.
    busy = psutil.cpu_count() - (state.get("idle_cores_mean") or 0.0) - (state.get("iowait_cores_mean") or 0.0)
    out.update(seconds=seconds, samples=state.get("samples", 0), load1_mean=state.get("load1_mean"),
               box_busy_cores=round(busy, 3),
               softirq_cores_mean=state.get("softirq_cores_mean"), top_other=state.get("top_other", []),
               processes=[{"role": r, "name": n, "cores": round(secs / span, 3)} for (r, n), secs in busiest
                          if secs / span >= 0.005])
    log.info("deployed: %s: platform %.3f cores (exact auditor %.3f), other %.3f%s: %s", label,
             out["total_cores"], out["exact_auditor_cores"], out["other_cores"], "" if out["quiet"] else " (NOT quiet)",
             ", ".join(f"{r} {c:.3f}" for r, c in out["roles"].items() if c >= 0.005))
    return out
