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
