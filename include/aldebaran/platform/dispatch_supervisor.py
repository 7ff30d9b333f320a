"""The dispatch supervisor: what the `dispatch_supervisor` DAG's tasks call (docs/airflow.md).

The streaming dispatchers (``aldebaran dispatch --follow``, aldebaran.delivery.service) are the normal
delivery path: one per configured channel, named after it, unless ``ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS``
puts several channels in one (:func:`plan`), and, where the low-latency lane is part of the platform
(``ALDEBARAN_LANES_ENABLED``) and channels opted in to it (``fast: true``), the fast dispatcher
``fast-lane`` (``aldebaran dispatch --follow --fast``, aldebaran.delivery.fast). Each run (every minute, one at a time) supervises each
dispatcher with the steps of aldebaran.platform.processes and the
:class:`~aldebaran.platform.processes.Kind` ``dispatcher`` (observe its heartbeat
``heartbeats/dispatcher/<name>.json`` and its process, diagnose, decide, restart with backoff). It
restarts a dispatcher whose process is gone, whose heartbeat is missing or stale (frozen or dead: the
heartbeat has a thread of its own) or ``failed``/``stopped``, or one of whose channels has had work
pending without progress for ``ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS``; a slow channel
that progresses is left alone. It also names the channels a dispatcher runs other than configured. A dispatcher left over (or alert_dispatch) shares the channel's consumer group,
and the ledger's partition epochs fence whichever loses a partition, so an alert is never delivered twice.
State: one object per dispatcher, ``<state prefix>/<name>.json``, written with If-Match.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

from aldebaran.exceptions import AldebaranError, ConfigError, DispatcherError
from aldebaran.platform import processes
from aldebaran.platform.settings import DispatchSupervisorSettings
from aldebaran.storage.store import safe_segment

log = logging.getLogger(__name__)


def kind() -> processes.Kind:
    return processes.Kind("dispatcher", (b"dispatch", b"--follow"),
                          "ALDEBARAN_DISPATCH_SUPERVISOR_STALE_AFTER_SECONDS",
                          "ALDEBARAN_DISPATCH_SUPERVISOR_START_TIMEOUT_SECONDS",
                          "ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS")


def settings() -> DispatchSupervisorSettings:
    from aldebaran.settings import load

    return load(DispatchSupervisorSettings)


def plan(cfg: DispatchSupervisorSettings | None = None) -> dict[str, list[str]]:
    """{dispatcher name: its channels}: the groups of ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS (validated
    by the settings), then one dispatcher per configured channel in no group, named after it; then the
    fast dispatcher of the channels with ``fast: true`` if the lane is enabled (module docstring)."""
    from aldebaran.delivery.channels import channel_names
    from aldebaran.delivery.fast import DISPATCHER_NAME

    cfg = cfg or settings()
    configured = channel_names()
    out = {name: list(channels) for name, channels in (cfg.groups or {}).items()}
    if DISPATCHER_NAME in out:
        raise ConfigError(f"ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS: {DISPATCHER_NAME!r} is the fast dispatcher's name")
    grouped = {channel for channels in out.values() for channel in channels}
    unknown = [(name, channel) for name, channels in out.items() for channel in channels if channel not in configured]
    if unknown:
        raise ConfigError(f"ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS: group {unknown[0][0]!r} names channel "
                          f"{unknown[0][1]!r}, which is not configured (ALDEBARAN_CHANNELS: {', '.join(configured)})")
    for channel in configured:
        if channel not in grouped:
            if channel in out:
                raise ConfigError(f"ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS: group {channel!r} is named like a "
                                  "channel that is in no group")
            out[channel] = [channel]
    fast = fast_plan(configured)
    if fast:
        out[DISPATCHER_NAME] = fast
    return out


def fast_plan(configured: list[str]) -> list[str]:
    """The channels the fast dispatcher delivers: those with ``fast: true``, if the lane is enabled."""
    from aldebaran.delivery.fast import fast_channel_names
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.settings import load

    return fast_channel_names(configured) if load(LaneSettings).enabled else []


def delivery_store():
    """The store the dispatchers write their heartbeats to: the delivery ledger's."""
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import load
    from aldebaran.storage.store import open_store

    return open_store(load(DeliverySettings).store)


def stop(store, name: str, cfg, reason: str) -> list[int]:
    """Stop the dispatcher `name` if it runs on this host (:func:`aldebaran.platform.processes.stop`): it
    finishes the runs in hand and commits on SIGTERM."""
    return processes.stop(store, name, cfg, reason, kind())


def launch(name: str, channels: list[str]) -> tuple[subprocess.Popen, Path]:
    """`aldebaran dispatch --follow` detached (own session: it outlives the task that started it).
    It runs outside Airflow and reads only its environment, so it gets the channels' connections as
    Airflow resolved them for this task (UI, API, secrets backend) as ``AIRFLOW_CONN_ALDEBARAN_*``, and the
    platform's Kafka connection the same way (aldebaran.kafka.conn)."""
    from aldebaran.runtime import paths
    from aldebaran.delivery.channels.sources import connections_env
    from aldebaran.kafka.conn import connection_env

    from aldebaran.delivery.fast import DISPATCHER_NAME

    command = [str(paths.venv_bin("aldebaran")), "dispatch", "--follow", "--name", name,
               *(["--fast"] if name == DISPATCHER_NAME else []),
               *[arg for channel in channels for arg in ("--channel", channel)]]
    return processes.launch_detached(f"dispatcher-{safe_segment(name, 'dispatcher name')}", command,
                                     {**connection_env(), **connections_env(channels)})


# --- the DAG's tasks -------------------------------------------------------------------------------------
def dispatchers() -> list[str]:
    """Task 1: the dispatchers to supervise (validated now, so a bad grouping fails this task, named)."""
    names = plan()
    log.info("supervising %d dispatcher(s): %s", len(names),
             "; ".join(f"{n} ({', '.join(c)})" for n, c in names.items()))
    return list(names)


def supervise(name: str) -> dict:
    """Task 2 (mapped per dispatcher): observe, diagnose, decide; restart when due. Returns the decision."""
    cfg = settings()
    channels = plan(cfg).get(name)
    if channels is None:
        raise ConfigError(f"dispatcher {name!r} is no longer configured (ALDEBARAN_CHANNELS / "
                          "ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS changed during this run)")
    store = delivery_store()
    key = processes.state_key(cfg, name)
    state, etag = processes.load_state(store, key)
    facts = processes.observe(store, name, channels, state, time.time(), kind())
    problems = processes.diagnose(facts, cfg)
    decision, state = processes.decide(facts, problems, state, cfg)
    decision.update(name=name, channels=channels, problems=problems, observed_at=facts["now"],
                    broken=(facts["heartbeat"] or {}).get("broken") or {})
    state.update(name=name, channels=channels, last_assessment={
        k: decision[k] for k in ("action", "reason", "problems", "observed_at")})
    processes.save_state(store, key, state, etag)
    log.log(logging.INFO if decision["healthy"] else logging.WARNING, "dispatcher %s: %s — %s", name,
            decision["action"], decision["reason"])
    log.info("observed: %s", json.dumps({k: v for k, v in facts.items() if k != "now"}, default=str))
    if decision["broken"]:
        # Not a restart reason: a fenced partition is revoked at the next rebalance, and a restart would
        # break again on an unreadable ledger object (an operator's job). platform_health names them.
        log.warning("dispatcher %s: broken partition(s): %s", name, decision["broken"])
    if decision["action"] == processes.RESTART:
        decision["launched"] = processes.restart(store, cfg, name, decision, kind(),
                                                  lambda: launch(name, channels))
    return decision


def supervise_all() -> dict[str, dict]:
    """The DAG's task: every dispatcher supervised side by side, in one task process. It was one task to list
    them plus one mapped task per dispatcher: each task is a process of its own (~0.8 CPU-s of Airflow's per
    run), all started on the same minute as the auditor's supervisor, a burst that held the 2-core box for
    seconds (docs/design.md §5 "The resting cost"). One dispatcher's failed supervision does not hold back the
    others; the task fails after all were seen, naming each (and Airflow retries it)."""
    from concurrent.futures import ThreadPoolExecutor

    names = dispatchers()
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="supervise") as pool:
        futures = {name: pool.submit(supervise, name) for name in names}
    out, failed = {}, {}
    for name, future in futures.items():
        try:
            out[name] = future.result()
        except (AldebaranError, OSError, subprocess.SubprocessError) as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
            log.error("dispatcher %s: supervision failed: %s", name, failed[name])
    if failed:
        raise DispatcherError("supervision failed for " + "; ".join(f"{n}: {why}" for n, why in failed.items())
                              + f" (supervised: {', '.join(out) or 'none'})")
    return out

