"""What the lane's Spark driver reports to its keeper (runs on the Spark 4.3 runtime: pyspark and the standard
library only, no object-store client there).

A real-time query commits once per checkpoint interval (minutes), so its progress events are too rare to
tell a live query from a hung one. The driver therefore writes a small status file every
:data:`PERIOD` seconds (atomically: a temporary file renamed over it): the query's id, whether it is
active, its status message, the last progress it has, and the exception that ended it. The keeper
(:mod:`aldebaran.lanes.keeper`, control venv, same host) reads it; a file that stops changing means a hung
driver.
"""

from __future__ import annotations

import json
import os
import threading
import time

PERIOD = 2.0


def snapshot(query) -> dict:
    """The query's state as plain JSON."""
    exc = query.exception()
    progress = query.lastProgress or {}
    return {
        "at": time.time(), "pid": os.getpid(), "query_id": str(query.id), "run_id": str(query.runId),
        "active": bool(query.isActive), "status": dict(query.status or {}),
        "batch_id": progress.get("batchId"), "progress_at": progress.get("timestamp"),
        "exception": None if exc is None else str(exc)[:2000],
    }


def write_status(path: str, body: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(body, fh, default=str)
    os.replace(tmp, path)


def report(query, path: str, stop: threading.Event, period: float = PERIOD) -> threading.Thread:
    """Start a daemon thread that writes :func:`snapshot` to `path` every `period` s until `stop`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def loop() -> None:
        while not stop.is_set():
            write_status(path, snapshot(query))
            stop.wait(period)

    thread = threading.Thread(target=loop, name="lane-status", daemon=True)
    thread.start()
    return thread
