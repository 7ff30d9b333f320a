"""``bench deployed --with-lane``: the same figures beside the fast lane (``deployed.with_lane``), since users run
both lanes together (BRIEF §4).

The lane is switched on the way a user does: unpause and trigger the ``lane_supervisor`` DAG through Airflow's
REST API, then wait until the lane keeper's heartbeat says ``running`` (aldebaran.lanes.status: the keeper
beats ``running`` once its driver reports an active query). Then the platform at rest once more
(``with_lane.rest``), and the interleaved segments reading both ``alerts`` (exact) and the fast topic, each
followed by the hand-rolled loop's (``with_lane.segments[]``: ``fast_p50_ms``, ``fast_p99_ms``,
``fast_p99_spread_ms``, ``exact_p99_ms``, ``peer_p99_ms``). At the end the DAG's pause is put back and, if
the lane was not running before, the DAG is paused and the lane stopped (``aldebaran lanes stop``'s step).
"""

from __future__ import annotations

import logging
import time

from aldebaran_lab.demo_platform import LANE_SUPERVISOR, lane_running, wait_lane_running
from aldebaran_lab.deployed_parts import DeployedError

log = logging.getLogger(__name__)

START_TIMEOUT_S = 360.0
SETTLE_S = 20.0  # after `running`: the lane's start (JIT, first fetches) is not its resting cost


class LaneOn:
    """The lane running for the `with` block, as a user switches it on; put back as it was on exit."""

    def __init__(self, api, timeout: float = START_TIMEOUT_S) -> None:
        self.api, self.timeout = api, timeout
        self.was_running = False
        self.was_paused = True

    def __enter__(self) -> "LaneOn":
        from aldebaran.lanes import status

        dag = self.api.dag(LANE_SUPERVISOR)
        if dag is None:
            raise DeployedError(f"the {LANE_SUPERVISOR} DAG is not registered in Airflow")
        self.was_paused = bool(dag.get("is_paused"))
        self.was_running = lane_running(status.collect()["fast"])
        log.info("deployed: switching the lane on: unpause and trigger %s (lane running before: %s)", LANE_SUPERVISOR,
                 self.was_running)
        started = False
        try:
            self.api.set_paused(LANE_SUPERVISOR, False)
            self.api.trigger(LANE_SUPERVISOR)
            wait_lane_running(self.timeout, say=lambda msg, *a: log.info("deployed: " + msg, *a))
            started = True
        finally:
            if not started:  # a `with` whose __enter__ fails never calls __exit__: put things back here
                self.__exit__()
        return self

    def __exit__(self, *exc) -> None:
        from aldebaran.platform import lane_supervisor

        if self.was_paused or not self.was_running:
            self.api.set_paused(LANE_SUPERVISOR, True)  # first, or its next run starts the lane again
        if not self.was_running:
            stopped = lane_supervisor.stop("bench deployed --with-lane: done")
            log.info("deployed: the lane stopped again (pids %s)", stopped)


def renice_exact_auditor(value: int) -> int:
    """Set every thread of the running exact auditor's processes (spark-submit, the JVM, the driver, its Python
    workers and shard hosts: aldebaran_capacity.bench.boxstate's roles) to nice `value`, as
    ALDEBARAN_SUPERVISOR_NICE starts them; the processes they start later inherit it. Returns the processes
    changed. Lowering a nice level needs CAP_SYS_NICE (root here)."""
    import os

    import psutil

    from aldebaran_capacity.bench.boxstate import EXACT_AUDITOR, platform_role

    changed = 0
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            ancestors = [p.cmdline() for p in proc.parents()]
            if platform_role(proc.info["cmdline"] or [], ancestors) not in (*EXACT_AUDITOR, "auditor submit"):
                continue
            for tid in os.listdir(f"/proc/{proc.pid}/task"):  # nice is per thread on Linux
                os.setpriority(os.PRIO_PROCESS, int(tid), value)
            changed += 1
        except (psutil.Error, ProcessLookupError, FileNotFoundError):
            continue  # gone meanwhile
    log.info("deployed: the exact auditor's %d processes now at nice %d", changed, value)
    return changed


def run(api, kafka, log_path, query: str, rates, runs: int, seconds: float, drain_s: float,
        rest_s: float | None, webhook_batch: int = 1, exact_nice: list[int] | None = None,
        fast_webhook: bool = False) -> dict:
    """``deployed.with_lane``: the rest with the lane (before the bench's channels, like ``deployed.rest``) and
    the interleaved segments with both lanes read. With `exact_nice` (several nice levels), each run measures
    every rate at each level in turn, the exact auditor reniced between them (``with_lane.exact_nice_ab``); the
    headline segments are the level ALDEBARAN_SUPERVISOR_NICE ships with. With `fast_webhook`, the bench's
    webhook opts in to the fast lane (``"fast": true``): the supervised fast dispatcher delivers it, and its
    recipient's figures are trade → fast recipient (``fast_delivery_*`` in each segment)."""
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.settings import load
    from aldebaran_lab import deployed_rest, deployed_runs
    from aldebaran_lab.deployed_parts import WARMUP, Channels, segment

    if fast_webhook and not load(LaneSettings).enabled:
        raise DeployedError("--fast-webhook: dispatch_supervisor starts the fast dispatcher only where "
                            "ALDEBARAN_LANES_ENABLED=true; set it in .env and start the platform again "
                            "(make down, then make demo) so Airflow runs with it")
    out: dict = {"fast_webhook": fast_webhook}
    with LaneOn(api):
        time.sleep(SETTLE_S)
        if rest_s:
            out["rest"] = deployed_rest.measure(rest_s, "rest with the lane", kafka=kafka, query=query)
        with Channels(api, kafka, webhook_batch, fast_webhook=fast_webhook) as channels:
            log.info("deployed: with the lane: waiting for the log, webhook and bus dispatchers%s",
                     " and the fast dispatcher" if fast_webhook else "")
            channels.wait_dispatchers()
            ctx = deployed_runs.Context(kafka, channels.receiver, log_path, query, drain_s)
            segment(kafka, channels.receiver, log_path, query, WARMUP[0], WARMUP[1], drain_s)
            topics = {"fast": kafka.fast_alerts_topic}
            fast_channel = "webhook" if fast_webhook else None
            if not exact_nice:
                done, peers = deployed_runs.measure_runs(ctx, rates, runs, seconds, topics, "with lane")
                out["segments"] = [deployed_runs.lane_aggregate(rate, done[rate], peers[rate], fast_channel)
                                   for rate in rates]
                return out
            out.update(_nice_ab(ctx, rates, runs, seconds, topics, exact_nice, fast_channel))
    return out


def _nice_ab(ctx, rates, runs: int, seconds: float, topics: dict, levels: list[int],
             fast_channel: str | None = None) -> dict:
    """Run after run, every level in turn (interleaved, so the box's drift falls on both): the segments per
    level, and the shipped level's as the headline."""
    from aldebaran.platform.settings import SupervisorSettings
    from aldebaran.settings import load
    from aldebaran_lab import deployed_runs

    shipped = load(SupervisorSettings).nice
    done = {v: {rate: [] for rate in rates} for v in levels}
    peers = {v: {rate: [] for rate in rates} for v in levels}
    try:
        for run_no in range(1, runs + 1):
            for v in levels:
                renice_exact_auditor(v)
                d, p = deployed_runs.measure_runs(ctx, rates, 1, seconds, topics,
                                                  f"with lane, exact at nice {v}, run {run_no}/{runs}")
                for rate in rates:
                    done[v][rate] += d[rate]
                    peers[v][rate] += p[rate]
    finally:
        renice_exact_auditor(shipped)
    ab = [{"nice": v, "segments": [deployed_runs.lane_aggregate(rate, done[v][rate], peers[v][rate], fast_channel)
                                   for rate in rates]} for v in levels]
    head = next((a for a in ab if a["nice"] == shipped), ab[0])
    return {"segments": head["segments"], "exact_nice": head["nice"], "exact_nice_ab": ab}
