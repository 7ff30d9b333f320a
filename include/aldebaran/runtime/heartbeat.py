"""One heartbeat writer for the long-running processes: the streaming dispatcher
(aldebaran.delivery.service), the lane keeper (aldebaran.lanes.keeper) and the auditor's query listener
(aldebaran.audit.sparkjob.heartbeat_poller, through :func:`publish`).

A :class:`Beater` writes the heartbeat from a thread of its own, every period, whatever the process's
work loop is doing: a busy loop still beats, so a heartbeat that goes stale means the process is frozen
or gone, never merely busy. Whether the work advances is a separate question, answered by what the body
carries (:class:`Progress`: when the loop last turned, whether work is pending, when its marks last
moved) and judged by one rule (aldebaran.runtime.probes.stalled): the supervisors (aldebaran.platform.processes)
apply it to the stored heartbeat, each process's own ``/readyz`` to the body it holds in memory.

Every heartbeat is one JSON object at ``heartbeats/<role>/<name>.json`` (:func:`key`) in the store of its
role: ``auditor`` (per query, the books' store), ``dispatcher`` and ``lane`` (the delivery ledger's store).
This module is the only one that builds those keys, writes and reads them; what each role's body carries
is documented where the body is built (aldebaran.audit.sparkjob.heartbeat_poller.build, aldebaran.delivery.service,
aldebaran.lanes.keeper), and each body starts from :func:`identity`.

It lives at the top of the product, beside the lease, not in aldebaran.platform: the auditor, delivery
and lanes write heartbeats and must not import the platform that supervises them.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from typing import Callable

from aldebaran.exceptions import NotFound, ObjectStoreError
from aldebaran.storage.store import safe_segment

log = logging.getLogger(__name__)

_UNSEEN = object()


AUDITOR, DISPATCHER, LANE = "auditor", "dispatcher", "lane"
ROLES = (AUDITOR, DISPATCHER, LANE)


def prefix(role: str) -> str:
    """Where every heartbeat of `role` lives (listing it finds them all)."""
    if role not in ROLES:
        raise ValueError(f"unknown heartbeat role {role!r} (one of {', '.join(ROLES)})")
    return f"heartbeats/{role}/"


def key(role: str, name: str) -> str:
    """The heartbeat of the process `name` of `role`: ``heartbeats/<role>/<name>.json``."""
    return f"{prefix(role)}{safe_segment(name, f'{role} name')}.json"


# The fields every reader compares or does arithmetic on, and the types it may hold (None: absent).
_TYPES = {"host": (str,), "pid": (int,), "status": (str,), "name": (str,), "error": (str,), "at": (int, float),
          "started_at": (int, float), "updated_at_ms": (int, float), "channels": (list,), "progress": (dict,)}


def read(store, role: str, name: str) -> dict | None:
    """The last heartbeat of `name`; None when it never wrote one (or it was removed), or when what is
    stored cannot be a heartbeat (logged with its key and reason: see :func:`_checked`)."""
    return _load(store, key(role, name))


def read_all(store, role: str) -> list[dict]:
    """Every heartbeat of `role` present (one listing, then one read each); an unreadable one reads as {}."""
    return [_load(store, o["Key"]) or {} for o in store.list(prefix(role))]


def _load(store, where: str) -> dict | None:
    try:
        raw = store.get(where).body
    except NotFound:
        return None
    try:
        return _checked(store, where, json.loads(raw))
    except (ValueError, RecursionError) as exc:  # undecodable: JSONDecodeError, UnicodeDecodeError, too deep
        return _skipped(store, where, f"not JSON: {exc}")


def _checked(store, where: str, body) -> dict | None:
    """A stored heartbeat, or None if it is not one. Every supervisor, probe and page reads heartbeats
    through here, so a corrupt one (a bad writer, a half-restored bucket) is a missing beat for all of them
    (the process is judged silent, as it would be with none) instead of a crash in each. Not moved: the
    process's next beat overwrites it."""
    if not isinstance(body, dict):
        return _skipped(store, where, f"JSON {type(body).__name__}, not an object")
    for field, kinds in _TYPES.items():
        value = body.get(field)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)
                                  or (isinstance(value, (int, float)) and not abs(value) < 1e15)  # NaN too
                                  or (isinstance(value, float) and not math.isfinite(value))):
            return _skipped(store, where, f"field {field!r} is {type(value).__name__} {str(value)[:40]!r}")
    if any(not isinstance(c, str) for c in body.get("channels") or ()):
        return _skipped(store, where, "field 'channels' is not a list of names")
    if body.get("pid") is not None and not 0 < body["pid"] < 2**31:  # a supervisor signals it
        return _skipped(store, where, f"field 'pid' out of range: {body['pid']}")
    for unit, p in (body.get("progress") or {}).items():  # aldebaran.runtime.probes.stalled's arithmetic
        if p is not None and (not isinstance(p, dict) or not all(
                v is None or (type(v) in (int, float) and abs(v) < 1e15 and math.isfinite(v))  # bound first:
                # math.isfinite of an int beyond a float's range raises OverflowError
                for v in (p.get("progress_at"), p.get("loop_at")))):
            return _skipped(store, where, f"progress of {str(unit)[:40]!r} is not {{progress_at, loop_at}} times")
    return body


def _skipped(store, where: str, reason: str) -> None:
    log.warning("heartbeat %s cannot be read, skipped (read as no heartbeat): %s", store.uri(where), reason)
    return None


def identity() -> dict:
    """Where a heartbeat comes from: the supervisors signal this pid on this host; Prometheus scrapes
    ``metrics`` (host:port of its /metrics, None when it serves none: aldebaran.runtime.metrics)."""
    from aldebaran.runtime.metrics import address

    return {"host": socket.gethostname(), "pid": os.getpid(), "metrics": address()}


def publish(store, role: str, name: str, body: dict) -> bool:
    """Write one heartbeat. A failure is logged, never raised: a missed beat must not stop the work
    (the next one is due in a period; a supervisor only acts on a beat missing for much longer)."""
    where = key(role, name)
    try:
        store.put(where, json.dumps(body, separators=(",", ":"), default=str).encode())
        return True
    except (ObjectStoreError, OSError) as exc:
        log.warning("%s %s: heartbeat not written to %s: %s", role, name, store.uri(where), exc)
        return False


class Beater:
    """Writes ``body()`` as the heartbeat of `name` every `period` seconds from a daemon thread, and on demand.

    ``finish(body)`` stops the thread first, then writes the final body ("stopped", "failed"), so no
    periodic beat can overwrite the last word."""

    def __init__(self, store, role: str, name: str, body: Callable[[], dict], period: float) -> None:
        self.store, self.role, self.name, self.body, self.period = store, role, name, body, period
        self.key = key(role, name)  # checked now: a bad name fails at start, not in the thread
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one write at a time: a forced beat and the thread's never interleave
        self._thread: threading.Thread | None = None
        self.written = 0

    def beat(self, body: dict | None = None) -> bool:
        with self._lock:
            ok = publish(self.store, self.role, self.name, self.body() if body is None else body)
            self.written += ok
            return ok

    def start(self) -> Beater:
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.role}-{self.name}", daemon=True)
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
