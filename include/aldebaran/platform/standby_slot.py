"""The auditor supervisor's standby slot (``ALDEBARAN_SUPERVISOR_STANDBY=true``): a warm standby auditor
(:mod:`aldebaran.audit.sparkjob.standby`) that the supervisor launches, tracks, promotes and replaces.

Its record is ``standby`` in the supervisor state, next to ``submit`` (the supervised active auditor):
``{"at", "pid", "host", "start_ticks", "log", "ready_at"}`` — the pid is the standby's spark-submit, started
in a session of its own like the active's.

- **launch** (tasks ``prepare_standby`` → ``submit_standby``, after the active's part of the run): only
  while a live auditor holds the checkpoint lease (a standby started earlier would take a free lease and
  be the active); the task returns once the standby logged that its Spark session is up and it waits on
  the lease (:data:`aldebaran.audit.sparkjob.standby.READY_LINE`). A dead standby is replaced, one still
  not ready after the start timeout is stopped and replaced.
- **promote** (every assess, before the diagnosis): the standby took over when the lease holder is a
  process of its session, ``os.getsid(holder pid) == standby pid``. Its record becomes ``submit`` (the
  auditor the supervisor watches, submitted at the lease's ``acquired_at``), the slot empties, the takeover
  counts as a restart of the incident (paging after ``page_after_restarts`` as for restarts), and the run
  launches a fresh standby. Without this the old active's dead spark-submit would read as "the current
  auditor's JVM is gone" and the supervisor would restart a healthy auditor.
- **failover** (an unhealthy active and a standby that is ready or still starting: the decision
  ``failover`` replaces ``restart``, backoff included): stop only the active's own processes (SIGINT to its
  driver, which releases the lease; SIGKILL to its session after the stop timeout; a holder on another host
  is revoked), wait until the standby holds the lease and its query started, promote it. A standby that
  dies or does not take over within the start timeout is stopped, and the run falls back to a cold restart.

Client deploy mode only (``spark_default``): the standby runs on the supervisor's host, where its pid and
session can be seen.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from aldebaran.runtime import lease as leases
from aldebaran.audit.sparkjob.standby import READY_LINE
from aldebaran.exceptions import AuditorError
from aldebaran.storage.store import open_store, Store
from aldebaran.platform import auditor_submit
from aldebaran.platform import supervisor_state as sup
from aldebaran.platform.settings import SupervisorSettings

log = logging.getLogger(__name__)

FAILOVER = "failover"
ABSENT, DEAD, STARTING, READY, STUCK = "absent", "dead", "starting", "ready", "stuck"
USABLE = (READY, STARTING)
# A standby that died this soon after its launch is relaunched no sooner than this long after that launch:
# one that crashes as it starts (bad config, no executor slots) is not relaunched every supervisor run. (A
# stuck one is stopped after the start timeout, which paces its relaunches already.)
RELAUNCH_BACKOFF_SECONDS = 300.0


def relaunch_wait(slot: dict | None, now: float, backoff: float = RELAUNCH_BACKOFF_SECONDS) -> float:
    """Seconds until a failed standby may be relaunched (0: now). `slot` is the failed one's record."""
    launched = float((slot or {}).get("at") or 0)
    return max(0.0, launched + backoff - now) if launched else 0.0


def session_of(pid: int | None) -> int | None:
    """The session id of a process on this host (None: no such process)."""
    if not pid:
        return None
    try:
        return os.getsid(int(pid))
    except (OSError, ValueError):
        return None


# --- pure: unit-tested on facts -----------------------------------------------------------------------------
def status(facts: dict, settings: SupervisorSettings) -> str:
    """absent | dead | starting | ready | stuck (alive, not ready after the start timeout)."""
    slot = facts.get("standby")
    if not slot:
        return ABSENT
    if not facts.get("standby_alive"):
        return DEAD
    if facts.get("standby_ready"):
        return READY
    if facts["now"] - float(slot.get("at") or 0) < settings.start_timeout_seconds:
        return STARTING
    return STUCK


def took_over(facts: dict) -> bool:
    """Does the standby hold the lease (its holder is a process of the standby's spark-submit session)?"""
    slot = facts.get("standby") or {}
    return bool(slot.get("pid") and slot.get("host") == facts.get("host") and facts.get("lease_live")
                and facts.get("holder_local") and facts.get("holder_sid") == slot["pid"])


def _reported_since(hb: dict | None, since: float) -> bool:
    return bool(hb and float(hb.get("updated_at_ms") or 0) / 1000 >= since - 1
                and hb.get("status") in ("started", "running", "idle"))


def promote(facts: dict, state: dict) -> tuple[dict, dict]:
    """(facts, state) with a standby that took over made the supervised auditor. A promoted auditor counts
    as started once its own query reported (until then an older heartbeat, the replaced auditor's last one,
    makes it "still starting" for the decision, not a failed auditor); a later run records that."""
    submit = state.get("submit") or {}
    if not took_over(facts):
        if submit.get("promoted_at") and not submit.get("started_at") \
                and _reported_since(facts.get("heartbeat"), float(submit["at"])):
            submit = {**submit, "started_at": facts["now"]}
            return {**facts, "submit": submit}, {**state, "submit": submit}
        return facts, state
    now, slot, lease = facts["now"], facts["standby"], facts["lease"]
    acquired = float(lease.get("acquired_at") or now)
    replaced = submit
    incident = dict(state["incident"]) if state.get("incident") else {
        "id": f"{int(acquired)}", "opened_at": acquired, "restarts": 0, "paged": False,
        "first_problem": f"the active auditor (spark-submit {replaced.get('pid')}) lost the checkpoint lease"}
    incident["restarts"] = int(incident.get("restarts", 0)) + 1
    started = _reported_since(facts.get("heartbeat"), acquired)
    submit = {**slot, "at": acquired, "started_at": acquired if started else None, "launched_at": slot.get("at"),
              "promoted_at": now, "external_id": None, "incident": incident["id"],
              "reason": f"standby took over from spark-submit {replaced.get('pid')}"}
    state = {**state, "submit": submit, "standby": None, "incident": incident,
             "takeovers": [*(state.get("takeovers") or []), {
                 "acquired_at": acquired, "promoted_at": now, "pid": slot["pid"], "replaced_pid": replaced.get("pid"),
                 "lease_generation": lease.get("generation"), "incident": incident["id"]}][-sup.MAX_HISTORY:]}
    facts = {**facts, "submit": submit, "submit_alive": facts.get("standby_alive"), "standby": None,
             "standby_alive": None, "standby_ready": False, "promoted": True}
    return facts, state


def choose(decision: dict, facts: dict, settings: SupervisorSettings) -> dict:
    """The decision with the standby in it: ``restart`` → ``failover`` when the standby is usable; a
    promotion that reached ``page_after_restarts`` pages (a takeover heals, so a crash loop would not)."""
    slot = facts.get("standby") or {}
    st = status(facts, settings)
    decision = {**decision, "standby": {"enabled": settings.standby, "status": st, "pid": slot.get("pid"),
                                        "promoted": bool(facts.get("promoted"))}}
    if decision["action"] == sup.RESTART and settings.standby and st in USABLE:
        decision["action"] = FAILOVER
        decision["reason"] = f"{decision['reason']} → failover to the standby (spark-submit {slot.get('pid')}, {st})"
    incident = decision.get("incident")
    if facts.get("promoted") and incident:
        decision["reason"] = (f"the standby took over (spark-submit {facts['submit']['pid']}; restart "
                              f"{incident['restarts']} of incident {incident['id']}); {decision['reason']}")
        if int(incident["restarts"]) >= settings.page_after_restarts and not incident.get("paged"):
            decision["page"] = True
    return decision


# --- observe --------------------------------------------------------------------------------------------------
def observe(state: dict, lease: dict | None, host: str) -> dict:
    """The slot's facts for :func:`aldebaran.platform.supervisor.observe`."""
    slot = state.get("standby") or None
    local = bool(slot and slot.get("host") == host)
    holder_local = bool(lease and lease.get("host") == host)
    return {
        "holder_sid": session_of(lease.get("pid")) if holder_local else None,
        "standby": slot,
        "standby_alive": sup.pid_alive(slot.get("pid"), slot.get("start_ticks")) if local else (None if not slot else False),
        "standby_ready": bool(slot and (slot.get("ready_at") or (local and _logged_ready(slot.get("log"))))),
    }


def _logged_ready(path: str | None) -> bool:
    return bool(path) and Path(path).exists() and READY_LINE in Path(path).read_text(errors="replace")


# --- failover (task prepare_restart) -------------------------------------------------------------------------
def failover(decision: dict) -> bool:
    """Stop the unhealthy active and let the standby take over. False: done (no submit); True: the standby
    failed, it was stopped, fall back to a cold restart."""
    settings = sup.settings_with(decision.get("settings"))
    store = open_store()
    key = sup.state_key(settings, decision["query_name"])
    state, _ = sup.load_state(store, key)
    submit = state.get("submit") or {}
    if float(submit.get("promoted_at") or 0) >= float(decision["observed_at"]):
        log.info("the standby already took over in this run (a retried task): waiting for its query")
        auditor_submit.wait_started(decision, float(submit["at"]))
        return False
    slot = state.get("standby") or {}
    if not slot.get("pid"):
        log.warning("no standby in the slot any more: cold restart")
        return True
    log.warning("failover to the standby (spark-submit %s): %s", slot["pid"], decision["reason"])
    stop_active(store, decision, state, settings)
    record = _wait_takeover(store, decision["checkpoint"], slot, settings.start_timeout_seconds)
    if record is None:
        log.error("the standby (spark-submit %s) did not take over within %.0fs: stopping it, cold restart",
                  slot["pid"], settings.start_timeout_seconds)
        stop(store, decision["query_name"], settings, "did not take over", force=True)
        return True
    state, etag = sup.load_state(store, key)
    facts = {"now": time.time(), "host": socket.gethostname(), "lease": record, "lease_live": True,
             "holder_local": True, "holder_sid": slot["pid"], "standby": slot, "standby_alive": True}
    _, state = promote(facts, state)
    sup.save_state(store, key, state, etag)
    log.info("standby promoted: %s", leases.describe(record))
    auditor_submit.wait_started(decision, float(record["acquired_at"]))
    return False


def stop_active(store: Store, decision: dict, state: dict, settings: SupervisorSettings) -> None:
    """Stop the active auditor's own processes, never the standby's: SIGINT to the lease holder (its query
    stops, the lease is released), SIGKILL to its spark-submit session after the stop timeout. A holder on
    another host is revoked (free after one ttl of grace)."""
    host = socket.gethostname()
    standby_pid = (state.get("standby") or {}).get("pid")
    submit = state.get("submit") or {}
    got = leases.read(store, decision["checkpoint"])
    record = got[0] if got and got[0].get("state") == leases.HELD else None
    holder = None
    if record and record.get("host") == host and sup.pid_alive(record.get("pid")) \
            and session_of(record["pid"]) != standby_pid:
        holder = int(record["pid"])
    targets: list[tuple[int, int | None]] = [(holder, None)] if holder else []
    if submit.get("host") == host and submit.get("pid") not in (None, standby_pid) \
            and sup.pid_alive(submit["pid"], submit.get("start_ticks")):
        targets.append((int(submit["pid"]), submit.get("start_ticks")))
    if holder:
        sup._signal(holder, signal.SIGINT)  # KeyboardInterrupt → query.stop(), lease released
    if targets and not sup._wait_gone(targets, settings.stop_timeout_seconds):
        for pid, ticks in targets:
            if sup.pid_alive(pid, ticks):
                log.warning("pid %d did not stop within %.0fs: SIGKILL", pid, settings.stop_timeout_seconds)
                if pid == submit.get("pid"):
                    sup._signal(pid, signal.SIGKILL, group=True)
                sup._signal(pid, signal.SIGKILL)
        sup._wait_gone(targets, 10)
    if record and record.get("host") != host and float(record.get("expires_at") or 0) > time.time():
        leases.end(store, decision["checkpoint"], leases.REVOKED, f"revoked for a failover: {decision['reason']}",
                   grace_seconds=float(record.get("ttl_seconds") or 30))


def _wait_takeover(store: Store, checkpoint: str, slot: dict, timeout: float) -> dict | None:
    """The lease record once the standby holds it; None if it dies or the timeout passes first."""
    host = socket.gethostname()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = leases.read(store, checkpoint)
        record = got[0] if got else None
        if (record and record.get("state") == leases.HELD and record.get("host") == host
                and session_of(record.get("pid")) == slot["pid"]):
            return record
        if not sup.pid_alive(slot["pid"], slot.get("start_ticks")):
            log.error("the standby (spark-submit %s) exited before it took over%s", slot["pid"], auditor_submit.tail(
                Path(slot["log"]) if slot.get("log") else None))
            return None
        time.sleep(0.2)
    return None


# --- launch (tasks prepare_standby, submit_standby) ------------------------------------------------------------
def standby_due(decision: dict) -> bool:
    """Task prepare_standby (short-circuit): True when a (new) standby is to be launched now."""
    settings = sup.settings_with(decision.get("settings"))
    store = open_store()
    query = decision["query_name"]
    state, _ = sup.load_state(store, sup.state_key(settings, query))
    host = socket.gethostname()
    got = leases.read(store, decision["checkpoint"])
    lease = got[0] if got else None
    facts = {"now": time.time(), "host": host, **observe(state, lease, host)}
    st = status(facts, settings)
    if not settings.standby:
        if st not in (ABSENT, DEAD):
            stop(store, query, settings, "ALDEBARAN_SUPERVISOR_STANDBY is off")
        return False
    if st in USABLE:  # a standby that took over is one too: the next assess promotes it
        log.info("standby (spark-submit %s) %s", facts["standby"]["pid"], st)
        return False
    if st == DEAD and (wait := relaunch_wait(facts["standby"], facts["now"])) > 0:
        log.warning("standby (spark-submit %s) died %.0fs after its launch: the next one in %.0fs (backoff)",
                    facts["standby"]["pid"], facts["now"] - float(facts["standby"]["at"]), wait)
        return False
    if st == STUCK:
        stop(store, query, settings, f"not ready {settings.start_timeout_seconds:.0f}s after its launch")
    elif st == DEAD:
        log.warning("standby (spark-submit %s) is gone: launching a new one", facts["standby"]["pid"])
    if not (lease and lease.get("state") == leases.HELD and float(lease.get("expires_at") or 0) > time.time()):
        log.warning("no auditor holds the checkpoint lease: no standby now (it would take the lease itself)")
        return False
    return True


def record(decision: dict, pid: int, log_path: str, launched_at: float) -> None:
    settings = sup.settings_with(decision.get("settings"))
    store = open_store()
    key = sup.state_key(settings, decision["query_name"])
    state, etag = sup.load_state(store, key)
    state["standby"] = {"at": launched_at, "pid": pid, "host": socket.gethostname(),
                        "start_ticks": sup.start_ticks(pid), "log": log_path, "ready_at": None}
    sup.save_state(store, key, state, etag)


def wait_ready(decision: dict, proc: subprocess.Popen, log_path: Path, launched_at: float) -> dict:
    """Block until the standby logs it waits on the lease; fail with its log tail if it exits first or
    the start timeout passes."""
    settings = sup.settings_with(decision.get("settings"))
    deadline = time.monotonic() + settings.start_timeout_seconds
    while not _logged_ready(str(log_path)):
        if proc.poll() is not None:
            raise AuditorError(f"the standby's spark-submit exited with code {proc.returncode} before it was ready "
                               f"(log {log_path}){auditor_submit.tail(log_path)}")
        if time.monotonic() > deadline:
            raise AuditorError(f"the standby was not ready within {settings.start_timeout_seconds:.0f}s "
                               f"(ALDEBARAN_SUPERVISOR_START_TIMEOUT_SECONDS; log {log_path}){auditor_submit.tail(log_path)}")
        time.sleep(0.5)
    ready_in = time.time() - launched_at
    store = open_store()
    key = sup.state_key(settings, decision["query_name"])
    state, etag = sup.load_state(store, key)
    if (state.get("standby") or {}).get("pid") == proc.pid:
        state["standby"]["ready_at"] = time.time()
        sup.save_state(store, key, state, etag)
    log.info("standby for %s ready in %.1fs (spark-submit %d, log %s)", decision["query_name"], ready_in, proc.pid,
             log_path)
    return {"pid": proc.pid, "log": str(log_path), "ready_in_seconds": round(ready_in, 1)}


def stop(store: Store, query: str, settings: SupervisorSettings, reason: str, force: bool = False) -> bool:
    """Stop the slot's standby (SIGTERM to its session, SIGKILL after the stop timeout) and empty the slot.
    A standby that holds the lease is the auditor now: left alone unless `force`. True if one was stopped."""
    key = sup.state_key(settings, query)
    state, etag = sup.load_state(store, key)
    slot = state.get("standby") or {}
    pid, ticks = slot.get("pid"), slot.get("start_ticks")
    if not pid:
        return False
    if not force and state.get("checkpoint"):
        got = leases.read(store, state["checkpoint"])
        if got and got[0].get("state") == leases.HELD and session_of(got[0].get("pid")) == pid:
            log.warning("standby (spark-submit %s) holds the lease: not stopped (%s)", pid, reason)
            return False
    stopped = slot.get("host") == socket.gethostname() and sup.pid_alive(pid, ticks)
    if stopped:
        log.warning("stopping the standby (spark-submit %s): %s", pid, reason)
        sup._signal(int(pid), signal.SIGTERM, group=True)
        if not sup._wait_gone([(int(pid), ticks)], settings.stop_timeout_seconds):
            sup._signal(int(pid), signal.SIGKILL, group=True)
            sup._wait_gone([(int(pid), ticks)], 10)
    state, etag = sup.load_state(store, key)
    if (state.get("standby") or {}).get("pid") == pid:
        state["standby"] = None
        sup.save_state(store, key, state, etag)
    return stopped
