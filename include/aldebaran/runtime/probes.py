"""``/healthz`` and ``/readyz`` of the long-running processes (the auditor's driver, the streaming
dispatchers, the lane keeper), served by the same HTTP server and port as their ``/metrics``
(aldebaran.runtime.metrics wraps its WSGI app with :func:`wsgi`). docs/operations.md "Health endpoints" has the
systemd and Kubernetes probes.

- ``/healthz`` (alive): the thread of the process's main loop is running and its work has not ended
  (``failed``/``stopped``). Before that loop exists the process is starting and the answer is 200: a
  liveness probe must not kill a process that is still starting (a standby auditor waits for the lease
  for as long as the active one holds it).
- ``/readyz`` (consuming and making progress): the rule of the process's own supervisor, applied to the
  heartbeat body the process holds in memory, with the supervisor's settings — one rule, one set of
  numbers, so a probe and the supervisor never disagree about the same process:

  - a dispatcher: its heartbeat body is fresh (``ALDEBARAN_DISPATCH_SUPERVISOR_STALE_AFTER_SECONDS``),
    no channel has lost progress (:func:`stalled`, which the dispatch supervisor applies too,
    ``ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS``) and every channel's loop has polled;
  - the auditor: a batch has completed and its last heartbeat record (one per batch, or an ``idle`` one
    when nothing is left to read) is younger than ``ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS``;
  - the lane keeper: ``running`` (its query active), its last beat younger than
    ``ALDEBARAN_LANES_STALE_AFTER_SECONDS``.

Both answer ``{"status": ..., "reason": ...}`` as JSON, 200 or 503. A probe reads memory only (no store,
Kafka or JVM call): a probe every few seconds costs nothing, and an outage of the store does not turn
into failed probes by itself (the stale heartbeat that follows does, as it does for the supervisor).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

OK, STARTING = "ok", "starting"
TERMINATED = ("failed", "stopped")
PATHS = {"/healthz": "live", "/readyz": "ready"}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    status: str  # ok, starting, stale, stalled, dead, failed, stopped, rotating
    reason: str


def _ended(what: str, body: dict) -> Verdict:
    error = f": {str(body['error'])[:300]}" if body.get("error") else ""
    return Verdict(False, body["status"], f"{what} {body['status']}{error}")


# --- the readiness rules (pure: tests/unit/aldebaran/runtime/test_probes.py) -----
def stalled(progress: dict | None, now: float, limit: float) -> dict[str, str]:
    """{unit: why} for each unit of a heartbeat's ``progress`` that has lost progress: its marks (settled
    offsets, settled deliveries) have not moved for more than `limit` seconds while it has work pending,
    or while its loop has not turned either (stuck outside its work, e.g. in a hung call). Pure.

    A unit without pending work whose loop turns is idle, not stalled; a unit whose marks move is
    healthy however slowly they move and however long one turn of its loop takes. The dispatch supervisor
    (aldebaran.platform.processes.diagnose) and a dispatcher's /readyz both judge by it."""
    out: dict[str, str] = {}
    for unit, p in sorted((progress or {}).items()):
        p = p or {}
        quiet = now - float(p.get("progress_at") or 0)
        if quiet <= limit:
            continue
        loop_at = p.get("loop_at")
        loop_age = None if loop_at is None else now - float(loop_at)
        if p.get("pending"):
            out[unit] = f"work pending and no progress for {quiet:.0f}s"
        elif loop_age is None:
            out[unit] = f"its loop has not started in {quiet:.0f}s"
        elif loop_age > limit:
            out[unit] = f"its loop has not turned for {loop_age:.0f}s and no progress for {quiet:.0f}s"
    return out


def dispatcher_ready(body: dict | None, now: float, stale_after: float, progress_limit: float) -> Verdict:
    """A streaming dispatcher's readiness from its last heartbeat body (aldebaran.delivery.service)."""
    if not body:
        return Verdict(False, STARTING, "no heartbeat computed yet")
    if body.get("status") in TERMINATED:
        return _ended("dispatcher", body)
    age = now - float(body.get("at") or 0)
    if age > stale_after:
        return Verdict(False, "stale", f"heartbeat {age:.0f}s old (limit {stale_after:.0f}s, "
                                       "ALDEBARAN_DISPATCH_SUPERVISOR_STALE_AFTER_SECONDS)")
    progress = body.get("progress") or {}
    stuck = stalled(progress, now, progress_limit)
    if stuck:
        return Verdict(False, "stalled", "; ".join(f"{unit}: {why}" for unit, why in stuck.items())
                       + f" (limit {progress_limit:.0f}s, ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS)")
    waiting = sorted(c for c, p in progress.items() if not (p or {}).get("loop_at"))
    if waiting or not progress:
        return Verdict(False, STARTING, f"channel(s) {', '.join(waiting) or '-'} not consuming yet")
    return Verdict(True, OK, f"{len(progress)} channel(s) consuming")


def auditor_ready(record: dict | None, now: float, stale_after: float) -> Verdict:
    """The auditor's readiness from its last heartbeat record (aldebaran.audit.sparkjob.heartbeat_poller), by the auditor
    supervisor's rule: that record is progress itself, so its age is the time without progress."""
    if not record:
        return Verdict(False, STARTING, "the query has not started")
    if record.get("status") in TERMINATED:
        return _ended("auditor query", record)
    age = now - float(record.get("updated_at_ms") or 0) / 1000
    if age > stale_after:
        return Verdict(False, "stalled", f"no progress for {age:.0f}s (limit {stale_after:.0f}s, "
                                         f"ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS; last batch {record.get('batch_id')})")
    if record.get("status") == "started":
        return Verdict(False, STARTING, "no batch completed yet")
    return Verdict(True, OK, f"batch {record.get('batch_id')} {age:.0f}s ago ({record.get('status')})")


def lane_ready(body: dict | None, now: float, stale_after: float) -> Verdict:
    """The lane keeper's readiness from its last heartbeat body (aldebaran.lanes.keeper), which its loop
    writes: the lane supervisor judges it by that beat's age alone."""
    if not body:
        return Verdict(False, STARTING, "no heartbeat yet")
    if body.get("status") in TERMINATED:
        return _ended("lane", body)
    age = now - float(body.get("at") or 0)
    if age > stale_after:
        return Verdict(False, "stale", f"heartbeat {age:.0f}s old (limit {stale_after:.0f}s, "
                                       "ALDEBARAN_LANES_STALE_AFTER_SECONDS)")
    if body.get("status") != "running":
        return Verdict(False, body.get("status") or STARTING, f"lane {body.get('status')}: its query is not active yet")
    return Verdict(True, OK, "lane query active")


# --- what this process watches -------------------------------------------------------------------------
@dataclass
class Watched:
    """One process's main loop: its thread, its last heartbeat body, and its readiness rule."""

    what: str  # "dispatcher <name>", in reasons
    thread: threading.Thread
    body: Callable[[], dict | None]
    rule: Callable[[dict | None, float], Verdict]

    def live(self) -> Verdict:
        if not self.thread.is_alive():
            return Verdict(False, "dead", f"{self.what}: its main loop thread {self.thread.name} has ended")
        body = self.body() or {}
        if body.get("status") in TERMINATED:
            return _ended(self.what, body)
        return Verdict(True, OK, f"{self.what}: main loop running")

    def ready(self, now: float) -> Verdict:
        v = self.rule(self.body(), now)
        return Verdict(v.ok, v.status, f"{self.what}: {v.reason}")


_lock = threading.Lock()
_watched: dict[str, Watched] = {}


def watch(key: str, watched: Watched) -> str:
    with _lock:
        _watched[key] = watched
    return key


def unwatch(key: str) -> None:
    with _lock:
        _watched.pop(key, None)


def check(kind: str, now: float | None = None) -> Verdict:
    """``live`` or ``ready`` over everything watched (one process in production; several in tests)."""
    with _lock:
        watched = list(_watched.values())
    if not watched:
        return Verdict(kind == "live", STARTING, "starting: no main loop yet")
    now = time.time() if now is None else now
    verdicts = [w.live() if kind == "live" else w.ready(now) for w in watched]
    bad = [v for v in verdicts if not v.ok]
    return Verdict(not bad, bad[0].status if bad else OK, "; ".join(v.reason for v in bad or verdicts))


def wsgi(metrics_app):
    """`metrics_app` (prometheus_client's) with /healthz and /readyz in front of it."""

    def app(environ, start_response):
        kind = PATHS.get((environ.get("PATH_INFO") or "/").rstrip("/"))
        if kind is None:
            return metrics_app(environ, start_response)
        verdict = check(kind)
        body = json.dumps({"status": verdict.status, "reason": verdict.reason}).encode()
        start_response("200 OK" if verdict.ok else "503 Service Unavailable",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                        ("Cache-Control", "no-store")])
        return [body]

    return app


# --- the roles -----------------------------------------------------------------------------------------
def watch_dispatcher(heartbeat) -> str:
    """From the thread that runs the dispatcher's channel loops (it ends when any of them does)."""
    from aldebaran.platform.settings import DispatchSupervisorSettings  # settings only: the supervisor's numbers
    from aldebaran.settings import load

    cfg = load(DispatchSupervisorSettings)
    return watch(f"dispatcher/{heartbeat.name}", Watched(
        f"dispatcher {heartbeat.name}", threading.current_thread(), lambda: heartbeat.last,
        lambda body, now: dispatcher_ready(body, now, cfg.stale_after_seconds, cfg.progress_limit_seconds)))


def watch_auditor(poller, thread: threading.Thread) -> str:
    """The auditor's heartbeat poller (`thread`: the driver's loop that reads the query)."""
    from aldebaran.platform.settings import SupervisorSettings  # settings only: the supervisor's numbers
    from aldebaran.settings import load

    stale_after = load(SupervisorSettings).stale_after_seconds
    return watch(f"auditor/{poller.query_name}", Watched(
        f"auditor {poller.query_name}", thread, lambda: poller.last,
        lambda record, now: auditor_ready(record, now, stale_after)))


def watch_lane(keeper) -> str:
    """From the keeper's loop thread (it beats from that loop)."""
    stale_after = keeper.settings.stale_after_seconds
    return watch(f"lane/{keeper.name}", Watched(
        f"lane {keeper.name}", threading.current_thread(), lambda: keeper.last_body,
        lambda body, now: lane_ready(body, now, stale_after)))
