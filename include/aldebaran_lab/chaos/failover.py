"""`aldebaran chaos failover`: SIGKILL the active auditor while a warm standby waits on its checkpoint, and
measure how long processing stops, side by side with a cold restart in the same run.

    1. the original publisher's mix is produced to a fresh trades topic: a backlog the auditor drains in
       small micro-batches (maxOffsetsPerTrigger), so that every kill lands mid-stream;
    2. an active auditor (`aldebaran auditor run`, processing-time, s3a:// checkpoint) and a warm standby
       (`--standby true`: Spark up, waiting on the checkpoint lease, books prefetched) on the same checkpoint;
    3. `kills` times: SIGKILL of the active's whole process group (driver and JVM) a few seconds after one
       of its batches; the standby takes the lease (its holder's pid is gone) and starts the query; a new
       standby is started and waited for before the next kill. Measured: kill → the next batch committed
       in the Spark checkpoint;
    4. then `cold` kills without a standby, each followed by a fresh `auditor run` (the supervisor's
       restart): the same measurement, the baseline;
    5. the alerts topic is compared with aldebaran.audit.reference.expected_alerts: nothing lost or changed.
"""

from __future__ import annotations

import functools
import logging
import random
import time

from aldebaran.audit import reference
from aldebaran.kafka import io as kio
from aldebaran.runtime.progress import Progress
from aldebaran_lab.chaos.common import (
    AuditorProcess, CampaignResult, ChaosError, Workspace, auditor_args, caught_up, committed, compare_alerts,
    recovery_text, topic_alerts, wait_for,
)
from aldebaran_lab.chaos.kill_auditor import TTL_SECONDS, produce_mix

log = logging.getLogger(__name__)

LEASE_SECONDS = 10.0
READY_LINE = "waiting for the lease"  # what a standby logs once its Spark session is up
STANDBY = ["--standby", "true", "--standby-refresh-seconds", "2"]


def run(events: int = 300_000, kills: int = 4, cold: int = 2, seed: int = 1, mode: str = "full", s3a: bool = True,
        step_timeout: float = 600.0, max_offsets: int | None = None,
        catch_up_offsets: int | None = None) -> CampaignResult:
    """`max_offsets`: the auditors' maxOffsetsPerTrigger; by default about 25 micro-batches of backlog per kill.
    `catch_up_offsets`: that of the auditor left after the last kill, which only catches up (default: the same)."""
    t0 = time.monotonic()
    ws = Workspace.create("failover", s3a=s3a)
    result = CampaignResult("failover", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    rng = random.Random(seed)
    procs: list[AuditorProcess] = []
    warm_s: list[float] = []
    cold_s: list[float] = []
    faults = Progress("failover", kills + cold, unit="kills", logger=log)
    drained_at_kill: list[bool] = []  # judged as each kill lands: the last successor may drain it all in one batch

    def new(standby: bool, last: bool = False) -> AuditorProcess:
        offsets = catch_up_offsets if last and catch_up_offsets else per_trigger
        args = auditor_args(ws, max_offsets=offsets, ttl_seconds=TTL_SECONDS,
                            extra=["--lease-seconds", str(LEASE_SECONDS), *(STANDBY if standby else [])])
        proc = AuditorProcess(ws.env(), args, ws.logs / f"auditor-{len(procs) + 1}.log")
        procs.append(proc)
        proc.start()
        return proc

    def ready(proc: AuditorProcess) -> None:
        wait_for(lambda: READY_LINE in proc.log_path.read_text(errors="replace") or not proc.alive(), step_timeout,
                 0.5, "the standby's Spark session up")
        if not proc.alive():
            raise ChaosError(f"standby exited (rc {proc.returncode()}): {proc.tail(10)}")

    def kill_and_measure(active: AuditorProcess, then) -> float:
        time.sleep(rng.uniform(1.0, 4.0))  # a few seconds after a batch: mid-stream
        drained_at_kill.append(caught_up(ws, ends))
        active.kill()
        killed = time.monotonic()
        before = committed(ws)[0]
        successor = then()
        wait_for(lambda: committed(ws)[0] > before or not successor.alive(), step_timeout, 0.2,
                 "a batch committed after the kill")
        if not successor.alive():
            raise ChaosError(f"the successor exited (rc {successor.returncode()}): {successor.tail(10)}")
        faults.advance()
        return time.monotonic() - killed

    try:
        values = produce_mix(ws, events, seed)
        expected = reference.expected_alerts(values, ttl_ms=int(TTL_SECONDS * 1000))
        ends = kio.end_offsets(ws.kafka, ws.kafka.trades_topic)
        per_trigger = max_offsets or max(100, len(values) // ((kills + cold) * 25 + 25))  # outlasts the kills
        faults.start()
        active = new(standby=False)
        wait_for(lambda: committed(ws)[0] > 0 or not active.alive(), step_timeout, 0.5, "the first batch")
        standby = new(standby=True, last=kills == 1 and not cold)
        for k in range(kills):
            ready(standby)
            time.sleep(rng.uniform(3.0, 6.0))  # a prefetch round or two (refresh every 2 s)
            took = kill_and_measure(active, lambda: standby)
            warm_s.append(took)
            log.info("warm failover %d/%d: kill → next committed batch %.1f s", k + 1, kills, took)
            # A fresh standby for the next kill; none after the last one when no baseline follows.
            active, standby = standby, (new(standby=True, last=k + 2 == kills and not cold)
                                        if k + 1 < kills or cold else None)
        if standby is not None:
            ready(standby)
            standby.stop()  # the baseline has no standby: a killed auditor is started afresh
        for k in range(cold):
            took = kill_and_measure(active, functools.partial(new, standby=False, last=k + 1 == cold))
            cold_s.append(took)
            log.info("cold restart %d/%d: kill → next committed batch %.1f s", k + 1, cold, took)
            active = procs[-1]
        if drained_at_kill and drained_at_kill[-1]:
            failures.append("the backlog was drained before the last kill: use more --events")
        wait_for(lambda: caught_up(ws, ends) or not active.alive(), step_timeout * 3, 1.0, "auditor caught up")
        rc = active.stop()
        if rc not in (0, None):
            failures.append(f"final clean stop exited {rc}: {active.tail(5)}")
        verdict = compare_alerts(topic_alerts(ws.kafka), expected)
        if not verdict.ok:
            failures.append(f"alerts topic differs from the reference: {verdict.summary()}")
        result.lost = len(verdict.missing)
        result.duplicated = len(verdict.changed)  # a repeat on the topic is at-least-once, not a duplicate
        result.runs, result.faults = len(procs), len(warm_s) + len(cold_s)
        result.recovery_s = warm_s
        result.rows = [
            {"scenario": "SIGKILL active auditor; a warm standby takes over", "runs": kills + 2, "faults": len(warm_s),
             "lost": result.lost, "duplicated": result.duplicated,
             "recovery": "kill → next committed batch: " + recovery_text(warm_s)},
            {"scenario": "SIGKILL auditor; restarted cold (baseline, same run)", "runs": cold, "faults": len(cold_s),
             "lost": result.lost, "duplicated": result.duplicated,
             "recovery": "kill → next committed batch: " + recovery_text(cold_s)},
        ]
        result.details.update(events=len(values), max_offsets_per_trigger=per_trigger,
                              catch_up_offsets=catch_up_offsets, lease_seconds=LEASE_SECONDS,
                              warm_s=[round(x, 1) for x in warm_s], cold_s=[round(x, 1) for x in cold_s],
                              batches_committed=committed(ws)[0], alerts_topic=verdict.summary(),
                              failures=failures)
        return result.finish(t0)
    except ChaosError as exc:
        return result.aborted(failures, exc, t0)
    finally:
        faults.close()
        for proc in procs:
            if proc.alive():
                proc.kill()
        ws.cleanup()

