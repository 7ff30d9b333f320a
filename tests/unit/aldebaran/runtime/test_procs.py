"""aldebaran.runtime.procs: a live pid, a gone one, a zombie (reaped on the way), a reused pid (its start time
differs), and no pid at all."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from aldebaran.runtime.procs import pid_alive, proc_stat, start_ticks


def test_this_process_is_alive_and_the_same_one():
    assert pid_alive(os.getpid())
    assert pid_alive(os.getpid(), start_ticks(os.getpid()))


def test_a_recorded_start_time_that_differs_is_another_process():
    assert not pid_alive(os.getpid(), start_ticks(os.getpid()) + 1)


def test_no_pid_and_a_finished_process_are_not_alive():
    assert not pid_alive(None)
    assert not pid_alive(0)
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    assert done.wait() == 0
    # reaped, its pid is free (reused only once the kernel wraps around the pid space)
    assert not pid_alive(done.pid)


def test_a_zombie_child_is_gone_and_reaped():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while (proc_stat(child.pid) or ["?"])[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)  # exited, not yet waited for: a zombie
    assert proc_stat(child.pid)[0] == "Z"
    assert not pid_alive(child.pid)
    assert proc_stat(child.pid) is None  # pid_alive reaped it
    child.returncode = 0  # Popen's own wait would find nothing left to reap
