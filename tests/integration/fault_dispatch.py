"""Failure injection for the dispatch tests: a dispatcher whose channel SIGKILLs its own process right
after a send and before the ledger records it.

    python tests/integration/fault_dispatch.py <ledger prefix> <consumer group> <lease seconds> [<sent>]

`sent`: how many alerts of the first run actually go out before the kill (default: all of them), so a
crash can land part-way through a run. Channels come from ALDEBARAN_CHANNELS / AIRFLOW_CONN_ALDEBARAN_*
as in production.
"""

import os
import signal
import sys


class KillAfterSendFaultInjection:
    """Wraps a real channel; the process dies between the send and its record."""

    def __init__(self, inner, sent: int | None) -> None:
        self.inner = inner
        self.sent = sent

    def __getattr__(self, name: str):  # name, can_dedupe, max_run, has_lookup, lookup_lags, ...
        return getattr(self.inner, name)

    def send_many(self, alerts):
        self.inner.send_many(alerts if self.sent is None else alerts[: self.sent])
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.inner.close()


def main() -> None:
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.storage.store import S3Store

    prefix, group, lease = sys.argv[1], sys.argv[2], float(sys.argv[3])
    sent = int(sys.argv[4]) if len(sys.argv) > 4 else None
    settings = DeliverySettings(prefix=prefix, lease_seconds=lease)
    ledger = Ledger(S3Store(), prefix=prefix, lease_seconds=lease)
    channels = [KillAfterSendFaultInjection(c, sent) for c in configured_channels()]
    Dispatcher(ledger, channels, group=group, settings=settings).run_once(idle_timeout=20)


if __name__ == "__main__":
    main()
