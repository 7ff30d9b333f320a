"""Failure injection for the health-endpoint tests: exactly what `aldebaran dispatch --follow` runs
(aldebaran.delivery.service.follow: real Dispatcher, Kafka, ledger, heartbeat, /metrics server), with each
channel's send hanging for as long as a file exists — a channel loop stuck in a call, alive but making no
progress, while the process still answers HTTP (unlike a SIGSTOP).

    python tests/integration/fault_stall.py <stall file> <dispatcher name>
"""

import sys
import time
from pathlib import Path


class HangWhileFileExistsFaultInjection:
    """Wraps a real channel; ``send_many`` waits while `path` exists, then sends for real."""

    def __init__(self, inner, path: Path) -> None:
        self.inner = inner
        self.path = path

    def __getattr__(self, name: str):  # name, can_dedupe, max_run, has_lookup, lookup, close, ...
        return getattr(self.inner, name)

    def send_many(self, alerts):
        while self.path.exists():
            time.sleep(0.1)
        return self.inner.send_many(alerts)


def main() -> int:
    from aldebaran.runtime import logs
    from aldebaran.delivery import channels as channels_mod
    from aldebaran.delivery import service

    stall, name = Path(sys.argv[1]), sys.argv[2]
    logs.setup("stall-dispatch")
    real = channels_mod.configured_channels
    # service.follow imports configured_channels from this module when it runs: it gets the wrapped ones.
    channels_mod.configured_channels = lambda *a, **kw: [HangWhileFileExistsFaultInjection(c, stall)
                                                         for c in real(*a, **kw)]
    return service.follow(None, name)


if __name__ == "__main__":
    sys.exit(main())
