"""The platform at rest (``deployed.rest`` in docs/img/bench-results.json): the CPU of each of its roles over
``--rest-seconds`` with no load, as ``make demo`` leaves it (services, Airflow, the exact auditor, the log
dispatcher; with ``--with-lane`` once more with the lane switched on: ``deployed.with_lane.rest``).

Sampled with psutil (aldebaran_capacity.bench.boxstate.BoxSampler, every second, per process's CPU time)
and split by :func:`aldebaran_capacity.bench.boxstate.platform_role` (roles from the command lines the
platform's code starts). ``total_cores`` is the platform's roles only: not ``bench`` (this process and its
children) nor ``other`` (anything else on the box); ``other_cores`` above 0.2 core flags ``quiet: false``.
Keys: ``total_cores``, ``exact_auditor_cores`` (auditor JVM + auditor driver + spark python workers),
``roles.<role>`` (cores, every role seen, bench and other included), ``other_cores``, ``bench_cores``,
``quiet``, ``seconds``, ``processes`` (the busiest, for the breakdown's why), ``idle_wait_s`` and ``backlog``
(what was still to do when the sample began: :func:`wait_idle`).
"""

from __future__ import annotations

import json
import logging
import time

from aldebaran.exceptions import AldebaranError
from aldebaran_capacity.bench.boxstate import EXACT_AUDITOR, NOT_PLATFORM, OTHER_LIMIT_CORES

log = logging.getLogger(__name__)

TOP_PROCESSES = 15
# The processes whose age the rest measurement records: a JVM or a server minutes old still pays its start
# (the JIT, first scans), so a figure taken right after a start is read with its age beside it.
AGED_ROLES = ("kafka", "minio", "auditor JVM", "lane JVM", "airflow scheduler")


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


IDLE_MAX_WAIT_S = 600.0


def backlog(kafka, query: str) -> dict[str, int]:
    """What the platform still has to do: the auditor's unread trades (the topic's end against the offsets its
    last batch stopped at, from its heartbeat) and, per active consumer group reading an alerts topic (the
    dispatchers, the lane keeper), its lag. Groups with no member or no commit on a topic are not waited for:
    a stopped bench channel keeps its lag forever and costs nothing."""
    from confluent_kafka import ConsumerGroupState

    from aldebaran.runtime import heartbeat
    from aldebaran.kafka import admin as kadmin
    from aldebaran.kafka import io as kio
    from aldebaran.storage.store import open_store

    out: dict[str, int] = {}
    hb = heartbeat.read(open_store(), heartbeat.AUDITOR, query) or {}
    done: dict[int, int] = {}
    for offsets in hb.get("kafka_end_offsets") or []:
        parsed = json.loads(offsets) if isinstance(offsets, str) else (offsets or {})
        for partition, offset in (parsed.get(kafka.trades_topic) or {}).items():
            done[int(partition)] = int(offset)
    ends = kio.end_offsets(kafka, kafka.trades_topic)
    out["auditor"] = sum(max(0, end - done.get(p, 0)) for p, end in ends.items())
    listed = kadmin.admin(kafka).list_consumer_groups(states={ConsumerGroupState.STABLE}).result(timeout=10)
    for group in sorted(g.group_id for g in listed.valid):
        for topic in (kafka.alerts_topic, kafka.fast_alerts_topic):
            try:
                lag = kadmin.consumer_lag(kafka, group, topic)
            except AldebaranError:  # no such topic (the lane never ran)
                continue
            if lag["committed"] and lag["lag"]:
                out[f"{group} on {topic}"] = lag["lag"]
    return out


def wait_idle(probe, max_wait: float = IDLE_MAX_WAIT_S, step: float = 5.0) -> tuple[float, dict[str, int]]:
    """Before a rest sample: wait until `probe()` (:func:`backlog`) is empty (a previous bench's alerts still being
    delivered, or trades still being audited, are load, not rest), for up to `max_wait` seconds. Returns the
    seconds waited and what was left (empty when idle); the sample is taken either way, flagged by the caller."""
    t0 = time.monotonic()
    while True:
        left = {k: v for k, v in probe().items() if v}
        waited = round(time.monotonic() - t0, 1)
        if not left:
            return waited, {}
        if waited > max_wait:
            log.warning("deployed: still busy after %.0f s (%s): sampling the rest anyway, flagged", waited, left)
            return waited, left
        log.info("deployed: waiting for the platform to be idle before the rest sample: %s", left)
        time.sleep(step)


def measure(seconds: float, label: str = "rest", kafka=None, query: str | None = None) -> dict:
    """Sample the box for `seconds` with no load and return :func:`summarise`'s figures plus the box. With
    `kafka` and `query`, first :func:`wait_idle` (``idle_wait_s``, ``backlog``; ``quiet`` false when it never
    got idle)."""
    from aldebaran_capacity.bench.boxstate import BoxSampler, platform_role

    waited, left = (wait_idle(lambda: backlog(kafka, query)) if kafka is not None and query else (None, {}))
    log.info("deployed: %s: sampling the platform's CPU per role for %.0f s, no load", label, seconds)
    box = BoxSampler(period=1.0, classify=platform_role)
    box.start()
    time.sleep(seconds)
    state = box.stop()
    out = summarise(state.get("cores_by_role") or {})
    out["age_s"] = box.ages(AGED_ROLES)
    span = max(1.0, seconds)
    busiest = sorted(box.per_process.items(), key=lambda x: -x[1])[:TOP_PROCESSES]
    import psutil

    # The whole box from /proc/stat beside the per-process sum: a process born and gone between two samples
    # (a short Airflow task) is in this figure only.
    busy = psutil.cpu_count() - (state.get("idle_cores_mean") or 0.0) - (state.get("iowait_cores_mean") or 0.0)
    out.update(seconds=seconds, samples=state.get("samples", 0), load1_mean=state.get("load1_mean"),
               box_busy_cores=round(busy, 3),
               softirq_cores_mean=state.get("softirq_cores_mean"), top_other=state.get("top_other", []),
               idle_wait_s=waited, backlog=left,
               processes=[{"role": r, "name": n, "cores": round(secs / span, 3)} for (r, n), secs in busiest
                          if secs / span >= 0.005])
    out["quiet"] = out["quiet"] and not left
    log.info("deployed: %s: platform %.3f cores (exact auditor %.3f), other %.3f%s: %s", label,
             out["total_cores"], out["exact_auditor_cores"], out["other_cores"], "" if out["quiet"] else " (NOT quiet)",
             ", ".join(f"{r} {c:.3f}" for r, c in out["roles"].items() if c >= 0.005))
    return out


def combine(samples: list[dict]) -> dict:
    """Several rest samples as one figure (pure): ``total_cores`` and ``exact_auditor_cores`` are the medians of
    the runs (each median apart), ``*_spread`` their min–max, ``runs`` each run's figures; the breakdown (roles,
    processes, box) is the run whose total is the median (the lower middle for an even count)."""
    import statistics

    if len(samples) == 1:
        return samples[0]
    totals = [s["total_cores"] for s in samples]
    exact = [s["exact_auditor_cores"] for s in samples]
    middle = sorted(range(len(samples)), key=lambda i: totals[i])[(len(samples) - 1) // 2]
    out = {**samples[middle]}
    out.update(total_cores=round(statistics.median(totals), 3), exact_auditor_cores=round(statistics.median(exact), 3),
               total_cores_spread=[min(totals), max(totals)], exact_auditor_cores_spread=[min(exact), max(exact)],
               breakdown_run=middle + 1, quiet=all(s["quiet"] for s in samples),
               runs=[{k: s.get(k) for k in ("total_cores", "exact_auditor_cores", "other_cores", "box_busy_cores",
                                            "load1_mean", "quiet", "age_s")} for s in samples])
    return out


def repeated(runs: int, seconds: float, kafka, query: str, before_each=None) -> dict:
    """:func:`measure` `runs` times, `before_each(k)` first each time (``aldebaran demo`` for a figure "right
    after the demo": each sample then sees a fresh auditor JVM and fresh consumers, which is what a user who
    runs the demo and walks away gets); :func:`combine`'s figures."""
    samples = []
    for k in range(runs):
        if before_each is not None:
            before_each(k)
        samples.append(measure(seconds, label=f"rest {k + 1}/{runs}", kafka=kafka, query=query))
    out = combine(samples)
    if runs > 1:
        log.info("deployed: rest over %d runs: platform %.3f core (%.3f–%.3f), exact auditor %.3f (%.3f–%.3f)", runs,
                 out["total_cores"], *out["total_cores_spread"], out["exact_auditor_cores"],
                 *out["exact_auditor_cores_spread"])
    return out
