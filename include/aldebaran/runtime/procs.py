"""Processes on this host, read from ``/proc`` (the platform runs on Linux): is a pid a live process, and is it
the same process as when its start time was recorded (a pid can be reused).

One helper for every reader: the leases (a holder dead on this host), the metrics' stale scrape targets, the
shard hosts' anchor executor and the supervisors' children."""

from __future__ import annotations

import os


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (index 0: the state), or None when there is
    no such process."""
    try:
        with open(f"/proc/{int(pid)}/stat") as fh:
            raw = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ..." — comm may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (with the pid, its identity)."""
    stat = proc_stat(pid)
    return int(stat[19]) if stat else None


def pid_alive(pid: int | None, ticks: int | None = None) -> bool:
    """Is `pid` a running process on this host (not a zombie), and the same one as when `ticks`
    (its start time in clock ticks) was recorded?"""
    if not pid:
        return False
    stat = proc_stat(int(pid))
    if stat is None:
        return False
    if stat[0] in ("Z", "X"):
        try:
            os.waitpid(int(pid), os.WNOHANG)  # our own child (e.g. dag.test runs tasks in-process): reap it
        except ChildProcessError:
            pass
        return False
    return ticks is None or int(stat[19]) == int(ticks)
