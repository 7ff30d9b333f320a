"""A dispatch worker for the kill-dispatch campaign: the real Dispatcher with the channels configured in
its environment (ALDEBARAN_CHANNELS / AIRFLOW_CONN_ALDEBARAN_*), optionally wrapped in a failure
injection that SIGKILLs the process right after a successful send, before its delivery record.

    python -m aldebaran.chaos.dispatch_worker --prefix P --group G --lease 2 --kill-after-send 0.05 --seed 3
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import threading


class KillAfterSendFaultInjection:
    """Failure injection: wraps a real channel; with probability `p` the process dies between a send and
    its record (the one window where a crash leaves the ledger unsure whether the send happened)."""

    def __init__(self, inner, probability: float, rng: random.Random, lock: threading.Lock) -> None:
        self.inner = inner
        self.name = inner.name
        self.can_dedupe = inner.can_dedupe
        self.probability = probability
        self.rng = rng
        self.lock = lock

    def send(self, alert: dict, idempotency_key: str) -> dict:
        receipt = self.inner.send(alert, idempotency_key)
        with self.lock:
            die = self.rng.random() < self.probability
        if die:
            logging.getLogger(__name__).warning("fault injection: SIGKILL after sending %s on %s",
                                                idempotency_key, self.name)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
        return receipt


def main(argv: list[str] | None = None) -> int:
    from aldebaran import envfile
    from aldebaran.delivery.backends import S3Backend
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher
    from aldebaran.delivery.ledger import Ledger

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--prefix", required=True, help="ledger prefix in the object store")
    p.add_argument("--group", required=True, help="Kafka consumer group prefix")
    p.add_argument("--lease", type=float, default=2.0, help="delivery lease seconds")
    p.add_argument("--kill-after-send", type=float, default=0.0, help="probability of SIGKILL after a send")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--idle-timeout", type=float, default=3.0)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    envfile.load_env()
    ledger = Ledger(S3Backend(), prefix=args.prefix, lease_seconds=args.lease, max_attempts=10,
                    backoff_base=0.2, backoff_max=1.0)
    channels = configured_channels()
    if args.kill_after_send > 0:
        rng, lock = random.Random(args.seed), threading.Lock()
        channels = [KillAfterSendFaultInjection(c, args.kill_after_send, rng, lock) for c in channels]
    stats = Dispatcher(ledger, channels, group=args.group, concurrency=args.concurrency).run_once(
        idle_timeout=args.idle_timeout)
    logging.getLogger(__name__).info("dispatch worker done: %s", stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
