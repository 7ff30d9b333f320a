"""`aldebaran chaos kill-auditor`: SIGKILL the auditor at random moments of a replay, restart it from its
checkpoint, then dispatch everything to a counting webhook receiver and compare with the reference.

    1. the original publisher's mix (`events` messages, seeded) is produced to a fresh trades topic:
       the replay is a backlog the auditor drains in bounded micro-batches (maxOffsetsPerTrigger);
    2. the auditor runs as `aldebaran auditor run` (processing-time trigger, s3a:// checkpoint on
       MinIO); the campaign SIGKILLs its whole process group (driver and Spark JVM) and restarts it,
       `kills` times, alternately a random moment after a batch the restarted auditor committed, and a
       random moment 5-45 s into a restart (JVM start, recovery, the re-executed batch);
    3. once the checkpoint covers the topic's end offsets the auditor is stopped cleanly;
    4. the alerts topic (at-least-once: repeats counted, then removed by alert id as the dispatcher does)
       is compared with aldebaran.audit.reference.expected_alerts on the same messages;
    5. meanwhile (from the start, as in production) a streaming dispatcher (`aldebaran dispatch --follow`,
       its own process) delivers the topic to a local webhook receiver (HMAC-checked, counting requests
       per Idempotency-Key): every expected alert exactly once, nothing else.
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import time

from aldebaran.audit import reference
from aldebaran.kafka import io as kio
from aldebaran.runtime.progress import Progress
from aldebaran_capacity import loadgen
from aldebaran_lab.chaos import receipts
from aldebaran_lab.chaos.common import (
    AuditorProcess, CampaignResult, ChaosError, DispatcherProcess, Workspace, auditor_args, caught_up, compare_alerts,
    committed, delivery_env, topic_alerts, wait_for,
)

log = logging.getLogger(__name__)

TTL_SECONDS = 86_400.0  # no book expires during a campaign: the comparison is about crashes, not expiry
LEASE_SECONDS = 10.0


def produce_mix(ws: Workspace, events: int, seed: int) -> list[bytes]:
    """The original publisher's mix, keyed by order id, onto the workspace's trades topic."""
    recs = list(loadgen.records(loadgen.original_mix(max(1, events // 5), seed)))
    t0 = time.monotonic()
    kio.produce_all(kio.producer(ws.kafka), ws.kafka.trades_topic, [(r.key, r.value) for r in recs])
    log.info("produced %d events to %s in %.1fs", len(recs), ws.kafka.trades_topic, time.monotonic() - t0)
    return [r.value for r in recs]


class WebhookDispatch:
    """A streaming dispatcher (``aldebaran dispatch --follow --channel webhook``, its own process, as the
    dispatch_supervisor DAG runs it) delivering the workspace's alerts topic, from the start of the
    campaign, to a local counting webhook receiver (HMAC-checked, requests counted per Idempotency-Key)."""

    def __init__(self, ws: Workspace) -> None:
        from aldebaran_capacity.receivers import WebhookReceiver

        secret = secrets.token_urlsafe(24)
        self.receiver = WebhookReceiver(secret).start()
        conn = {"conn_type": "http", "host": self.receiver.url, "password": secret,
                "extra": {"endpoint": "/alerts", "timeout": 10}}
        env = ws.env(ALDEBARAN_CHANNELS="webhook", AIRFLOW_CONN_ALDEBARAN_WEBHOOK=json.dumps(conn),
                     **delivery_env(f"{ws.prefix}/deliveries", LEASE_SECONDS))
        self.proc = DispatcherProcess(f"chaos-{ws.name}-webhook", env, ws.logs / "dispatcher.log", ["webhook"],
                                      ws.store)

    def start(self) -> "WebhookDispatch":
        self.proc.start()
        wait_for(self.proc.running, 120, 0.5, "the streaming dispatcher's first heartbeat")
        return self

    def close(self) -> None:
        if self.proc.alive():
            self.proc.kill()
        self.proc.forget()
        self.receiver.stop()

    def finish(self, expected_ids: set[str], quiet_seconds: float = 30.0) -> dict:
        """Wait until every expected alert arrived, or nothing new arrived for `quiet_seconds`; then stop the
        dispatcher (SIGTERM: it finishes the runs in hand) and count."""
        last, since = -1, time.monotonic()
        while time.monotonic() - since < quiet_seconds and self.proc.alive():
            n = len(self.receiver.accepted)
            if n >= len(expected_ids) and expected_ids <= set(self.receiver.accepted):
                time.sleep(2)  # let repeats still on the topic come through, to be counted
                break
            if n != last:
                last, since = n, time.monotonic()
            time.sleep(1)
        error = None if self.proc.alive() else f"dispatcher exited {self.proc.returncode()}: {self.proc.tail(5)}"
        rc = self.proc.stop()
        if error is None and rc != 0:
            error = f"dispatcher stop exited {rc}: {self.proc.tail(5)}"
        hb = self.proc.heartbeat()
        self.proc.forget()
        self.receiver.stop()
        accepted = set(self.receiver.accepted)
        return {
            "dispatch": {k: hb.get(k) for k in ("status", "alerts", "runs", "sent", "already_recorded", "failed",
                                                "in_doubt", "retried", "malformed", "seconds")},
            "dispatcher_error": error,
            "receiver_accepted": len(accepted),
            "receiver_statuses": dict(self.receiver.statuses),
            "bad_signatures": self.receiver.rejected_signatures,
            "missing": sorted(expected_ids - accepted),
            "extra": sorted(accepted - expected_ids),
            "sent_more_than_once": sorted(k for k, n in self.receiver.requests_per_key.items() if n > 1),
            # Held to the webhook's promise: a same-key resend is allowed, reported apart (chaos.receipts).
            **receipts.count(self.receiver.requests_per_key, receipts.promise_of("webhook")).figures(),
        }


def run(events: int = 1_000_000, kills: int = 20, seed: int = 1, mode: str = "full", s3a: bool = True,
        kill_delay: tuple[float, float] = (0.2, 3.0), max_offsets: int | None = None,
        workspace: Workspace | None = None, cleanup: bool = True, dispatch: bool = True,
        step_timeout: float = 900.0, master: str | None = None) -> CampaignResult:
    """`master`: a Spark master URL for the auditor (e.g. spark://127.0.0.1:7077 of `make up-cluster`);
    default: the auditor's own (local[*])."""
    t0 = time.monotonic()
    ws = workspace or Workspace.create("kill-auditor", s3a=s3a)
    result = CampaignResult("kill-auditor", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    rng = random.Random(seed)
    auditor: AuditorProcess | None = None
    delivery: WebhookDispatch | None = None
    faults = Progress("kill-auditor", kills, unit="kills", logger=log)
    try:
        values = produce_mix(ws, events, seed)
        expected = reference.expected_alerts(values, ttl_ms=int(TTL_SECONDS * 1000))
        ends = kio.end_offsets(ws.kafka, ws.kafka.trades_topic)
        # Small enough batches that the backlog outlasts the kills: about 3 batches per kill.
        per_trigger = max_offsets or max(200, len(values) // (kills * 3 + 3))
        auditor = AuditorProcess(ws.env(), auditor_args(ws, max_offsets=per_trigger, ttl_seconds=TTL_SECONDS,
                                                        extra=["--master", master] if master else None),
                                 ws.logs / "auditor.log")
        mid_stream = 0
        killed_at: float | None = None
        if dispatch:  # delivering while the auditor is being killed, as in production
            delivery = WebhookDispatch(ws)
            delivery.start()
        auditor.start()
        faults.start()
        kinds = {"after_a_batch": 0, "during_restart": 0}
        while True:
            if 0 < mid_stream < kills and mid_stream % 2 == 1:
                # Every other kill lands while the auditor is restarting: somewhere in its first 5-45 s
                # (JVM start, checkpoint and books recovery, the re-executed batch).
                moment = rng.uniform(5.0, 45.0)
                started = time.monotonic()
                while time.monotonic() - started < moment and auditor.alive():
                    time.sleep(0.2)
                if not caught_up(ws, ends) and auditor.alive():
                    auditor.kill()
                    killed_at = time.monotonic()
                    mid_stream += 1
                    kinds["during_restart"] += 1
                    faults.advance()
                    log.info("kill %d/%d %.0fs into a restart (batches committed: %d)", mid_stream, kills, moment,
                             committed(ws)[0])
                    auditor.start()
                    continue
            before = committed(ws)[0]
            wait_for(lambda: committed(ws)[0] > before or not auditor.alive(), step_timeout, 0.5,
                     "a batch committed by the (re)started auditor")
            if not auditor.alive():
                failures.append(f"auditor exited by itself (rc {auditor.returncode()}): {auditor.tail(5)}")
                auditor.start()
                continue
            if killed_at is not None:
                result.recovery_s.append(time.monotonic() - killed_at)
                killed_at = None
            if mid_stream >= kills:
                break
            if caught_up(ws, ends):
                failures.append(f"the backlog was drained after {mid_stream} kills (wanted {kills}): "
                                "use more events or a smaller --max-offsets")
                break
            time.sleep(rng.uniform(*kill_delay))
            if caught_up(ws, ends):
                continue  # a kill now would not be mid-stream; the loop ends above
            auditor.kill()
            killed_at = time.monotonic()
            mid_stream += 1
            kinds["after_a_batch"] += 1
            faults.advance()
            log.info("kill %d/%d after a batch (batches committed so far: %d)", mid_stream, kills, committed(ws)[0])
            auditor.start()
        wait_for(lambda: caught_up(ws, ends) or not auditor.alive(), step_timeout * 3, 1.0, "auditor caught up")
        rc = auditor.stop()
        if rc not in (0, None):
            failures.append(f"final clean stop exited {rc}: {auditor.tail(5)}")
        result.runs, result.faults = auditor.starts, mid_stream

        verdict = compare_alerts(topic_alerts(ws.kafka), expected)
        result.details["events"] = len(values)
        result.details["kills"] = kinds
        result.details["max_offsets_per_trigger"] = per_trigger
        result.details["batches_committed"] = committed(ws)[0]
        result.details["alerts_topic"] = verdict.summary()
        result.details["checkpoint"] = ws.checkpoint
        if not verdict.ok:
            failures.append(f"alerts topic differs from the reference: {verdict.summary()}")
        result.lost = len(verdict.missing)
        if delivery is not None:
            delivered = delivery.finish({a["alert_id"] for a in expected})
            delivery = None
            result.details["webhook"] = {k: (len(v) if isinstance(v, list) else v) for k, v in delivered.items()}
            result.lost = len(delivered["missing"])
            result.duplicated, result.resent_same_key = delivered["duplicated"], delivered["resent_same_key"]
            if delivered["dispatcher_error"]:
                failures.append(f"dispatcher failed: {delivered['dispatcher_error']}")
            if delivered["extra"]:
                failures.append(f"{len(delivered['extra'])} alerts delivered that the reference does not expect")
        result.details["failures"] = failures
        return result.finish(t0)
    except ChaosError as exc:
        return result.aborted(failures, exc, t0)
    finally:
        faults.close()
        if auditor is not None and auditor.alive():
            auditor.kill()
        if delivery is not None:
            delivery.close()
        if workspace is None and cleanup:
            ws.cleanup()
