"""How the lab's Airflow stop finds what a task left behind (services.airflow.Airflow._holders): a process
in a session of its own that inherited a task process's stdio socket (a BashOperator's command holds its
supervisor's request socket), found on real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from aldebaran_lab.services.airflow import Airflow
from aldebaran_lab.services.base import processes

# The "task": stdin is the supervisor's socket; it starts a command in a session of its own (as
# SubprocessHook does) that inherits that stdin, and a second one with stdin from /dev/null (a detached
# auditor or dispatcher, which must outlive the task).
TASK = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                 stdin=subprocess.DEVNULL)
time.sleep(60)
"""


def test_what_a_task_left_holding_its_supervisor_s_socket_is_found_and_a_detached_process_is_not():
    supervisor_end, task_end = socket.socketpair()
    task = subprocess.Popen([sys.executable, "-c", TASK], stdin=task_end, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(children := {p for p, (ppid, _, _) in processes().items() if ppid == task.pid}) < 2:
            assert time.monotonic() < deadline, "the task's commands did not start"
            time.sleep(0.1)
        sockets = Airflow._stdio_sockets(task.pid)
        assert len(sockets) == 1, sockets  # stdin; stdout and stderr are this test's
        holders = Airflow._holders(os.getpgid(0), sockets)
        inherited = {p for p in children if Airflow._stdio_sockets(p)}
        assert len(inherited) == 1
        assert holders == {task.pid} | inherited  # not the detached one, not this process (the other end)
    finally:
        for p in {p for p, (ppid, _, _) in processes().items() if ppid == task.pid}:
            os.kill(p, signal.SIGKILL)
        task.kill()
        task.wait()
        supervisor_end.close()
        task_end.close()
