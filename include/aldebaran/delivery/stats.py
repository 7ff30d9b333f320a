"""What a dispatcher counts as it goes: alerts, runs, and per channel what was sent, already recorded, failed,
in doubt or retried, with the recent alert → sent latencies (its heartbeat, metrics and `dispatch` summary
read it). Shared by the dispatcher's threads, so a bump takes the lock."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field


@dataclass
class DispatchStats:
    alerts: int = 0
    malformed: int = 0
    runs: int = 0
    sent: dict = field(default_factory=dict)
    already: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    in_doubt: dict = field(default_factory=dict)
    retried: dict = field(default_factory=dict)
    latencies_ms: collections.deque = field(default_factory=lambda: collections.deque(maxlen=200_000))
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def bump(self, what: str, channel: str, n: int = 1) -> None:
        if n:
            with self.lock:
                d = getattr(self, what)
                d[channel] = d.get(channel, 0) + n

    def summary(self) -> dict:
        return {"alerts": self.alerts, "malformed": self.malformed, "runs": self.runs, "sent": self.sent,
                "already_recorded": self.already, "failed": self.failed, "in_doubt": self.in_doubt,
                "retried": self.retried, "seconds": round(self.seconds, 2)}
