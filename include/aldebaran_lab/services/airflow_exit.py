"""`airflow`, ending without CPython's interpreter teardown: the lab's Airflow runs its standalone and every
component (`airflow scheduler`, `api-server`, `dag-processor`, `triggerer`: the standalone starts them by
name from PATH) through this entry point (services.airflow writes the script that calls it).

Why: a component whose own shutdown is done (executor ended, job row written, uvicorn closed) then spent
most of its stop in `Py_FinalizeEx`, tearing down the modules and objects of Airflow's import graph
(py-spy: the main thread active, holding the GIL, no Python frame left). Measured on this box under load
(2026-11-28, importing the api-server app, the scheduler job runner and the LocalExecutor): 10.8 and 13.1 s
from the last statement to the process gone, 0.7-0.9 s with os._exit; the scheduler, api-server and
triggerer did it side by side, so `services down` ran into its 15 s SIGKILL. Nothing is lost by skipping
it: the atexit handlers still run first (multiprocessing's reaping of children, logging's flush), then the
standard streams are flushed, then the process ends with Airflow's own exit status.

The triggerer also gets `_runner_exit_seen_promptly`: its stop waited up to 10 s for a trigger runner that had
already exited (the cause of the stops that needed SIGKILL; see there).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def _status(code: object) -> int:
    """The exit status `sys.exit(code)` gives (None: 0; an int: itself; anything else: printed, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run(entry: Callable[[], object]) -> NoReturn:
    """Call `entry` (a CLI's main), run the atexit handlers, flush, and end the process with its status."""
    try:
        entry()
        code: object = 0
    except SystemExit as exc:  # the components' signal handlers end them by sys.exit
        code = exc.code
    status = _status(code)
    atexit._run_exitfuncs()  # what the interpreter runs first at exit (CPython's hook for it, underscored)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the standalone reading it is gone
            pass
    os._exit(status)


# How often a triggerer whose trigger runner closed every socket looks whether the runner has exited.
RUNNER_EXIT_POLL = 0.1


def _runner_exit_seen_promptly() -> None:
    """Make the triggerer notice at once that its trigger runner subprocess has exited.

    The triggerer's supervisor (TriggerRunnerSupervisor, Airflow's WatchedSubprocess) learns of the runner's
    exit only in `_service_subprocess`: it waits on a selector holding the runner's sockets, then looks at the
    exit status without blocking (`wait(timeout=0)`). A runner that exits closes its sockets a moment before it
    is a zombie; on a loaded box the supervisor handles that EOF first, finds it still running, and its next
    select has no socket left to wake it, so it sleeps out the whole wait it was given: `kill(escalation_delay=10,
    force=True)` at the triggerer's stop, 10 s. Seen with `services down` (2026-11-28, tasks running, 12 busy
    loops on 2 cores): 1.3 s after the standalone's SIGINT the runner a zombie not yet reaped, the triggerer's
    epoll set empty (/proc/PID/fdinfo), the triggerer in `epoll_wait(..., maxevents=1, timeout=9969)` (gdb)
    until SIGKILL; 2 of 4 such stops needed it. A second SIGTERM (ours, 6 s later) did not help: the
    triggerer takes it as "force", `kill(SIGKILL)` with the default escalation_delay, another 5 s in the same
    empty select; hence SIGKILL at 15 s. With no socket left to wait for, only the exit is awaited: the select
    is cut to RUNNER_EXIT_POLL and Airflow's own loop looks again (while a socket is open nothing changes).
    """
    from airflow.jobs.triggerer_job_runner import TriggerRunnerSupervisor

    service = TriggerRunnerSupervisor._service_subprocess

    def _service_subprocess(self, max_wait_time: float, raise_on_timeout: bool = False,
                            expect_signal: int | None = None):
        if not self.selector.get_map():  # every socket of the runner closed (or the selector too): it is exiting
            max_wait_time = min(max_wait_time, RUNNER_EXIT_POLL)
        return service(self, max_wait_time, raise_on_timeout=raise_on_timeout, expect_signal=expect_signal)

    TriggerRunnerSupervisor._service_subprocess = _service_subprocess


def main() -> NoReturn:
    from airflow.__main__ import main as airflow_main

    sys.argv[0] = "airflow"
    if sys.argv[1:2] == ["triggerer"]:
        _runner_exit_seen_promptly()
    run(airflow_main)


if __name__ == "__main__":
    main()
