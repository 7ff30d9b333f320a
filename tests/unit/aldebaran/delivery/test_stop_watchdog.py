"""The dispatcher's stop watchdog (aldebaran.delivery.service.watch_stop): a stop that overruns its grace ends
the process with the threads' stacks logged; a process that is not stopping is left alone. The exit is a fake
(it records the code instead of ending the test run): failure injection."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

from aldebaran.delivery.service import watch_stop


class ExitFake:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


def test_a_stop_that_overruns_its_grace_dumps_the_stacks_and_exits(capfd, caplog):
    stop, exit_fake = threading.Event(), ExitFake()
    watcher = watch_stop(stop, "d1", grace=0.2, exit_now=exit_fake)
    stop.set()
    assert exit_fake.called.wait(10)
    watcher.join(5)
    assert exit_fake.codes == [70]
    assert "d1: still stopping 0.2s after the stop" in caplog.text
    stacks = capfd.readouterr().err
    # Every thread's stack: the watchdog's own and the others' (here, the test's main thread).
    assert "in watch" in stacks and "in test_a_stop_that_overruns_its_grace_dumps_the_stacks_and_exits" in stacks


def test_no_stop_no_exit():
    stop, exit_fake = threading.Event(), ExitFake()
    watch_stop(stop, "d2", grace=0.0, exit_now=exit_fake)
    assert not exit_fake.called.wait(0.5)
    assert exit_fake.codes == []


def test_a_stop_stuck_holding_the_gil_still_ends_with_the_stacks():
    """The main thread stuck in C code that holds the GIL (here a regular expression that backtracks for
    hours): the watchdog thread cannot run, faulthandler's C thread dumps the stacks and exits."""
    child = textwrap.dedent("""
        import re, threading
        from aldebaran.delivery.service import arm_stop_backstop, watch_stop
        stop = threading.Event()
        watch_stop(stop, "stuck", grace=0.3)
        arm_stop_backstop(0.3)  # as the signal handler does, with the stop
        stop.set()
        re.match(r"(a+)+$", "a" * 64 + "b")  # holds the GIL far longer than this test waits
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Timeout (0:00:02" in done.stderr and "<module>" in done.stderr
