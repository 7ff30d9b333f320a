"""The active auditor hands over to a warm standby when it loses its executors.

On a cluster, the co-partitioned plan keeps each shard's books in a host process beside the executor
(:mod:`aldebaran.audit.sparkjob.shardhost`). When the executor's machine dies, the active auditor would
wait for the cluster manager to start a new executor (a JVM, Python workers) and for every shard to be
loaded cold from the object store before its next batch. A warm standby already has both: its own
executor, with the books prefetched (:mod:`aldebaran.audit.sparkjob.standby`). So when the active has
had no executor for ``GRACE_S`` while a standby announces itself, it stops its query and releases the
lease, and the standby takes over at once; the supervisor then starts a new standby.

The standby announces itself with a small record beside the checkpoint's lease, rewritten at every
prefetch and valid for ``ANNOUNCE_PERIODS`` of them; it deletes it when it takes over. Without a fresh
record the active keeps waiting for its new executor, as before: yielding to nobody would only stop it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.exceptions import NotFound, ObjectStoreError
from aldebaran.storage.store import Store

log = logging.getLogger(__name__)

GRACE_S = 1.0  # no executor for this long: lost (a replacement registers in tens of seconds, not in one)
POLL_S = 0.5
ANNOUNCE_PERIODS = 3  # a standby's record is fresh for this many of its prefetch periods
YIELDED = "handed over to the standby"  # in the active's log and its exit error


def standby_key(checkpoint: str) -> str:
    return Checkpoint(checkpoint).lease_key.removesuffix(".json") + ".standby.json"


def announce(store: Store, checkpoint: str, period_s: float) -> None:
    """A standby says it is waiting, warm, until `period_s` × ANNOUNCE_PERIODS from now."""
    now = time.time()
    record = {"host": socket.gethostname(), "pid": os.getpid(), "at": now,
              "fresh_until": now + period_s * ANNOUNCE_PERIODS}
    store.put(standby_key(checkpoint), json.dumps(record).encode())


def withdraw(store: Store, checkpoint: str) -> None:
    """The standby took over (or stops): nobody is waiting any more."""
    try:
        store.delete(standby_key(checkpoint))
    except (NotFound, ObjectStoreError) as exc:
        log.info("standby record not withdrawn (%s): it goes stale by itself", exc)


def standby_waiting(store: Store, checkpoint: str, now: float | None = None) -> bool:
    try:
        record = json.loads(store.get(standby_key(checkpoint)).body)
    except NotFound:
        return False
    return float(record.get("fresh_until", 0)) > (time.time() if now is None else now)


def should_yield(seen_executor: bool, without_s: float | None, standby: bool, grace_s: float = GRACE_S) -> bool:
    """Hand over? Only after the auditor had an executor, has had none for `grace_s`, and a standby waits."""
    return seen_executor and without_s is not None and without_s >= grace_s and standby


def executors(spark) -> int:
    """The application's live executors (the driver's own entry not counted)."""
    return max(0, int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1)


class ExecutorWatch(threading.Thread):
    """In the active auditor: watches its executors and calls `on_yield()` once when :func:`should_yield`."""

    def __init__(self, count: Callable[[], int], standby: Callable[[], bool], on_yield: Callable[[], None],
                 grace_s: float = GRACE_S, poll_s: float = POLL_S) -> None:
        super().__init__(name="aldebaran-executor-watch", daemon=True)
        self.count, self.standby, self.on_yield = count, standby, on_yield
        self.grace_s, self.poll_s = grace_s, poll_s
        self.halt = threading.Event()
        self.yielded = False

    def run(self) -> None:
        from py4j.protocol import Py4JError

        seen, since = False, None
        while not self.halt.wait(self.poll_s):
            try:
                n = self.count()
            except (Py4JError, ConnectionError, OSError):
                return  # the JVM is going away: the query's end is the auditor's business
            if n > 0:
                seen, since = True, None
                continue
            since = since if since is not None else time.monotonic()
            without = time.monotonic() - since
            if not should_yield(seen, without, True, self.grace_s):
                continue
            try:
                waiting = self.standby()
            except ObjectStoreError as exc:
                log.warning("executor lost; the standby record cannot be read (%s): waiting for a new executor", exc)
                continue
            if waiting:
                log.warning("auditor: no executor for %.1fs and a warm standby waits: %s", without, YIELDED)
                self.yielded = True
                self.on_yield()
                return

    def stop(self) -> None:
        self.halt.set()
