"""The auditor supervisor: what the `auditor_supervisor` DAG's tasks call.

One supervisor run (every minute, one at a time):

1. **assess** — observe the auditor: its checkpoint lease (aldebaran.runtime.lease), its heartbeat
   (aldebaran.audit.sparkjob.heartbeat_poller: Spark progress per micro-batch) and, when it runs on this host, its
   driver processes. Unhealthy = the driver process is gone, the query terminated (heartbeat
   ``failed``/``stopped``), no live lease, or no progress for longer than
   ``ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS``. Decide: ``none`` (healthy), ``wait`` (still starting,
   or backing off), or ``restart``.
2. **page** — after ``ALDEBARAN_SUPERVISOR_PAGE_AFTER_RESTARTS`` restarts within one incident, send one
   operational alert per incident through the configured delivery channels (exactly once per channel:
   its delivery record is keyed by the incident's id, like any alert).
3. **prepare_restart** — stop what is left of the old auditor: SIGINT to a local driver (it stops its
   query and releases its lease), SIGKILL to its process group after a timeout; a lease whose local
   holder is dead is ``broken`` (free at once); a holder on another host is ``revoked`` (it sees that
   at its next renewal and stops; the lease is free after one ttl).
4. **submit** (:mod:`aldebaran.platform.auditor_submit`) — :class:`aldebaran.platform.spark_submit.AuditorSubmitOperator` (the Spark provider's
   SparkSubmitOperator, master and deploy mode from ``spark_default``) starts the auditor on the same
   checkpoint, so it resumes from it, and waits until the new auditor holds the lease and its query
   has started.

With ``ALDEBARAN_SUPERVISOR_STANDBY=true`` a warm standby auditor is kept next to the active one (tasks
``prepare_standby`` → ``submit_standby``); assess promotes it once it holds the lease, and ``failover``
(stop the active, the standby takes over) replaces ``restart`` while it is usable:
:mod:`aldebaran.platform.standby_slot`.

Restarts of one incident back off exponentially (``BACKOFF_BASE_SECONDS`` × 2^(n-1), at most
``BACKOFF_MAX_SECONDS``); the incident closes once the auditor has been healthy for
``STABLE_AFTER_SECONDS`` after its last restart. The supervisor's own state is one object,
``supervisor/auditor/<query>.json``, written with If-Match.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time

from aldebaran.storage.store import safe_segment, open_store, Store
from aldebaran.runtime import lease as leases
from aldebaran.model import Alert
from aldebaran.platform import standby_slot
from aldebaran.platform.settings import SupervisorSettings
from aldebaran.platform.supervisor_state import (  # noqa: F401  (re-exported: others import them from here)
    MAX_HISTORY, NONE, RESTART, WAIT, _signal, _wait_gone, load_state, pid_alive, save_state, settings_with,
    start_ticks, state_key,
)

log = logging.getLogger(__name__)

TERMINATED = ("failed", "stopped")


def target(query_name: str | None = None, checkpoint: str | None = None) -> dict:
    """The supervised auditor: its query name and checkpoint (Params, else ALDEBARAN_AUDIT_*)."""
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.runtime.checkpoint import Checkpoint
    from aldebaran.settings import load

    audit = load(AuditorSettings, query_name=query_name or None, checkpoint=checkpoint or None)
    return {"query_name": audit.query_name, "checkpoint": Checkpoint(audit.checkpoint).root,
            "lease_seconds": audit.lease_seconds}


# --- 1. assess -----------------------------------------------------------------------------------
def observe(store: Store, tgt: dict, state: dict, now: float) -> dict:
    """Everything the decision rests on, as plain JSON (it is logged and kept in the state)."""
    from aldebaran.runtime import heartbeat
    host = socket.gethostname()
    hb = heartbeat.read(store, heartbeat.AUDITOR, tgt["query_name"])
    got = leases.read(store, tgt["checkpoint"])
    lease = got[0] if got else None
    submit = state.get("submit") or {}
    holder_local = bool(lease and lease.get("host") == host)
    return {
        "now": now,
        "host": host,
        "heartbeat_uri": store.uri(heartbeat.key(heartbeat.AUDITOR, tgt["query_name"])),
        "heartbeat": None if hb is None else {
            k: hb.get(k) for k in ("status", "batch_id", "updated_at_ms", "run_id", "pid", "host", "error")},
        "lease": lease,
        "lease_live": bool(lease and lease.get("state") == leases.HELD and float(lease.get("expires_at") or 0) > now),
        "holder_local": holder_local,
        "holder_alive": pid_alive(lease.get("pid")) if holder_local else None,
        "submit": submit or None,
        "submit_alive": (pid_alive(submit.get("pid"), submit.get("start_ticks"))
                         if submit.get("pid") and submit.get("host") == host else None),
        **standby_slot.observe(state, lease, host),  # holder_sid, standby, standby_alive, standby_ready
    }


def diagnose(facts: dict, settings: SupervisorSettings) -> list[str]:
    """What is wrong with the auditor, in words (empty = healthy). Pure: unit-tested on facts."""
    problems: list[str] = []
    now, lease, hb, submit = facts["now"], facts["lease"], facts["heartbeat"], facts["submit"] or {}
    if not facts["lease_live"]:
        problems.append("no auditor holds the checkpoint lease (never started, stopped, or its lease expired): "
                        + leases.describe(lease, now))
    elif facts["holder_local"] and facts["holder_alive"] is False:
        problems.append(f"auditor driver process {lease.get('pid')} on {lease.get('host')} is gone "
                        f"(its lease would expire only at {leases._iso(lease.get('expires_at'))})")
    # Named even when the lease is already released: a driver whose JVM dies releases its lease on the
    # way out, and the operator should read the cause, not only the consequence.
    if (facts["submit_alive"] is False and lease
            and float(lease.get("acquired_at") or 0) >= float(submit.get("at") or 0) - 1):
        problems.append(f"spark-submit driver process {submit.get('pid')} (the JVM of the current auditor) is gone")
    if hb is None:
        problems.append(f"no heartbeat at {facts['heartbeat_uri']}")
    else:
        age = now - float(hb.get("updated_at_ms") or 0) / 1000
        if hb.get("status") in TERMINATED:
            detail = f": {str(hb.get('error'))[:300]}" if hb.get("error") else ""
            problems.append(f"auditor query {hb.get('status')} {age:.0f}s ago{detail}")
        elif age > settings.stale_after_seconds:
            problems.append(f"no progress for {age:.0f}s (threshold {settings.stale_after_seconds:.0f}s, "
                            f"ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS; last batch {hb.get('batch_id')})")
    return problems


def backoff_seconds(restarts: int, settings: SupervisorSettings) -> float:
    """Wait before restart number `restarts + 1` of an incident: 0, base, 2·base, 4·base, … ≤ max."""
    if restarts <= 0:
        return 0.0
    return min(settings.backoff_base_seconds * 2 ** (restarts - 1), settings.backoff_max_seconds)


def decide(facts: dict, problems: list[str], state: dict, settings: SupervisorSettings) -> tuple[dict, dict]:
    """(decision, new state). Pure: unit-tested without services."""
    now = facts["now"]
    state = dict(state)
    incident = dict(state["incident"]) if state.get("incident") else None
    submit = facts["submit"] or {}
    if not problems:
        state["last_healthy_at"] = now
        if incident and now - float(submit.get("at") or 0) >= settings.stable_after_seconds:
            log.info("incident %s closed: healthy for %.0fs since the last restart", incident["id"],
                     now - float(submit.get("at") or 0))
            state.setdefault("closed_incidents", []).append({**incident, "closed_at": now})
            del state["closed_incidents"][:-MAX_HISTORY]
            incident = None
        state["incident"] = incident
        return {"action": NONE, "healthy": True, "reason": "healthy", "page": False, "incident": incident}, state

    if incident is None:
        incident = {"id": f"{int(now)}", "opened_at": now, "first_problem": problems[0], "restarts": 0,
                    "paged": False}
    state["incident"] = incident
    restarts = int(incident["restarts"])
    page = restarts >= settings.page_after_restarts and not incident.get("paged")
    starting_for = now - float(submit.get("at") or 0)
    if submit and starting_for < settings.start_timeout_seconds and facts["submit_alive"] is not False \
            and not submit.get("started_at") and float(submit.get("at") or 0) >= float(incident["opened_at"]) - 1:
        reason = f"auditor submitted {starting_for:.0f}s ago, still starting (timeout {settings.start_timeout_seconds:.0f}s)"
        return {"action": WAIT, "healthy": False, "reason": reason, "page": page, "incident": incident}, state
    delay = backoff_seconds(restarts, settings)
    if submit and starting_for < delay:
        reason = f"backing off: restart {restarts + 1} of incident {incident['id']} in {delay - starting_for:.0f}s"
        return {"action": WAIT, "healthy": False, "reason": reason, "page": page, "incident": incident}, state
    return {"action": RESTART, "healthy": False, "reason": "; ".join(problems), "page": page,
            "incident": incident}, state


def assess(query_name: str | None = None, checkpoint: str | None = None, overrides: dict | None = None) -> dict:
    """Task 1: observe, (promote a standby that took over,) diagnose, decide; keep the decision in the
    supervisor state; return it."""
    settings = settings_with(overrides)
    tgt = target(query_name, checkpoint)
    store = open_store()
    key = state_key(settings, tgt["query_name"])
    state, etag = load_state(store, key)
    facts, state = standby_slot.promote(observe(store, tgt, state, time.time()), state)
    if facts.get("promoted"):
        log.warning("the standby took over: spark-submit %s is now the supervised auditor", facts["submit"]["pid"])
    problems = diagnose(facts, settings)
    decision, state = decide(facts, problems, state, settings)
    decision = standby_slot.choose(decision, facts, settings)
    decision.update(tgt)
    decision.update({
        "problems": problems,
        "observed_at": facts["now"],
        "settings": settings.model_dump(),
        # A standby slot to look after (on, or one recorded that must be stopped): see route().
        "standby_slot": bool(settings.standby or facts.get("standby")),
        "auditor_args": ["--checkpoint", tgt["checkpoint"], "--query-name", tgt["query_name"],
                         # a revoked remote holder needs up to one ttl to stop: wait for its lease.
                         "--lease-wait-seconds", str(float(tgt["lease_seconds"]) + 10)],
    })
    state.update({"query_name": tgt["query_name"], "checkpoint": tgt["checkpoint"], "last_assessment": {
        k: decision[k] for k in ("action", "reason", "problems", "observed_at")}})
    save_state(store, key, state, etag)
    level = logging.INFO if decision["healthy"] else logging.WARNING
    log.log(level, "auditor %s: %s — %s", tgt["query_name"], decision["action"], decision["reason"])
    for problem in problems:
        log.warning("  problem: %s", problem)
    log.info("observed: %s", json.dumps({k: v for k, v in facts.items() if k != "now"}, default=str))
    return decision


def assess_from_params(params: dict) -> dict:
    """The DAG's Params → :func:`assess` (empty = the ALDEBARAN_AUDIT_* / ALDEBARAN_SUPERVISOR_* setting)."""
    given = {k: v for k, v in dict(params).items() if v not in ("", None)}
    overrides = {k: given[k] for k in SupervisorSettings.model_fields if k in given}
    return assess(given.get("query_name"), given.get("checkpoint"), overrides)


def route(decision: dict) -> list[str]:
    """The DAG's branch after assess: the tasks this decision needs, and no others. Each task is a process of
    its own (~0.8 CPU-s of Airflow's per run); a healthy auditor without a standby needs none, so the
    supervisor's minute costs one task instead of four (docs/design.md §5 "The resting cost")."""
    follow = []
    if decision.get("page"):
        follow.append("page")
    if decision["action"] in (RESTART, standby_slot.FAILOVER):
        follow.append("prepare_restart")
    if decision.get("standby_slot", True):
        follow.append("prepare_standby")
    return follow


# --- 2. page ---------------------------------------------------------------------------------------
def page_alert(decision: dict) -> Alert:
    """The operational alert of an incident, shaped like an audit alert so every channel can send it."""
    incident = decision["incident"]
    query = decision["query_name"]
    return Alert.from_dict({
        "alert_id": safe_segment(f"ops-auditor-{query}-{incident['id']}", "alert id"),
        "kind": "AUDITOR_DOWN",
        "order_id": f"auditor:{query}",
        "client": "aldebaran-platform",
        "stock": None,
        "requested": None,
        "purchased": None,
        "purchase_count": None,
        "trigger_event_id": None,
        "trigger_event_ts": None,
        "detected_at": int(float(incident["opened_at"]) * 1000),
        "message": (f"The streaming auditor {query!r} (checkpoint {decision['checkpoint']}) was restarted "
                    f"{incident['restarts']} times since {leases._iso(incident['opened_at'])} and "
                    f"{'its standby took over again' if decision.get('healthy') else 'is still unhealthy'}: "
                    f"{decision['reason']}"),
    })


def page_if_needed(decision: dict) -> dict:
    """Task 2: page once per incident (per channel: the delivery ledger makes it exactly once)."""
    if not decision.get("page"):
        return {"paged": False}
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.delivery.corrupt import noted
    from aldebaran.delivery.dispatcher import default_ledger, deliver_direct
    from aldebaran.delivery.stats import DispatchStats
    from aldebaran.exceptions import LedgerCorrupt

    alert = page_alert(decision)
    ledger = default_ledger()
    stats = DispatchStats()
    owner = f"{socket.gethostname()}:{os.getpid()}:supervisor"
    for channel in configured_channels():
        try:
            deliver_direct(ledger, channel, alert, owner, stats)
        except LedgerCorrupt as exc:  # this channel's page record cannot be read: named; the others are paged
            noted(exc, None, f"supervisor page ({channel.name})")
        channel.close()
    log.error("PAGED: %s (sent %s, already sent %s, failed %s)", alert.extra["message"], stats.sent, stats.already,
              stats.failed)
    settings = settings_with(None)
    store = open_store()
    key = state_key(settings, decision["query_name"])
    state, etag = load_state(store, key)
    if state.get("incident") and state["incident"].get("id") == decision["incident"]["id"]:
        state["incident"]["paged"] = True
        save_state(store, key, state, etag)
    return {"paged": True, "alert_id": alert.alert_id, "sent": stats.sent, "already": stats.already,
            "failed": stats.failed}


# --- 3. prepare_restart -------------------------------------------------------------------------------
def prepare_restart(decision: dict) -> bool:
    """Task 3 (short-circuit): False unless a restart is due; then clear the way for the new auditor."""
    if decision["action"] == standby_slot.FAILOVER:
        if not standby_slot.failover(decision):
            return False  # the standby took over: nothing to submit
    elif decision["action"] != RESTART:
        log.info("no restart: %s", decision["reason"])
        return False
    settings = settings_with(decision.get("settings"))
    store = open_store()
    # A standby the restart does not use would take the lease the old auditor releases.
    standby_slot.stop(store, decision["query_name"], settings, "the auditor is restarted cold")
    stop_local(store, decision["query_name"], decision["checkpoint"], settings.stop_timeout_seconds,
               reason=f"supervisor restart: {decision['reason']}")
    got = leases.read(store, decision["checkpoint"])
    if got and got[0].get("state") == leases.HELD:
        record = got[0]
        if record.get("host") == socket.gethostname() and not pid_alive(record.get("pid")):
            leases.end(store, decision["checkpoint"], leases.BROKEN,
                       f"holder pid {record.get('pid')} gone (seen by the supervisor)")
        elif record.get("host") != socket.gethostname() and float(record.get("expires_at") or 0) > time.time():
            leases.end(store, decision["checkpoint"], leases.REVOKED,
                       f"revoked by the supervisor: {decision['reason']}",
                       grace_seconds=float(record.get("ttl_seconds") or 30))
    return True


def stop_local(store: Store, query: str, checkpoint: str, timeout: float, reason: str) -> bool:
    """Stop the auditor this host runs on `checkpoint`, if any: SIGINT to the driver (clean stop, lease
    released), then SIGKILL to the spark-submit process group. True if something was stopped."""
    settings = settings_with(None)
    state, _ = load_state(store, state_key(settings, query))
    submit = state.get("submit") or {}
    host = socket.gethostname()
    got = leases.read(store, checkpoint)
    holder = got[0] if got and got[0].get("host") == host and got[0].get("state") == leases.HELD else None
    targets: list[tuple[int, int | None]] = []
    if holder and pid_alive(holder.get("pid")):
        targets.append((int(holder["pid"]), None))
    if submit.get("host") == host and pid_alive(submit.get("pid"), submit.get("start_ticks")):
        targets.append((int(submit["pid"]), submit.get("start_ticks")))
    if not targets:
        return False
    log.warning("stopping the auditor on %s (%s): pids %s", checkpoint, reason, [p for p, _ in targets])
    if holder and pid_alive(holder.get("pid")):
        _signal(int(holder["pid"]), signal.SIGINT)  # KeyboardInterrupt → query.stop(), lease released
    if not _wait_gone(targets, timeout):
        for pid, ticks in targets:
            if pid_alive(pid, ticks):
                log.warning("pid %d did not stop within %.0fs: SIGKILL", pid, timeout)
                if submit.get("pid") == pid:
                    _signal(pid, signal.SIGKILL, group=True)  # the spark-submit's own session
                _signal(pid, signal.SIGKILL)
        _wait_gone(targets, 10)
    return True
