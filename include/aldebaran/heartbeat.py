"""One heartbeat writer for the long-running processes: the streaming dispatcher
(aldebaran.delivery.service), the lane keeper (aldebaran.lanes.keeper) and the auditor's query listener
(aldebaran.audit.heartbeat, through :func:`publish`).

A :class:`Beater` writes the heartbeat from a thread of its own, every period, whatever the process's
work loop is doing: a busy loop still beats, so a heartbeat that goes stale means the process is frozen
or gone, never merely busy. Whether the work advances is a separate question, answered by what the body
carries (:class:`Progress`: when the loop last turned, whether work is pending, when its marks last
moved) and judged by the supervisors (aldebaran.platform.processes).

It lives at the top of the product, beside the lease, because delivery and lanes use it and must not
import the platform that supervises them.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Callable

from aldebaran.exceptions import ObjectStoreError

log = logging.getLogger(__name__)

_UNSEEN = object()


def identity() -> dict:
    """Where a heartbeat comes from: the supervisors signal this pid on this host; Prometheus scrapes
    ``metrics`` (host:port of its /metrics, None when it serves none: aldebaran.metrics)."""
    from aldebaran.metrics import address

    return {"host": socket.gethostname(), "pid": os.getpid(), "metrics": address()}


def publish(store, key: str, body: dict, what: str) -> bool:
    """Write one heartbeat. A failure is logged, never raised: a missed beat must not stop the work
    (the next one is due in a period; a supervisor only acts on a beat missing for much longer)."""
    try:
        store.put(key, json.dumps(body, separators=(",", ":"), default=str).encode())
        return True
    except (ObjectStoreError, OSError) as exc:
        log.warning("%s: heartbeat not written to %s: %s", what, store.uri(key), exc)
        return False


class Beater:
    """Writes ``body()`` to `key` every `period` seconds from a daemon thread, and on demand.

    ``finish(body)`` stops the thread first, then writes the final body ("stopped", "failed"), so no
    periodic beat can overwrite the last word."""

    def __init__(self, store, key: str, body: Callable[[], dict], period: float, what: str) -> None:
        self.store, self.key, self.body, self.period, self.what = store, key, body, period, what
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one write at a time: a forced beat and the thread's never interleave
        self._thread: threading.Thread | None = None
        self.written = 0

    def beat(self, body: dict | None = None) -> bool:
        with self._lock:
            ok = publish(self.store, self.key, self.body() if body is None else body, self.what)
            self.written += ok
            return ok

    def start(self) -> Beater:
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.what}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.beat()

    def finish(self, body: dict | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period + 30)
        self.beat(body)


class Progress:
    """What one unit of work (a dispatcher's channel loop) has achieved, as its heartbeat reports it.

    ``turned()`` is called by the loop at each iteration; ``observe(marks, pending)`` by whoever sees the
    unit's state (the loop, the heartbeat thread): `marks` is anything that changes only when work is done
    (settled offsets, counts of settled deliveries), and ``progress_at`` is when they last changed.
    A unit that has work pending and whose marks stand still for long has lost progress, however often
    it beats. Times are wall-clock seconds, comparable with the supervisor's."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.loop_at: float | None = None
        self.progress_at = clock()  # a unit starts as having progressed: its limit counts from its start
        self.pending = False
        self._marks: object = _UNSEEN

    def turned(self) -> None:
        self.loop_at = self.clock()

    def observe(self, marks: object, pending: bool) -> None:
        with self._lock:
            if marks != self._marks:
                if self._marks is not _UNSEEN:  # the first look is a baseline, not progress
                    self.progress_at = self.clock()
                self._marks = marks
            self.pending = pending

    def snapshot(self) -> dict:
        with self._lock:
            return {"loop_at": self.loop_at, "progress_at": self.progress_at, "pending": self.pending}
