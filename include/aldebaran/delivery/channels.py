"""Alert channels behind one small interface: ``send(alert, idempotency_key) -> receipt``.

A channel raises RetryableError (try again later) or PermanentError (never succeeds). `can_dedupe`
says whether the provider honours the idempotency key: if it does, a send whose outcome is unknown
may be repeated safely; if not, the ledger marks it IN_DOUBT instead of sending twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import ClassVar, Protocol

from aldebaran import paths


class RetryableError(Exception):
    """Temporary failure: the ledger schedules a retry with backoff."""


class PermanentError(Exception):
    """The provider refused the alert for good: the ledger marks it DEAD."""


class Channel(Protocol):
    name: str
    can_dedupe: bool

    def send(self, alert: dict, idempotency_key: str) -> dict: ...


class LogChannel:
    """JSON lines appended to a file (demos, debugging). Not deduplicating by itself."""

    kind: ClassVar[str] = "log"
    can_dedupe = False

    def __init__(self, name: str = "log", path: str | Path | None = None) -> None:
        self.name = name
        self.path = Path(path or os.environ.get("ALDEBARAN_LOG_CHANNEL_PATH", paths.run_dir() / "alerts.log.jsonl"))

    def send(self, alert: dict, idempotency_key: str) -> dict:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"idempotency_key": idempotency_key, "sent_at": time.time(), "alert": alert},
                          separators=(",", ":")) + "\n"
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


def configured_channels(names: list[str] | None = None) -> list[Channel]:
    """The channels named in ALDEBARAN_CHANNELS (default: log)."""
    from aldebaran.exceptions import ConfigError

    wanted = names or [n.strip() for n in os.environ.get("ALDEBARAN_CHANNELS", "log").split(",") if n.strip()]
    factories = {"log": LogChannel}
    out: list[Channel] = []
    for name in wanted:
        if name not in factories:
            raise ConfigError(f"ALDEBARAN_CHANNELS: unknown channel {name!r}; known: {', '.join(factories)}")
        out.append(factories[name](name))
    return out
