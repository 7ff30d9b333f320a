"""Log channel: JSON lines appended to a file (demos, debugging); the file is its own sent-log.

Each line is ``{"idempotency_key", "sent_at", "alert"}``. ``send_many`` appends a whole ledger run
under one exclusive lock (``flock``, so concurrent senders, threads or processes, never interleave
lines) with **one fsync per run**, not per line.

The channel cannot deduplicate in the sense of a provider honouring a key for whoever reads the
file, but it never writes a key twice: it keeps the keys its file holds (key → end offset of the
line; one scan of the file on first use, then only the bytes appended since, read under the same
lock before each append, so other processes' lines count too) and reports a key it already holds as
delivered with the existing line's receipt. That makes ``lookup`` exact at once (after a crash the
dispatcher asks per pending alert of the dead owner's run) and lets repeats of an alert id beyond the
dispatcher's dedupe window be refused here, with no ledger write per alert. The index costs about
100 bytes of memory per line in the file; a file truncated or replaced (rotation) is indexed anew.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from aldebaran.runtime import paths
from aldebaran.delivery.channels.base import DEDUPE_MAX_RUN, Channel, Outcome, Promise, register
from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.exceptions import RetryableError
from aldebaran.delivery.settings import ChannelSettings
from aldebaran.model import Alert
from aldebaran.settings import load

# Lines are written by json.dumps of a dict whose first key is the idempotency key: read it without
# decoding the whole line (a full json.loads is ~10× slower on a large file's first scan).
_KEY = re.compile(rb'^\{"idempotency_key":"((?:[^"\\]|\\.)*)"')


@register("log")
class LogChannel(Channel):
    """JSON lines in a file: ``path``, else ALDEBARAN_LOG_CHANNEL_PATH, else the run directory."""

    can_dedupe: ClassVar[bool] = False
    lookup_lags: ClassVar[bool] = False  # the file answers at once
    remembers_sent: ClassVar[bool] = True
    dedupe_key: ClassVar[str | None] = "its own sent-log, by alert id"
    in_doubt_policy: ClassVar[str] = "settled at once by reading the file"
    # Settled by its own exact lookup, and it refuses a key its file holds.
    delivery_promise: ClassVar[Promise] = Promise.EXACTLY_ONCE

    def __init__(self, name: str = "log", path: str | Path | None = None, *, max_run: int | None = None) -> None:
        # A crash costs no doubt here (lookup), so runs are as long as on a deduplicating channel.
        super().__init__(name, concurrency=1, max_run=max_run if max_run is not None else DEDUPE_MAX_RUN)
        default = paths.run_dir() / ("alerts.log.jsonl" if name == "log" else f"alerts.{name}.log.jsonl")
        self.path = Path(path or load(ChannelSettings).log_channel_path or default)
        self.has_lookup = True
        self._keys: dict[str, int] = {}  # idempotency key → end offset of its line
        self._indexed: tuple[int, int] = (-1, 0)  # (inode, bytes read) of the file the keys come from
        self._lock = threading.Lock()  # flock is per open file: threads of one process also need this

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "LogChannel":
        return cls(name, conn.extra_str("path"))

    def __repr__(self) -> str:
        return f"LogChannel(name={self.name!r}, path={str(self.path)!r})"

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        return self.send_many([alert])[0].result()

    def send_many(self, alerts: Sequence[Alert]) -> list[Outcome]:
        """Append every alert whose key the file does not hold yet, under one lock, then fsync once."""
        batch = list(alerts)
        if not batch:
            return []
        path = str(self.path)
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fh = open(self.path, "a+b")
            except OSError as exc:  # nothing was written
                return [Outcome.retry(a.alert_id, f"log channel {path}: {exc}") for a in batch]
            with fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX)
                    torn = self._catch_up(fh)
                except OSError as exc:
                    return [Outcome.retry(a.alert_id, f"log channel {path}: {exc}") for a in batch]
                # A crash mid-write can leave a last line without its newline: end it, never glue onto it.
                chunks, pos, written, outcomes = ([b"\n"] if torn else []), self._indexed[1] + torn, {}, []
                for alert in batch:
                    key = alert.alert_id
                    end = self._keys.get(key, written.get(key))
                    if end is not None:
                        outcomes.append(Outcome.delivered(key, {"file": path, "offset": end, "found_by": "sent-log"}))
                        continue
                    line = json.dumps({"idempotency_key": key, "sent_at": time.time(), "alert": alert.to_dict()},
                                      separators=(",", ":")).encode() + b"\n"
                    chunks.append(line)
                    pos += len(line)
                    written[key] = pos
                    outcomes.append(Outcome.delivered(key, {"file": path, "offset": pos}))
                if not written:
                    return outcomes
                try:
                    fh.write(b"".join(chunks))
                    fh.flush()
                    os.fsync(fh.fileno())
                except OSError as exc:
                    # Some lines may be in the file: unknown, so the ledger asks `lookup` before any resend.
                    self._indexed = (-1, 0)
                    return [o if o.alert_id not in written else Outcome.unknown(o.alert_id, f"log channel {path}: {exc}")
                            for o in outcomes]
                self._keys.update(written)
                self._indexed = (self._indexed[0], pos)
        return outcomes

    def lookup(self, alert_id: str) -> dict | None:
        """The line written with idempotency key `alert_id` as a receipt, or None if the file has none."""
        with self._lock:
            try:
                with open(self.path, "rb") as fh:
                    fcntl.flock(fh, fcntl.LOCK_SH)
                    self._catch_up(fh)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise RetryableError(f"log channel {self.path}: lookup of {alert_id}: {exc}") from exc
            end = self._keys.get(alert_id)
        return None if end is None else {"file": str(self.path), "offset": end, "found_by": "lookup"}

    def _catch_up(self, fh) -> int:
        """Index the lines appended since the last look (all of them for a new or replaced file).
        Called under the file lock. Returns 1 if the file ends in a torn line (no newline), else 0."""
        st = os.fstat(fh.fileno())
        inode, done = self._indexed
        if st.st_ino != inode or st.st_size < done:
            self._keys, done = {}, 0
        if st.st_size == done:
            self._indexed = (st.st_ino, done)
            return 0
        fh.seek(done)
        data = fh.read(st.st_size - done)
        complete = data.rfind(b"\n") + 1  # a torn last line (a crash mid-write) is not a line
        pos = done
        for line in data[:complete - 1].split(b"\n") if complete else ():
            pos += len(line) + 1
            m = _KEY.match(line)
            if m and line.endswith(b"}}"):  # a whole line, not the head of one torn by a crash
                self._keys[json.loads(b'"' + m.group(1) + b'"')] = pos
        # The torn tail stays unread: the next append starts a new line after it.
        self._indexed = (st.st_ino, st.st_size if complete < len(data) else pos)
        return 1 if complete < len(data) else 0
