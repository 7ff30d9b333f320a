"""What the auditor supervisor's modules share (:mod:`aldebaran.platform.supervisor`, its submit step
:mod:`aldebaran.platform.auditor_submit` and its standby slot :mod:`aldebaran.platform.standby_slot`):
the decisions' names, the supervisor state object (read and written with If-Match) and the handling of
processes on this host. ``supervisor`` re-exports all of it."""

from __future__ import annotations

import json
import os
import time

from aldebaran.exceptions import AlreadyExists, AuditorError, NotFound, PreconditionFailed
from aldebaran.runtime import procs
from aldebaran.storage.store import safe_segment, Store
from aldebaran.platform.settings import SupervisorSettings

NONE, WAIT, RESTART = "none", "wait", "restart"
MAX_HISTORY = 20


# --- processes on this host --------------------------------------------------------------------
pid_alive = procs.pid_alive
start_ticks = procs.start_ticks


def _signal(pid: int, sig: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(pids: list[tuple[int, int | None]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(pid_alive(p, t) for p, t in pids):
            return True
        time.sleep(0.2)
    return not any(pid_alive(p, t) for p, t in pids)


# --- state ---------------------------------------------------------------------------------------
def state_key(settings: SupervisorSettings, query: str) -> str:
    return f"{settings.state_prefix.strip('/')}/{safe_segment(query, 'query name')}.json"


def load_state(store: Store, key: str) -> tuple[dict, str | None]:
    try:
        obj = store.get(key)
    except NotFound:
        return {}, None
    return obj.json(), obj.etag


def save_state(store: Store, key: str, state: dict, etag: str | None) -> str:
    body = json.dumps(state, separators=(",", ":"), default=str).encode()
    try:
        return store.create(key, body) if etag is None else store.replace(key, body, etag)
    except (AlreadyExists, PreconditionFailed):
        raise AuditorError(
            f"supervisor state {store.uri(key)} changed during this run: is a second supervisor running? "
            "(the auditor_supervisor DAG runs with max_active_runs=1)"
        ) from None


def settings_with(overrides: dict | None = None) -> SupervisorSettings:
    from aldebaran.settings import load

    return load(SupervisorSettings, **{k: v for k, v in (overrides or {}).items() if v not in (None, "")})
