"""Snapshots written in the background, never inside a batch.

A snapshot is O(open books): every frozen row, concatenated and compressed. Written inline it made
its batch a multi-second stall at millions of books (docs/design.md §2, §8). Instead, at the end of a
batch whose delta is durable, the process forks (like Redis's BGSAVE): the child sees the shard as
it is at that version — every book already a frozen row, so there is nothing to encode but the
concatenation — writes `snapshot-<version>.jsonl.gz` through a files client of its own (never the
parent's sockets), reports the size on a pipe, deletes what the snapshot makes unneeded, and exits
with os._exit. The parent goes on with the next batch at once and collects the child's report on a
later batch (`poll`), without waiting for it.

Safety, in order:
- the snapshot is written whole or not at all (LocalStore renames a finished file, S3 a single PUT);
- old snapshots and deltas are deleted only by the child, only after its snapshot's write returned,
  and only those older than the `keep` newest snapshots (so the batch after any kept snapshot can be
  re-executed, as before);
- a child that dies, is killed or hangs (`TIMEOUT_S`) leaves the previous snapshot and every delta
  since: the shard still loads; the parent logs it, keeps its accounting, and the snapshot is taken
  again when next due;
- one snapshot in flight per shard: while one runs, the shard does not start another.

Memory: the child shares the parent's pages copy-on-write, but reading a row in CPython writes its
reference count, so the pages of the rows it has written are copied into the child as it goes — up
to one more copy of the shard's rows for the seconds the snapshot takes (docs/design.md §8).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from aldebaran.audit.state.files import file_name, files_for, versions
from aldebaran.audit.state.rows import dump_lines
from aldebaran.audit.state.shard import Shard

log = logging.getLogger(__name__)

TIMEOUT_S = 900.0  # a child still writing after this is killed (a hung object store): retried when next due


@dataclass
class Pending:
    """A snapshot child in flight."""

    pid: int
    version: int
    fd: int  # read end of the child's report pipe (non-blocking)
    delta_bytes: int  # the shard's delta_bytes when it forked: the deltas this snapshot covers
    shard: Shard  # the shard object that forked it: its accounting is updated on success
    started: float = field(default_factory=time.monotonic)
    report: bytes = b""


@dataclass
class Done:
    version: int
    size: int | None  # bytes of the snapshot written; None: it was not written
    seconds: float
    detail: str  # the child's report or how it ended
    shard: Shard  # the shard object that forked it
    delta_bytes: int  # its delta_bytes at the fork: the deltas the snapshot covers


_PENDING: dict[tuple[str, int], Pending] = {}


def in_flight(key: tuple[str, int]) -> Pending | None:
    return _PENDING.get(key)


def start(key: tuple[str, int], shard: Shard, root: str, keep: int) -> Pending:
    """Fork a child that writes the snapshot of `shard` (version `shard.version`, every book frozen)
    under `root`, then deletes the snapshots and deltas older than the `keep` newest snapshots."""
    if key in _PENDING:
        raise RuntimeError(f"a snapshot of {key} is already in flight (pid {_PENDING[key].pid})")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            os.close(r)
            code = _child(shard, root, keep, w)
        finally:
            os._exit(code)
    os.close(w)
    os.set_blocking(r, False)
    pending = _PENDING[key] = Pending(pid, shard.version, r, shard.delta_bytes, shard)
    return pending


def _child(shard: Shard, root: str, keep: int, report: int) -> int:
    # Signals meant for the parent's process group end the child the default way, whatever handlers
    # the parent installed (its cleanup is not the child's to run).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    try:
        files = files_for(root)  # a client of its own: the parent's connections are not the child's
        data = dump_lines(shard.books.items(), clock_ms=shard.clock_ms, clock_moved_ms=shard.clock_moved_ms)
        files.put(file_name("snapshot", shard.version), data)
        os.write(report, b"ok %d\n" % len(data))
        cleanup(files, keep)
        return 0
    except BaseException as exc:  # noqa: BLE001 — the process boundary: reported to the parent, which logs it
        os.write(report, f"error {type(exc).__name__}: {exc}"[:4000].encode("utf-8", "replace") + b"\n")
        return 1


def cleanup(files, keep: int) -> None:
    """Delete the snapshots older than the `keep` newest, and the deltas up to the oldest kept one."""
    deltas, snaps = versions(files)
    kept = sorted(snaps)[-keep:]
    if len(kept) < keep:
        return
    oldest = kept[0]
    for v, name in snaps.items():
        if v < oldest:
            files.delete(name)
    for v, name in deltas.items():
        if v <= oldest:
            files.delete(name)


def poll(key: tuple[str, int], block: bool = False) -> Done | None:
    """The outcome of the shard's snapshot child once it has ended (reaped), else None. With `block`,
    wait for it. A child past TIMEOUT_S is killed and counts as failed."""
    p = _PENDING.get(key)
    if p is None:
        return None
    if block:
        os.set_blocking(p.fd, True)
    try:
        while chunk := os.read(p.fd, 4096):
            p.report += chunk
    except BlockingIOError:  # still running
        if time.monotonic() - p.started < TIMEOUT_S:
            return None
        log.warning("snapshot %s of version %d: still running after %.0f s, killing pid %d", key, p.version,
                    TIMEOUT_S, p.pid)
        os.kill(p.pid, signal.SIGKILL)
    os.close(p.fd)
    del _PENDING[key]
    status = _reap(p.pid)
    seconds = time.monotonic() - p.started
    first = p.report.split(b"\n", 1)[0].decode("utf-8", "replace")
    size = int(first[3:]) if first.startswith("ok ") else None
    detail = p.report.decode("utf-8", "replace").strip() or "no report"
    if status:
        detail += f"; {status}"
    return Done(p.version, size, seconds, detail, p.shard, p.delta_bytes)


def wait_all() -> list[Done]:
    """Wait for every snapshot in flight in this process (tests; a process about to exit may call it)."""
    return [d for key in list(_PENDING) if (d := poll(key, block=True)) is not None]


def _reap(pid: int) -> str:
    """Collect the child's exit status ('' for a clean exit). It closed its end of the pipe by exiting."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): the report alone tells
        return ""
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    code = os.WEXITSTATUS(status)
    return f"exit status {code}" if code else ""
