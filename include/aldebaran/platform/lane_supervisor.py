"""The lane supervisor: what the `lane_supervisor` DAG's task calls (docs/airflow.md).

The low-latency lane runs as one process, the lane keeper (``aldebaran lanes run``,
aldebaran.lanes.keeper): it starts the real-time-mode query on the Spark 4.3 runtime, reconciles its
alerts with the exact lane's and beats at ``heartbeats/lane/<name>.json``. Each run (every minute, one
at a time) observes that heartbeat and the keeper's process, diagnoses and decides exactly as the
dispatch supervisor does for a dispatcher (the same steps, aldebaran.platform.processes, with the
:class:`~aldebaran.platform.processes.Kind` ``lane``): no heartbeat, ``failed``/``stopped`` (the lane
exited, its query stopped or its driver hung: the keeper says which, with the lane's log tail), older
than ``ALDEBARAN_LANES_STALE_AFTER_SECONDS``,
or the process gone → stop what is left, launch the keeper detached, wait for ``running``; exponential
backoff within one incident. State: ``<ALDEBARAN_LANES_STATE_PREFIX>/<name>.json``.
"""

from __future__ import annotations

import json
import logging
import time

from aldebaran.platform import processes as procs

log = logging.getLogger(__name__)


def kind() -> procs.Kind:
    return procs.Kind("lane", (b"lanes", b"run"),
                      "ALDEBARAN_LANES_STALE_AFTER_SECONDS", "ALDEBARAN_LANES_START_TIMEOUT_SECONDS")


def settings():
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.settings import load

    return load(LaneSettings)


def launch():
    """``aldebaran lanes run`` detached (its settings come from this task's environment). Where channels have
    ``fast: true`` it produces retractions of unconfirmed alerts to the fast topic (the fast dispatcher delivers
    them): the fast channels are named to it (ALDEBARAN_LANES_FAST_CHANNELS), never their connections: it
    sends nothing to a channel, so it holds none of their secrets."""
    from aldebaran.runtime import paths
    from aldebaran.delivery.fast import fast_channel_names
    from aldebaran.kafka.conn import connection_env

    cfg = settings()
    # The platform's Kafka connection as Airflow resolved it: the lane's Spark job and its keeper read only the environment.
    env = {**connection_env(), "ALDEBARAN_LANES_FAST_CHANNELS": ",".join(fast_channel_names())}
    return procs.launch_detached(f"lane-{cfg.name}", [str(paths.venv_bin("aldebaran")), "lanes", "run"], env)


def supervise() -> dict:
    """The DAG's task: observe, diagnose, decide; restart when due. Returns the decision."""
    from aldebaran.lanes.keeper import lane_store

    cfg = settings()
    name, store, lane = cfg.name, lane_store(), kind()
    key = procs.state_key(cfg, name)
    state, etag = procs.load_state(store, key)
    facts = procs.observe(store, name, [], state, time.time(), lane)
    problems = procs.diagnose(facts, cfg)
    decision, state = procs.decide(facts, problems, state, cfg)
    decision.update(name=name, problems=problems, observed_at=facts["now"])
    state.update(name=name, last_assessment={k: decision[k] for k in ("action", "reason", "problems", "observed_at")})
    procs.save_state(store, key, state, etag)
    log.log(logging.INFO if decision["healthy"] else logging.WARNING, "lane %s: %s — %s", name,
            decision["action"], decision["reason"])
    log.info("observed: %s", json.dumps({k: v for k, v in facts.items() if k != "now"}, default=str))
    if decision["action"] == procs.RESTART:
        decision["launched"] = procs.restart(store, cfg, name, decision, kind=lane, launcher=launch)
    return decision


def stop(reason: str = "stopped by an operator") -> list[int]:
    """Stop the lane keeper on this host (and with it the lane): `aldebaran lanes stop`, the demo's stop."""
    from aldebaran.lanes.keeper import lane_store

    cfg = settings()
    return procs.stop(lane_store(), cfg.name, cfg, reason, kind=kind())
