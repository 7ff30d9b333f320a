"""The dispatcher's stop watchdog (aldebaran.delivery.service.watch_stop): a stop that overruns its grace ends
the process with the threads' stacks logged; a process that is not stopping is left alone. The exit is a fake
(it records the code instead of ending the test run): failure injection."""

from __future__ import annotations

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
