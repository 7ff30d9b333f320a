"""Step 4 of the auditor supervisor (:mod:`aldebaran.platform.supervisor`): start spark-submit detached,
record it in the supervisor state, and wait until the new auditor holds the lease and its query started.
Called by :class:`aldebaran.platform.spark_submit.AuditorSubmitOperator` (and the standby slot's
failover, which waits for the standby's query the same way)."""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from pathlib import Path

from aldebaran.runtime import lease as leases
from aldebaran.exceptions import AuditorError
from aldebaran.storage.store import safe_segment, open_store, Store
from aldebaran.platform.settings import SupervisorSettings
from aldebaran.platform.supervisor_state import MAX_HISTORY, load_state, save_state, settings_with, start_ticks, state_key

log = logging.getLogger(__name__)


def launch(command: list[str], env: dict[str, str], query: str) -> tuple[subprocess.Popen, Path]:
    """Start spark-submit detached (own session: it outlives the task that started it). The driver runs
    outside Airflow: it also gets the object store's connection as Airflow resolved it (aldebaran.storage.s3access),
    for its book state and, through s3a, its checkpoint."""
    from aldebaran.runtime import paths
    from aldebaran.storage.s3access import connection_env
    from aldebaran.settings import load

    nice = load(SupervisorSettings).nice
    if nice:  # inherited by everything spark-submit starts: the JVM, its Python workers, the shard hosts
        command = ["nice", "-n", str(nice), *command]
    logs = paths.run_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"auditor-{safe_segment(query, 'query name')}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**env, **connection_env()}, start_new_session=True, cwd=str(paths.ROOT))
    return proc, log_path


def tail(path: Path | None, lines: int = 25) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return "\nLast spark-submit output:\n" + "\n".join(text)


def record_submission(decision: dict, pid: int | None, log_path: str | None, submitted_at: float,
                      external_id: str | None = None) -> None:
    settings = settings_with(decision.get("settings"))
    store = open_store()
    key = state_key(settings, decision["query_name"])
    state, etag = load_state(store, key)
    incident = state.get("incident")
    if incident:
        incident["restarts"] = int(incident.get("restarts", 0)) + 1
    state["submit"] = {"at": submitted_at, "pid": pid, "host": socket.gethostname(),
                       "start_ticks": start_ticks(pid) if pid else None, "log": log_path,
                       "external_id": external_id, "reason": decision["reason"],
                       "incident": incident["id"] if incident else None}
    save_state(store, key, state, etag)


def wait_started(decision: dict, submitted_at: float, proc: subprocess.Popen | None = None,
                 log_path: Path | None = None) -> dict:
    """Block until the new auditor holds the lease and its query started; fail with the log tail
    if spark-submit exits first or the start timeout passes."""
    from aldebaran.runtime import heartbeat

    settings = settings_with(decision.get("settings"))
    store = open_store()
    deadline = time.monotonic() + settings.start_timeout_seconds
    while True:
        got = leases.read(store, decision["checkpoint"])
        hb = heartbeat.read(store, heartbeat.AUDITOR, decision["query_name"])
        leased = bool(got and got[0].get("state") == leases.HELD
                      and float(got[0].get("acquired_at") or 0) >= submitted_at - 1)
        beating = bool(hb and float(hb.get("updated_at_ms") or 0) / 1000 >= submitted_at - 1
                       and hb.get("status") in ("started", "running", "idle"))
        if leased and beating:
            started_in = time.time() - submitted_at
            _mark_started(store, settings, decision, time.time())
            log.info("auditor %s started in %.1fs (%s)", decision["query_name"], started_in,
                     leases.describe(got[0]))
            return {"pid": proc.pid if proc else None, "log": str(log_path) if log_path else None,
                    "started_in_seconds": round(started_in, 1), "lease_generation": got[0].get("generation")}
        if proc is not None and proc.poll() is not None:
            raise AuditorError(f"the auditor's spark-submit exited with code {proc.returncode} before it started "
                               f"(log {log_path}){tail(log_path)}")
        if time.monotonic() > deadline:
            raise AuditorError(
                f"the auditor did not start within {settings.start_timeout_seconds:.0f}s "
                f"(ALDEBARAN_SUPERVISOR_START_TIMEOUT_SECONDS): lease {leases.describe(got[0] if got else None)}, "
                f"heartbeat {hb and hb.get('status')} (log {log_path}){tail(log_path)}"
            )
        time.sleep(0.5)


def _mark_started(store: Store, settings: SupervisorSettings, decision: dict, at: float) -> None:
    key = state_key(settings, decision["query_name"])
    state, etag = load_state(store, key)
    if state.get("submit"):
        state["submit"]["started_at"] = at
        history = state.setdefault("restarts", [])
        history.append({"submitted_at": state["submit"]["at"], "started_at": at, "pid": state["submit"]["pid"],
                        "reason": state["submit"].get("reason"), "incident": state["submit"].get("incident")})
        del history[:-MAX_HISTORY]
        save_state(store, key, state, etag)
