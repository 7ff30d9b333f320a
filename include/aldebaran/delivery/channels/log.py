"""Log channel: JSON lines appended to a file (demos, debugging). Not deduplicating by itself.

Each line is ``{"idempotency_key", "sent_at", "alert"}``, appended under an exclusive lock and
fsynced, so concurrent senders (threads or processes) never interleave lines.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import ClassVar

from aldebaran import paths
from aldebaran.delivery.channels.base import Channel, register
from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.exceptions import RetryableError
from aldebaran.delivery.settings import ChannelSettings
from aldebaran.model import Alert
from aldebaran.settings import load


@register("log")
class LogChannel(Channel):
    """JSON lines in a file: ``path``, else ALDEBARAN_LOG_CHANNEL_PATH, else the run directory."""

    can_dedupe: ClassVar[bool] = False

    def __init__(self, name: str = "log", path: str | Path | None = None) -> None:
        super().__init__(name)
        default = paths.run_dir() / ("alerts.log.jsonl" if name == "log" else f"alerts.{name}.log.jsonl")
        self.path = Path(path or load(ChannelSettings).log_channel_path or default)

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "LogChannel":
        return cls(name, conn.extra_str("path"))

    def __repr__(self) -> str:
        return f"LogChannel(name={self.name!r}, path={str(self.path)!r})"

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"idempotency_key": idempotency_key, "sent_at": time.time(),
                           "alert": Alert.of(alert).to_dict()}, separators=(",", ":")) + "\n"
        try:
            with open(self.path, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
                offset = fh.tell()
        except OSError as exc:
            raise RetryableError(f"log channel {self.path}: {exc}") from exc
        return {"file": str(self.path), "offset": offset}
