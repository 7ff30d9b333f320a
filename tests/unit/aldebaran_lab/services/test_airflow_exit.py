"""The lab's `airflow` entry point (services.airflow_exit) in a real child interpreter: the CLI's exit status
kept, atexit handlers and buffered output still delivered, the interpreter's teardown skipped."""

from __future__ import annotations

import subprocess
import sys

import pytest

# `teardown` prints from __del__ only when the interpreter tears the module's globals down at exit.
CHILD = """
import atexit, sys
from aldebaran_lab.services.airflow_exit import run

class Teardown:
    def __del__(self):
        print("torn down", flush=True)

teardown = Teardown()
atexit.register(lambda: print("atexit ran"))

def entry():
    sys.stdout.write("buffered, no newline")
    {body}

run(entry)
"""


def child(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD.format(body=body)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize(("body", "status"), [("return None", 0), ("sys.exit(0)", 0), ("sys.exit(3)", 3),
                                              ("sys.exit(None)", 0)])
def test_exit_status_is_the_cli_s_and_atexit_runs_without_teardown(body, status):
    done = child(body)
    assert done.returncode == status, done.stderr
    assert done.stdout == "buffered, no newlineatexit ran\n", done.stdout  # flushed; no "torn down"


def test_a_message_passed_to_sys_exit_is_printed_with_status_1():
    done = child('sys.exit("bad config")')
    assert done.returncode == 1
    assert done.stderr == "bad config\n"


def test_the_same_child_ending_normally_tears_down():
    """The control: without run(), the interpreter's teardown runs __del__ (what the test above rules out)."""
    code = CHILD.replace("run(entry)", "entry()").format(body="return None")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "torn down" in done.stdout, done.stdout


def test_the_triggerer_waits_for_its_runner_s_exit_in_short_selects_once_no_socket_is_left(monkeypatch):
    """A runner with no socket left can only be waited for by looking at its exit: Airflow's own select then
    slept out the whole wait (10 s at the triggerer's stop) when the runner closed its sockets a moment before
    it was a zombie. The wait is cut to RUNNER_EXIT_POLL then, and only then."""
    import selectors
    import socket
    from types import SimpleNamespace

    from airflow.jobs.triggerer_job_runner import TriggerRunnerSupervisor

    from aldebaran_lab.services import airflow_exit

    calls = []
    monkeypatch.setattr(TriggerRunnerSupervisor, "_service_subprocess",
                        lambda self, max_wait_time, raise_on_timeout=False, expect_signal=None:
                        calls.append((max_wait_time, raise_on_timeout, expect_signal)) or 7)
    airflow_exit._runner_exit_seen_promptly()
    patched = TriggerRunnerSupervisor._service_subprocess
    a, b = socket.socketpair()
    with selectors.DefaultSelector() as selector, a, b:
        sup = SimpleNamespace(selector=selector)
        assert patched(sup, 10.0, expect_signal=2) == 7  # nothing registered: the runner is exiting
        selector.register(a, selectors.EVENT_READ)
        patched(sup, 10.0, raise_on_timeout=True)  # a socket open: Airflow's wait as it was
        patched(sup, 0.05)
    assert calls == [(airflow_exit.RUNNER_EXIT_POLL, False, 2), (10.0, True, None), (0.05, False, None)]
