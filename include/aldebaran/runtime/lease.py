"""The checkpoint lease: never two auditors on one checkpoint.

One object per checkpoint in the object store (its key: ``aldebaran.runtime.checkpoint.Checkpoint.lease_key``):

    {"checkpoint", "query", "state": held|released|revoked|broken, "generation", "owner",
     "host", "pid", "acquired_at", "renewed_at", "expires_at", "ttl_seconds", "note"}

- **Acquire** (auditor start): conditional create (``If-None-Match: *``); if the object exists and is
  free (released, broken, or expired — a revoked lease is free once its grace has passed), or its
  holder ran on this host and its pid is gone (a killed auditor restarted at once need not wait for
  its old lease to expire), take it over with ``If-Match: <etag>`` and the next generation. Two auditors racing for a free lease: exactly one
  conditional write wins. A live lease held by someone else → :class:`LeaseHeld`, naming the holder.
- **Renew** (a keeper thread in the auditor, every ttl/3, only while the query is active):
  ``If-Match`` on the etag of our own last write. Any other write in between (a takeover, a
  revocation by the supervisor) makes it fail → :class:`LeaseLost` → the auditor stops its query.
- **Check** (before every micro-batch): the auditor refuses to write a batch once its lease is no
  longer known to be valid (lost, or not renewed for a whole ttl) — a paused auditor cannot
  overlap with its successor by more than the batch it is already in.
- **Release** (clean stop): ``If-Match`` to ``released``.
- **Break** (supervisor, only for a holder it saw dead — a local pid that no longer exists):
  ``If-Match`` to ``broken``, free at once. **Revoke** (supervisor, a holder alive but unhealthy on a
  host it cannot signal): ``If-Match`` to ``revoked``, free after one ttl of grace — the holder's next
  renewal fails and it stops itself well before that.
- **Corrupt** (what is stored is no lease record: :func:`read` says ``corrupt``): held by no one and free
  to no one; the next taker copies it to the quarantine and revokes it with its own ttl as the grace.

Times are wall-clock epoch seconds of the writer; holders and the supervisor are assumed to have
clocks within a small fraction of the ttl of each other (NTP), the usual condition of a lease.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.exceptions import AlreadyExists, LeaseHeld, LeaseLost, NotFound, ObjectStoreError, PreconditionFailed
from aldebaran.runtime.procs import pid_alive
from aldebaran.storage.store import Store, writer_token

log = logging.getLogger(__name__)

HELD, RELEASED, REVOKED, BROKEN = "held", "released", "revoked", "broken"
CORRUPT = "corrupt"  # read(): what is stored is no lease record


def lease_key(checkpoint: str) -> str:
    return Checkpoint(checkpoint).lease_key


def _iso(epoch: float | None) -> str:
    if epoch is None:
        return "?"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def holder_dead_here(record: dict) -> bool:
    """The holder ran on this host and its process no longer exists: it can write nothing more."""
    return (record.get("state") in (HELD, REVOKED) and record.get("host") == socket.gethostname()
            and bool(record.get("pid")) and int(record["pid"]) != os.getpid() and not pid_alive(record.get("pid")))


def is_free(record: dict, now: float) -> bool:
    """A lease anyone may take: released or broken at once; held or revoked once it expired (a corrupt
    one never: :func:`acquire` revokes it first)."""
    if record.get("state") == CORRUPT:
        return False
    if record.get("state") in (RELEASED, BROKEN):
        return True
    return float(record.get("expires_at") or 0) <= now


def describe(record: dict | None, now: float | None = None) -> str:
    if record is None:
        return "no lease"
    now = time.time() if now is None else now
    left = float(record.get("expires_at") or 0) - now
    when = f"expires in {left:.0f}s" if left > 0 else f"expired {-left:.0f}s ago"
    return (f"lease gen {record.get('generation')} {record.get('state')} by {record.get('host')}:{record.get('pid')} "
            f"(query {record.get('query')}), {when} ({_iso(record.get('expires_at'))})")


def read(store: Store, checkpoint: str) -> tuple[dict, str] | None:
    """The lease record and its ETag, None if there is none. A stored object that is not a lease record
    reads as ``{"state": "corrupt", "note": why}`` (with the object's ETag): held by no one, free to no
    one, until :func:`acquire` sets it aside (every reader of leases goes through here: none crashes)."""
    try:
        obj = store.get(lease_key(checkpoint))
    except NotFound:
        return None
    try:
        return _checked(obj.json()), obj.etag
    except (ValueError, TypeError, RecursionError) as exc:  # undecodable, or ill-typed (_checked)
        log.warning("lease %s cannot be read: %s", store.uri(lease_key(checkpoint)), exc)
        return {"state": CORRUPT, "note": f"lease record cannot be read: {str(exc)[:300]}"}, obj.etag


_NUMBERS = ("expires_at", "renewed_at", "acquired_at", "ttl_seconds")
_TEXTS = ("checkpoint", "query", "owner", "host", "note")


def _checked(record) -> dict:
    """`record` if it is a lease record whose fields have the types the lease's arithmetic and the
    supervisors' comparisons need; TypeError/ValueError naming the first that is not."""
    if not isinstance(record, dict):
        raise TypeError(f"JSON {type(record).__name__}, not an object")
    if record.get("state") not in (HELD, RELEASED, REVOKED, BROKEN):
        raise ValueError(f"unknown state {str(record.get('state'))[:40]!r}")
    for name in _NUMBERS:
        value = record.get(name)
        if (value is not None or name == "expires_at") and (
                type(value) not in (int, float) or abs(value) > 1e11 or not math.isfinite(value)):
            # the bound first: math.isfinite of an int beyond a float's range raises OverflowError
            raise TypeError(f"field {name!r} is not a time: {str(value)[:40]!r}")
    for name, limit in (("generation", 2**53), ("pid", 2**31)):
        value = record.get(name)
        if value is not None and (type(value) is not int or not 0 <= value < limit):
            raise TypeError(f"field {name!r} is not a whole number below {limit}: {str(value)[:40]!r}")
    for name in _TEXTS:
        if record.get(name) is not None and not isinstance(record[name], str):
            raise TypeError(f"field {name!r} is {type(record[name]).__name__}")
    return record


def set_aside(store: Store, checkpoint: str, record: dict, etag: str, grace_seconds: float, reader: str) -> bool:
    """A corrupt lease (see :func:`read`): copied to the quarantine and replaced, If-Match, by a revoked one
    that is free after `grace_seconds` (the taker's ttl): a holder that may still run fails its next
    renewal on the changed ETag and stops well before, as after a supervisor's revoke. False if it
    changed meanwhile (read it again)."""
    from aldebaran.storage.quarantine import quarantine

    key = lease_key(checkpoint)
    quarantine(store, key, record["note"], reader, remove=False)
    revoked = {"checkpoint": checkpoint.rstrip("/"), "state": REVOKED, "generation": 0, "expires_at":
               time.time() + grace_seconds, "note": f"{record['note']} (set aside by {reader})"}
    try:
        store.replace(key, json.dumps(revoked).encode(), etag)
        return True
    except PreconditionFailed:
        return False


@dataclass
class Lease:
    """A lease this process holds."""

    store: Store
    checkpoint: str
    record: dict
    etag: str
    lost: str | None = None  # why it was lost, once it was
    unsure: tuple | None = None  # (record, writer token) of a write that failed: it may have landed

    @property
    def key(self) -> str:
        return lease_key(self.checkpoint)

    def _write(self, changes: dict) -> None:
        if self.unsure is not None:
            # Repeat the failed write first, with its token: if it landed, the store says so (it is ours,
            # not another's takeover) and our etag follows it; only then is the new write made.
            record, token = self.unsure
            self.etag, self.record, self.unsure = self._put(record, token), record, None
        record, token = {**self.record, **changes}, writer_token()
        try:
            self.etag = self._put(record, token)
        except PreconditionFailed:
            raise
        except ObjectStoreError:
            self.unsure = (record, token)
            raise
        self.record = record

    def _put(self, record: dict, token: str) -> str:
        return self.store.replace(self.key, json.dumps(record).encode(), self.etag, "application/json", token)

    def renew(self) -> None:
        """Extend the lease by one ttl; LeaseLost if anyone else wrote it since our last write."""
        if self.lost:
            raise LeaseLost(self.lost)
        now = time.time()
        ttl = float(self.record["ttl_seconds"])
        try:
            self._write({"renewed_at": now, "expires_at": now + ttl})
        except PreconditionFailed:
            current = read(self.store, self.checkpoint)
            self.lost = (f"lease on checkpoint {self.checkpoint} lost: now "
                         f"{describe(current[0] if current else None, now)}")
            raise LeaseLost(self.lost) from None

    def check(self) -> None:
        """Raise LeaseLost unless this lease is still known to be ours (called before each batch)."""
        if self.lost:
            raise LeaseLost(self.lost)
        if float(self.record["expires_at"]) <= time.time():
            self.lost = (f"lease on checkpoint {self.checkpoint} not renewed since "
                         f"{_iso(self.record.get('renewed_at'))}: it expired, another auditor may have it")
            raise LeaseLost(self.lost)

    def release(self) -> None:
        if self.lost:
            return
        try:
            self._write({"state": RELEASED, "expires_at": time.time(), "note": "released on stop"})
        except (PreconditionFailed, ObjectStoreError) as exc:
            log.warning("lease %s not released (%s): it will expire at %s", self.key, exc,
                        _iso(self.record.get("expires_at")))

    def keep(self, alive: Callable[[], bool], on_lost: Callable[[str], None],
             interval: float | None = None) -> "Keeper":
        keeper = Keeper(self, alive, on_lost, interval or max(0.5, float(self.record["ttl_seconds"]) / 3))
        keeper.start()
        return keeper


class Keeper(threading.Thread):
    """Renews a lease every `interval` while `alive()`; calls `on_lost(reason)` once if it is lost."""

    def __init__(self, lease: Lease, alive: Callable[[], bool], on_lost: Callable[[str], None],
                 interval: float) -> None:
        super().__init__(name="aldebaran-lease-keeper", daemon=True)
        self.lease, self.alive, self.on_lost, self.interval = lease, alive, on_lost, interval
        self.halt = threading.Event()

    def run(self) -> None:
        # The first renewal comes at once, not one interval later: the lease was acquired before the query
        # was built, which on a loaded host can take most of a ttl (docs/design.md, "Lease"), and the
        # first batch must not find the lease already expired.
        first = True
        while first or not self.halt.wait(self.interval):
            first = False
            if not self.alive():
                return  # the query ended: nothing to keep (the auditor releases on its way out)
            try:
                self.lease.renew()
            except LeaseLost as exc:
                log.error("%s: stopping this auditor", exc)
                self.on_lost(str(exc))
                return
            except ObjectStoreError as exc:
                # Keep trying until the lease would have expired; check() refuses batches after that.
                left = float(self.lease.record["expires_at"]) - time.time()
                log.warning("lease renewal failed (%s); %.0fs left on the lease", exc, left)
                if left <= 0:
                    self.lease.lost = f"lease on {self.lease.checkpoint} expired while the object store was unreachable"
                    self.on_lost(self.lease.lost)
                    return

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=10)


def acquire(store: Store, checkpoint: str, query: str, ttl_seconds: float,
            wait_seconds: float = 0.0, poll: float = 1.0) -> Lease:
    """Take the checkpoint's lease, waiting up to `wait_seconds` for a live holder's lease to end."""
    key = lease_key(checkpoint)
    owner = uuid.uuid4().hex
    deadline = time.monotonic() + wait_seconds
    while True:
        now = time.time()
        fresh = {"checkpoint": checkpoint.rstrip("/"), "query": query, "state": HELD, "owner": owner,
                 "host": socket.gethostname(), "pid": os.getpid(), "acquired_at": now, "renewed_at": now,
                 "expires_at": now + ttl_seconds, "ttl_seconds": ttl_seconds, "note": None}
        try:
            etag = store.create(key, json.dumps({**fresh, "generation": 1}).encode())
            lease = Lease(store, checkpoint, {**fresh, "generation": 1}, etag)
            log.info("checkpoint lease taken: %s (%s)", store.uri(key), describe(lease.record, now))
            return lease
        except AlreadyExists:
            pass
        current = read(store, checkpoint)
        if current is None:
            continue  # deleted in between: try the create again
        record, etag = current
        if record.get("state") == CORRUPT:
            set_aside(store, checkpoint, record, etag, ttl_seconds, f"auditor {query} ({owner})")
            continue  # read again: revoked now (or someone else's write)
        if is_free(record, now) or holder_dead_here(record):
            taken = {**fresh, "generation": int(record.get("generation") or 0) + 1}
            try:
                new_etag = store.replace(key, json.dumps(taken).encode(), etag)
            except PreconditionFailed:
                continue  # someone else moved first: look again
            log.info("checkpoint lease taken over from %s: %s", describe(record, now), store.uri(key))
            return Lease(store, checkpoint, taken, new_etag)
        if time.monotonic() >= deadline:
            raise LeaseHeld(
                f"checkpoint {checkpoint} is in use: {describe(record, now)} ({store.uri(key)}). Two auditors must "
                "never share a checkpoint: stop the other one, or wait for its lease to expire "
                "(ALDEBARAN_AUDIT_LEASE_WAIT_SECONDS waits for it)"
            )
        time.sleep(min(poll, max(0.05, deadline - time.monotonic())))


def end(store: Store, checkpoint: str, state: str, note: str, grace_seconds: float = 0.0) -> dict | None:
    """Supervisor side: mark the current lease `broken` (holder known dead) or `revoked` (free after
    `grace_seconds`), with If-Match so a renewal in between wins. Returns the record written, or None."""
    if state not in (BROKEN, REVOKED):
        raise ValueError(f"a lease is ended as {BROKEN} or {REVOKED}, not {state!r}")
    current = read(store, checkpoint)
    if current is None:
        return None
    record, etag = current
    if record.get("state") == CORRUPT:  # revoked with the grace asked (0 for broken): what ending it means
        set_aside(store, checkpoint, record, etag, grace_seconds, f"supervisor ({note})")
        return None
    if record.get("state") in (RELEASED, BROKEN):
        return record
    now = time.time()
    ended = {**record, "state": state, "note": note,
             "expires_at": min(float(record.get("expires_at") or now), now + grace_seconds)}
    try:
        store.replace(lease_key(checkpoint), json.dumps(ended).encode(), etag)
    except PreconditionFailed:
        log.warning("lease on %s changed while ending it (%s): left as it is", checkpoint, note)
        return None
    log.warning("lease on %s %s: %s", checkpoint, state, note)
    return ended
