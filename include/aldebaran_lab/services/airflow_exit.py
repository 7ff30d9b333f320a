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


def main() -> NoReturn:
    from airflow.__main__ import main as airflow_main

    sys.argv[0] = "airflow"
    run(airflow_main)


if __name__ == "__main__":
    main()
