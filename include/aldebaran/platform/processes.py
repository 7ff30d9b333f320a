"""Supervising a long-running process that writes a heartbeat: the steps the dispatch supervisor
(aldebaran.platform.dispatch_supervisor) and the lane supervisor (aldebaran.platform.lane_supervisor) share.
A :class:`Kind` names the process's heartbeat and how to recognise its command line; per process, each run
**observes** its heartbeat and, on this host, whether it lives (the pid + start ticks recorded at launch,
or the heartbeat's pid), **diagnoses** and **decides**, purely (``none``, ``wait``: still starting or
backing off 0, base, 2·base, … ≤ max within one incident; ``restart``), and **restarts** it: SIGTERM to
what is left, SIGKILL to its process group after ``stop_timeout_seconds``, launch it detached with its own
log, record pid/start ticks/log, return once its heartbeat says ``running``. State: one object per
process, ``<state prefix>/<name>.json``, written with If-Match.

The heartbeat is written by a thread of its own (aldebaran.runtime.heartbeat), so a stale one means the process
is frozen or dead, never merely busy. Whether it works is judged on the progress its heartbeat carries
(:func:`stalled`): a unit with work pending whose marks have not moved for the progress limit has lost
progress; a slow unit that progresses is healthy however long each step takes.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from aldebaran.runtime import heartbeat
from aldebaran.runtime.probes import stalled  # noqa: F401  (one rule for the supervisors and /readyz; imported from here too)
from aldebaran.exceptions import AlreadyExists, DispatcherError, PreconditionFailed
from aldebaran.runtime.procs import pid_alive, start_ticks
from aldebaran.platform.supervisor import _wait_gone, backoff_seconds, load_state
from aldebaran.storage.store import safe_segment

log = logging.getLogger(__name__)

NONE, WAIT, RESTART = "none", "wait", "restart"
TERMINATED = ("failed", "stopped")
MAX_HISTORY = 20


@dataclass(frozen=True)
class Kind:
    """A kind of supervised process: what it is called, where its heartbeat is, how its command line looks."""

    label: str  # "dispatcher", "lane": in messages, and the heartbeat's role (aldebaran.runtime.heartbeat)
    argv_words: tuple[bytes, ...]  # all in /proc/<pid>/cmdline: a pid read from a heartbeat is this process
    stale_env: str  # the setting of the stale limit, named in the reason
    start_env: str  # the setting of the start timeout
    progress_env: str = ""  # the setting of the progress limit (a kind whose heartbeat carries progress)


def broken_partitions(heartbeat: dict | None) -> dict[str, str]:
    """{"<channel>/<partition>": why} for each partition a dispatcher's heartbeat says it stopped delivering
    (:func:`observe` records them; none for a heartbeat without ``partitions``)."""
    return {f"{channel}/{number}": str(part["broken"])
            for channel, parts in ((heartbeat or {}).get("partitions") or {}).items()
            for number, part in (parts or {}).items() if (part or {}).get("broken")}


# --- state ---------------------------------------------------------------------------------------
def state_key(cfg, name: str) -> str:
    return f"{cfg.state_prefix.strip('/')}/{safe_segment(name, 'process name')}.json"


def save_state(store, key: str, state: dict, etag: str | None) -> str:
    body = json.dumps(state, separators=(",", ":"), default=str).encode()
    try:
        return store.create(key, body) if etag is None else store.replace(key, body, etag)
    except (AlreadyExists, PreconditionFailed):
        raise DispatcherError(f"supervisor state {store.uri(key)} changed during this run: is a second "
                              "supervisor running? (the dispatch_supervisor DAG runs with max_active_runs=1)") from None


# --- 1-3. observe, diagnose, decide --------------------------------------------------------------------
def observe(store, name: str, channels: list[str], state: dict, now: float, kind: Kind) -> dict:
    """Everything the decision rests on, as plain JSON (logged and kept in the state)."""
    host = socket.gethostname()
    hb = heartbeat.read(store, kind.label, name)
    launch = state.get("launch") or {}
    hb_local = bool(hb and hb.get("host") == host and hb.get("pid"))
    ticks = launch.get("start_ticks") if hb and hb.get("pid") == launch.get("pid") else None
    return {
        "now": now, "host": host, "name": name, "channels": sorted(channels),
        "kind": kind.label, "stale_env": kind.stale_env, "progress_env": kind.progress_env,
        "heartbeat_uri": store.uri(heartbeat.key(kind.label, name)),
        "heartbeat": None if hb is None else {
            **{k: hb.get(k) for k in ("status", "pid", "host", "at", "started_at", "error")},
            "channels": sorted(hb.get("channels") or []), "broken": broken_partitions(hb),
            "progress": hb.get("progress")},
        "heartbeat_alive": pid_alive(hb["pid"], ticks) if hb_local else None,
        "launch": launch or None,
        "launch_alive": (pid_alive(launch.get("pid"), launch.get("start_ticks"))
                         if launch.get("pid") and launch.get("host") == host else None),
    }


def diagnose(facts: dict, cfg) -> list[str]:
    """What is wrong with the process, in words (empty = healthy). Pure."""
    problems: list[str] = []
    now, hb, launch = facts["now"], facts["heartbeat"], facts["launch"] or {}
    label = facts.get("kind", "dispatcher")
    if hb is None:
        problems.append(f"no heartbeat at {facts['heartbeat_uri']}")
    else:
        age = now - float(hb.get("at") or 0)
        if hb.get("status") in TERMINATED:
            detail = f": {str(hb.get('error'))[:300]}" if hb.get("error") else ""
            problems.append(f"{label} {hb.get('status')} {age:.0f}s ago{detail}")
        elif facts["heartbeat_alive"] is False:
            problems.append(f"{label} process {hb.get('pid')} on {hb.get('host')} is gone "
                            f"(last heartbeat {age:.0f}s ago)")
        elif age > cfg.stale_after_seconds:
            problems.append(f"heartbeat {age:.0f}s old (limit {cfg.stale_after_seconds:.0f}s, "
                            f"{facts.get('stale_env', 'ALDEBARAN_DISPATCH_SUPERVISOR_STALE_AFTER_SECONDS')})")
        else:
            # Judged only on a live, fresh heartbeat: otherwise the reasons above say more.
            limit = getattr(cfg, "progress_limit_seconds", None)
            if limit is not None and hb.get("status") not in TERMINATED:
                for unit, why in stalled(hb.get("progress"), now, limit).items():
                    problems.append(f"{label} {facts['name']}: {unit}: {why} (limit {limit:.0f}s, "
                                    f"{facts.get('progress_env') or 'progress limit'})")
        if hb.get("channels") and hb["channels"] != facts["channels"]:
            problems.append(f"it runs channel(s) {', '.join(hb['channels'])}, configured: {', '.join(facts['channels'])}")
    # A launch that died before its first heartbeat (bad connection, import error): name its log.
    if facts["launch_alive"] is False and (hb is None or float(hb.get("at") or 0) < float(launch.get("at") or 0)):
        problems.append(f"launched process {launch.get('pid')} exited before it reported (log {launch.get('log')})")
    return problems


def decide(facts: dict, problems: list[str], state: dict, cfg) -> tuple[dict, dict]:
    """(decision, new state). Pure: tests/unit/aldebaran/platform/test_dispatch_supervisor_decisions.py."""
    now = facts["now"]
    state = dict(state)
    incident = dict(state["incident"]) if state.get("incident") else None
    launch = facts["launch"] or {}
    launched_at = float(launch.get("at") or 0)
    if not problems:
        state["last_healthy_at"] = now
        if incident and now - launched_at >= cfg.stable_after_seconds:
            log.info("incident %s closed: healthy for %.0fs since the last restart", incident["id"], now - launched_at)
            incident = None
        state["incident"] = incident
        return {"action": NONE, "healthy": True, "reason": "healthy", "incident": incident}, state

    if incident is None:
        incident = {"id": f"{int(now)}", "opened_at": now, "first_problem": problems[0], "restarts": 0}
    state["incident"] = incident
    restarts = int(incident["restarts"])
    starting_for = now - launched_at
    if (launch and not launch.get("started_at") and facts["launch_alive"] is not False
            and starting_for < cfg.start_timeout_seconds and launched_at >= float(incident["opened_at"]) - 1):
        reason = f"launched {starting_for:.0f}s ago, still starting (timeout {cfg.start_timeout_seconds:.0f}s)"
        return {"action": WAIT, "healthy": False, "reason": reason, "incident": incident}, state
    delay = backoff_seconds(restarts, cfg)
    if launch and starting_for < delay:
        reason = (f"backing off: restart {restarts + 1} of incident {incident['id']} in "
                  f"{delay - starting_for:.0f}s ({'; '.join(problems)})")
        return {"action": WAIT, "healthy": False, "reason": reason, "incident": incident}, state
    return {"action": RESTART, "healthy": False, "reason": "; ".join(problems), "incident": incident}, state


# --- 4. stop, launch, wait ---------------------------------------------------------------------------
def _is_kind(pid: int, kind: Kind) -> bool:
    """Guards signals to a pid read from a heartbeat (no start ticks there): is it this kind's process
    (``dispatch --follow``, ``lanes run``)?"""
    try:
        argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return all(word in argv for word in kind.argv_words)


def _signal(pid: int, sig: int) -> None:
    try:
        # The supervisor launches each process as the leader of its own session: signal the group.
        os.killpg(pid, sig) if os.getpgid(pid) == pid else os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(store, name: str, cfg, reason: str, kind: Kind) -> list[int]:
    """Stop the process `name` if it runs on this host: SIGTERM (a dispatcher finishes the runs in hand
    and commits), SIGKILL after the stop timeout. Returns the pids it signalled."""
    host = socket.gethostname()
    launch = load_state(store, state_key(cfg, name))[0].get("launch") or {}
    hb = heartbeat.read(store, kind.label, name) or {}
    targets: list[tuple[int, int | None]] = []
    if launch.get("host") == host and pid_alive(launch.get("pid"), launch.get("start_ticks")):
        targets.append((int(launch["pid"]), launch.get("start_ticks")))
    if (hb.get("host") == host and hb.get("pid") and hb.get("pid") != launch.get("pid")
            and pid_alive(hb["pid"]) and _is_kind(hb["pid"], kind)):
        targets.append((int(hb["pid"]), start_ticks(int(hb["pid"]))))
    if not targets:
        return []
    log.warning("stopping %s %s (%s): pids %s", kind.label, name, reason, [p for p, _ in targets])
    for pid, _ in targets:
        _signal(pid, signal.SIGTERM)
    if not _wait_gone(targets, cfg.stop_timeout_seconds):
        for pid, ticks in targets:
            if pid_alive(pid, ticks):
                log.warning("%s pid %d did not stop within %.0fs: SIGKILL", kind.label, pid, cfg.stop_timeout_seconds)
                _signal(pid, signal.SIGKILL)
        _wait_gone(targets, 10)
    return [p for p, _ in targets]


def launch_detached(log_name: str, command: list[str], extra_env: dict[str, str] | None = None
                    ) -> tuple[subprocess.Popen, Path]:
    """Start `command` in a session of its own (it outlives the task that started it), its output in
    ``<run dir>/logs/<log_name>-<time>.log``. It runs outside Airflow and reads only its environment, so
    it also gets the object store's connection as Airflow resolved it for this task (aldebaran.storage.s3access):
    every such process keeps its heartbeat, and the dispatchers their ledger, there."""
    from aldebaran.runtime import paths
    from aldebaran.platform import executors
    from aldebaran.storage.s3access import connection_env

    executors.check(log_name)  # it must outlive the task: not in a pod per task
    logs = paths.run_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{log_name}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    try:
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=str(paths.ROOT),
                                    # Not configuration: the child inherits this environment (plus connections).
                                    env={**os.environ, **connection_env(), **(extra_env or {})})
    except OSError as exc:
        raise DispatcherError(f"{log_name}: cannot run {command[0]}: {exc}") from exc
    return proc, log_path


def _tail(path: Path, lines: int = 25) -> str:
    text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
    return "\nLast lines of its log:\n" + "\n".join(text) if text else ""


def wait_running(store, name: str, proc: subprocess.Popen, log_path: Path, timeout: float,
                 kind: Kind) -> dict:
    """Block until the launched process's heartbeat says ``running``; fail with its log tail if it
    exits first or the start timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        hb = heartbeat.read(store, kind.label, name) or {}
        if hb.get("pid") == proc.pid and hb.get("status") == "running":
            return hb
        if proc.poll() is not None:
            raise DispatcherError(f"{kind.label} {name} exited with code {proc.returncode} before it reported "
                                  f"running (log {log_path}){_tail(log_path)}")
        if time.monotonic() > deadline:
            raise DispatcherError(f"{kind.label} {name} did not report running within {timeout:.0f}s "
                                  f"({kind.start_env}; heartbeat "
                                  f"{hb.get('status')} by pid {hb.get('pid')}, log {log_path}){_tail(log_path)}")
        time.sleep(0.25)


def restart(store, cfg, name: str, decision: dict, kind: Kind,
            launcher: Callable[[], tuple[subprocess.Popen, Path]]) -> dict:
    """Stop what is left, launch (`launcher`), record, wait for ``running``."""
    key = state_key(cfg, name)
    stopped = stop(store, name, cfg, reason=f"supervisor restart: {decision['reason']}", kind=kind)
    launched_at = time.time()
    proc, log_path = launcher()
    # Recorded before waiting: a start that times out is still known (and stopped) next run.
    state, etag = load_state(store, key)
    incident = state.get("incident")
    if incident:
        incident["restarts"] = int(incident.get("restarts", 0)) + 1
    state["launch"] = {"at": launched_at, "pid": proc.pid, "start_ticks": start_ticks(proc.pid),
                       "host": socket.gethostname(), "log": str(log_path), "reason": decision["reason"],
                       "incident": incident["id"] if incident else None}
    save_state(store, key, state, etag)
    wait_running(store, name, proc, log_path, cfg.start_timeout_seconds, kind)
    started_at = time.time()
    state, etag = load_state(store, key)
    state["launch"]["started_at"] = started_at
    history = state.setdefault("restarts", [])
    history.append({k: state["launch"].get(k) for k in ("at", "started_at", "pid", "reason", "incident")})
    del history[:-MAX_HISTORY]
    save_state(store, key, state, etag)
    log.info("%s %s running as pid %d after %.1fs (log %s)", kind.label, name, proc.pid, started_at - launched_at,
             log_path)
    return {"pid": proc.pid, "log": str(log_path), "stopped": stopped,
            "started_in_seconds": round(started_at - launched_at, 2)}


