"""A long-running dispatcher: ``aldebaran dispatch --follow [--channel NAME ...]``.

It delivers until SIGTERM/SIGINT (then finishes the runs in hand, commits and exits 0) and publishes a
heartbeat every ``ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS`` at ``heartbeats/dispatcher/<name>.json``:

    {"status": "running"|"stopped"|"failed", "name", "channels", "owner", "host", "pid", "started_at",
     "at", "alerts", "runs", "sent", "failed", "in_doubt", "already_recorded", "retried", "ledger_writes",
     "partitions": {channel: {partition: {"epoch", "broken"}}}, "error"}

Airflow's ``dispatch_supervisor`` DAG (aldebaran.platform.dispatch_supervisor) reads it: a heartbeat
older than its stale limit, or a dead local process, means restart.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time

from aldebaran.storage import read_json, safe_segment

log = logging.getLogger(__name__)

HEARTBEAT_PREFIX = "heartbeats/dispatcher"


def heartbeat_key(name: str) -> str:
    return f"{HEARTBEAT_PREFIX}/{safe_segment(name, 'dispatcher name')}.json"


def read_heartbeat(store, name: str) -> dict | None:
    return read_json(store, heartbeat_key(name))


class Heartbeat:
    """Writes the dispatcher's heartbeat at most every `period` seconds (called from every channel loop)."""

    def __init__(self, store, name: str, channels: list[str], owner: str, stats, period: float,
                 ledger=None) -> None:
        self.store, self.name, self.channels, self.owner, self.ledger = store, name, channels, owner, ledger
        self.stats, self.period = stats, period
        self.started_at = time.time()
        self._last = 0.0
        self._lock = threading.Lock()
        self.workers: dict = {}

    def beat(self, worker=None, status: str = "running", error: str | None = None, force: bool = False) -> None:
        if worker is not None:
            self.workers[worker.channel.name] = worker
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last < self.period:
                return
            self._last = now
        s = self.stats
        body = {"status": status, "name": self.name, "channels": self.channels, "owner": self.owner,
                "host": socket.gethostname(), "pid": os.getpid(), "started_at": self.started_at, "at": time.time(),
                **(s.summary() if s is not None else {}), "error": error,
                "ledger_writes": self.ledger.writes if self.ledger is not None else None,
                "partitions": {c: {p.number: {"epoch": p.epoch, "broken": p.broken} for p in w.partitions.values()}
                               for c, w in self.workers.items()}}
        try:
            self.store.put(heartbeat_key(self.name), json.dumps(body, default=str).encode())
        except Exception as exc:  # noqa: BLE001 - a missed heartbeat must never stop delivery
            log.warning("dispatcher heartbeat not written: %s", exc)


def follow(channel_names: list[str] | None = None, name: str | None = None) -> int:
    """Run the dispatcher until SIGTERM/SIGINT. Returns the exit code."""
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher, DispatchStats, default_ledger

    channels = configured_channels(channel_names)
    ledger = default_ledger()
    name = name or "-".join(c.name for c in channels)
    dispatcher = Dispatcher(ledger, channels)
    stop = threading.Event()
    stats = DispatchStats()

    def on_signal(signum, _frame) -> None:
        log.info("dispatcher %s: %s received, finishing the runs in hand", name, signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    heartbeat = Heartbeat(ledger.store, name, [c.name for c in channels], dispatcher.owner, stats,
                          dispatcher.settings.heartbeat_seconds, ledger)
    heartbeat.beat(force=True, status="running")
    log.info("dispatcher %s: following the alerts topic for %s (ledger %s)", name,
             ", ".join(c.name for c in channels), ledger.store.uri(ledger.prefix))
    try:
        dispatcher.run(stop=stop, idle_timeout=None, heartbeat=heartbeat, stats=stats)
    except BaseException as exc:
        heartbeat.beat(status="failed", error=f"{type(exc).__name__}: {exc}", force=True)
        raise
    heartbeat.beat(status="stopped", force=True)
    log.info("dispatcher %s stopped: %s", name, json.dumps(stats.summary()))
    return 0
