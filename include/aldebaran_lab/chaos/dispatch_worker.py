"""A streaming dispatcher with a failure injection, for the kill-dispatch campaign and the fencing test:
exactly what `aldebaran dispatch --follow` runs (aldebaran.delivery.service.follow: the real Dispatcher,
channels from ALDEBARAN_CHANNELS / AIRFLOW_CONN_ALDEBARAN_*, ALDEBARAN_DELIVERY_* settings, heartbeat,
SIGTERM = clean stop), with each channel wrapped so that the process SIGKILLs itself (--kill-after-send) or
freezes itself with SIGSTOP until someone sends SIGCONT (--stop-after-send) right after a send and before
the ledger records its outcome — the one window where a crash leaves the ledger unsure whether the send
happened, and where a stalled owner still holds a claimed run when its successor takes the partition.

    python -m aldebaran_lab.chaos.dispatch_worker --name N [--channel C ...] --kill-after-send 0.05 --seed 3
    python -m aldebaran_lab.chaos.dispatch_worker --name N [--channel C ...] --stop-after-send
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import threading

log = logging.getLogger(__name__)


class KillAfterSendFaultInjection:
    """Failure injection: wraps a real channel; after a ``send_many`` that reached the provider, with
    probability `probability` the process dies before the dispatcher can record the outcomes (a run on
    every channel: resent, looked up or put IN_DOUBT by the next owner, as the channel allows)."""

    def __init__(self, inner, probability: float, rng: random.Random, lock: threading.Lock) -> None:
        self.inner = inner
        self.probability = probability
        self.rng = rng
        self.lock = lock

    def __getattr__(self, name: str):  # name, can_dedupe, max_run, has_lookup, lookup, close, ...
        return getattr(self.inner, name)

    def send_many(self, alerts):
        outcomes = self.inner.send_many(alerts)
        if any(o.status == "delivered" for o in outcomes):
            with self.lock:
                die = self.rng.random() < self.probability
            if die:
                log.warning("fault injection: SIGKILL after sending %d alert(s) on %s, before their record",
                            len(outcomes), self.inner.name)
                logging.shutdown()
                os.kill(os.getpid(), signal.SIGKILL)
        return outcomes


class StopAfterSendFaultInjection:
    """Failure injection: wraps a real channel; after the first ``send_many`` of the process that delivered
    something, the process SIGSTOPs itself before the dispatcher records the outcomes: frozen with a claimed
    run in hand, its Kafka heartbeats stopped too (a VM pause at the worst moment). Sends are serialised,
    so at the freeze no other thread is inside a channel (a log channel's file lock would freeze with it)."""

    def __init__(self, inner, state: dict) -> None:
        self.inner = inner
        self.state = state  # shared by every wrapped channel: {"lock": Lock, "stopped": bool}

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def send_many(self, alerts):
        with self.state["lock"]:
            outcomes = self.inner.send_many(alerts)
            if not self.state["stopped"] and any(o.status == "delivered" for o in outcomes):
                self.state["stopped"] = True
                log.warning("fault injection: SIGSTOP after sending %d alert(s) on %s, before their record",
                            len(outcomes), self.inner.name)
                os.kill(os.getpid(), signal.SIGSTOP)  # returns once resumed (SIGCONT)
        return outcomes


def main(argv: list[str] | None = None) -> int:
    from aldebaran.runtime import envfile, logs
    from aldebaran.delivery import channels as channels_mod
    from aldebaran.delivery import service

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="the dispatcher's name in its heartbeat")
    p.add_argument("--channel", action="append", help="channel name (repeatable; default: all configured)")
    p.add_argument("--kill-after-send", type=float, default=0.0,
                   help="probability of SIGKILL after a send_many that delivered something")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop-after-send", action="store_true",
                   help="SIGSTOP this process once, after the first send_many that delivered something")
    args = p.parse_args(argv)
    envfile.load_env()
    logs.setup("chaos-dispatch")
    if args.kill_after_send > 0:
        real = channels_mod.configured_channels
        rng, lock = random.Random(args.seed), threading.Lock()

        def injected(names=None, lookup=None):
            return [KillAfterSendFaultInjection(c, args.kill_after_send, rng, lock) for c in real(names, lookup)]

        # service.follow imports configured_channels from this module when it runs: it gets the wrapped ones.
        channels_mod.configured_channels = injected
    elif args.stop_after_send:
        real, state = channels_mod.configured_channels, {"lock": threading.Lock(), "stopped": False}

        def injected(names=None, lookup=None):
            return [StopAfterSendFaultInjection(c, state) for c in real(names, lookup)]

        channels_mod.configured_channels = injected
    return service.follow(args.channel or None, args.name)


if __name__ == "__main__":
    sys.exit(main())
