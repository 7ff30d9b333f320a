"""The staged stop of a local service (services.base.Service.stop) on small stand-in processes: the stop
signal, SIGTERM after the grace, SIGKILL at the timeout, every process of the service's session waited for
(an orphan in a group of its own too), a process in a session of its own left alone."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from aldebaran_lab.services.base import Service, pid_alive, session

IGNORE_INT = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
IGNORE_BOTH = IGNORE_INT + "signal.signal(signal.SIGTERM, signal.SIG_IGN); "


class StandIn(Service):
    name = "stand-in"
    stop_signal = signal.SIGINT
    stop_grace = 0.5
    stop_timeout = 2.0

    def __init__(self, root, code: str) -> None:
        super().__init__(root)
        self.code = code

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.code]

    def healthy(self) -> bool:
        return self.running()


@pytest.fixture
def started(tmp_path):
    services = []

    def start(code: str, ready: str | None = None) -> StandIn:
        svc = StandIn(tmp_path, code)
        svc.launch()
        services.append(svc)
        deadline = time.monotonic() + 10
        while ready and not (tmp_path / ready).exists():
            assert time.monotonic() < deadline, "stand-in not ready"
            time.sleep(0.05)
        time.sleep(0.2)  # its signal handlers are set
        return svc

    yield start
    for svc in services:
        svc.kill()


def test_the_stop_signal_alone(started):
    svc = started("import time; time.sleep(60)")
    result = svc.stop()
    assert result.signals == ("SIGINT",) and not result.killed and result.seconds < 0.5
    assert str(result).startswith("stand-in: stopped in ") and str(result).endswith("s (SIGINT)")
    assert svc.logfile.read_text().splitlines()[-1] == f"aldebaran services: {result}"


def test_sigterm_after_the_grace_then_sigkill_at_the_timeout(started):
    assert started(IGNORE_INT + "time.sleep(60)").stop().signals == ("SIGINT", "SIGTERM")
    result = started(IGNORE_BOTH + "time.sleep(60)").stop()
    assert result.signals == ("SIGINT", "SIGTERM", "SIGKILL") and result.killed
    assert 2.0 <= result.seconds < 3.0


def test_an_orphan_in_a_group_of_its_own_is_waited_for_and_one_in_a_session_of_its_own_is_not(started, tmp_path):
    # The leader starts a child in its own process group (as Airflow 3 does with a task) that ignores SIGINT
    # and SIGTERM, and one in its own session (as a task's detached auditor); it exits at once on SIGINT.
    code = ("import os, signal, subprocess, sys, time\n"
            f"ign = {IGNORE_BOTH!r} + 'time.sleep(60)'\n"
            "grp = subprocess.Popen([sys.executable, '-c', ign], process_group=0)\n"
            "own = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
            f"open({str(tmp_path / 'pids')!r}, 'w').write(f'{{grp.pid}} {{own.pid}}')\n"
            "time.sleep(60)\n")
    svc = started(code, ready="pids")
    group_child, detached = map(int, (tmp_path / "pids").read_text().split())
    leader = svc.pid()
    assert group_child in session(leader) and detached not in session(leader)
    try:
        result = svc.stop()
        assert result.signals == ("SIGINT", "SIGTERM", "SIGKILL"), result  # the orphan needed SIGKILL
        assert not pid_alive(group_child) and pid_alive(detached)
    finally:
        os.kill(detached, signal.SIGKILL)
