"""The platform's own log lines: one setup for every entry point (the CLI, spark_apps/, the shard hosts).

Every line carries an ISO-8601 UTC time to the millisecond (``2026-11-28T05:09:05.123Z``), so a process
that runs for days writes lines that can be placed in time and joined with Kafka's and Spark's (their
log4j2 patterns use :data:`LOG4J2_DATE`, the same format). ALDEBARAN_LOG_FORMAT chooses the layout:

- ``text`` (default): ``2026-11-28T05:09:05.123Z WARNING aldebaran.delivery.dispatcher: webhook: ...``
- ``json``: one JSON object per line: ``time``, ``level``, ``logger``, ``message``, ``role`` (the
  process: ``dispatch``, ``auditor``, ``lanes``...), and where the call site knows them ``channel``,
  ``partition``, ``alert_id``, ``batch_id``, ``batch``; ``exception`` holds a traceback.

The call sites pass the context fields as ``extra=`` (:func:`fields` drops the unknown ones).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import IO

# The fields a call site may add with extra=, in the order a JSON line shows them.
CONTEXT_FIELDS = ("channel", "partition", "alert_id", "batch_id", "batch")

# Libraries whose INFO lines drown the platform's.
# Libraries that log at INFO per request or call: httpx writes a line per HTTP request (the APNs channel's, one
# per alert: thousands a second).
NOISY = ("botocore", "boto3", "urllib3", "py4j", "s3transfer", "httpx", "httpcore")

# log4j2's PatternLayout date of the same instant format, for Spark's and the services' JVMs.
LOG4J2_DATE = "%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX}{UTC}"

TEXT_FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def iso_time(record: logging.LogRecord) -> str:
    """The record's time as ISO-8601 UTC with milliseconds and a ``Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def fields(**context) -> dict:
    """``extra=`` for a log call: the context fields that are known (not None)."""
    return {k: v for k, v in context.items() if v is not None}


class TextFormatter(logging.Formatter):
    """The classic one-line layout with an ISO-8601 UTC time."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 (logging's name)
        return iso_time(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line (a message's own newlines are escaped inside its string)."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": iso_time(record), "level": record.levelname, "logger": record.name,
               "message": record.getMessage(), "role": self.role}
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def formatter(role: str, log_format: str | None = None) -> logging.Formatter:
    """The formatter of ALDEBARAN_LOG_FORMAT (or `log_format`)."""
    if log_format is None:
        from aldebaran.settings import LogSettings, load

        log_format = load(LogSettings).format  # an invalid value fails here, named
    return JsonFormatter(role) if log_format == "json" else TextFormatter()


def setup(role: str, *, verbose: bool = False, level: int | None = None, stream: IO[str] | None = None,
          log_format: str | None = None) -> None:
    """Configure the root logger for a process of `role`: a stream handler (stderr unless `stream`) with the
    configured format, INFO (DEBUG when `verbose`, or `level`), the noisy libraries at WARNING.

    Like ``logging.basicConfig``, it leaves a root logger that already has handlers alone (a test's
    capture, a host process's own setup). Call it after the .env is loaded (envfile.load_env), so the
    format set there applies."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(role, log_format))
    logging.basicConfig(level=level if level is not None else logging.DEBUG if verbose else logging.INFO,
                        handlers=[handler])
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
