"""`aldebaran loadgen`: trades in the original publisher's mix, keyed by order id, seeded.

The original publisher (../shared/seeds/aldebaran-design-notes.txt §3.4.3) sends one request of
50–100 shares and four purchases of ``int(limit / 2 * random())`` shares each. A purchase of 0 shares
is invalid under the contract and lands on the DLQ; that is part of the mix, not a bug.
"""

from __future__ import annotations

import argparse
import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import Iterator

from aldebaran import events

log = logging.getLogger(__name__)

CHALLENGE_EXAMPLE = [
    events.request(1, 100, "Sendence", "AAPL"),
    events.purchase(2, 1, 90, "Sendence", "AAPL"),
    events.purchase(3, 1, 30, "Sendence", "AAPL"),
    events.purchase(4, 1, 10, "Sendence", "AAPL"),
]


@dataclass(frozen=True)
class Record:
    key: bytes
    value: bytes


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def original_mix(orders: int, seed: int, client: str = "Goldman", stock: str = "AAPL") -> Iterator[dict]:
    """Events of `orders` orders, each as the original publisher sent them (request, then 4 purchases)."""
    rng = random.Random(seed)
    for _ in range(orders):
        limit = rng.randint(50, 100)
        amounts = [int(limit / 2 * rng.random()) for _ in range(4)]
        order_id = _uuid(rng)
        yield events.request(order_id, limit, client, stock)
        for amount in amounts:
            yield events.purchase(_uuid(rng), order_id, amount, client, stock)


def records(evts: Iterator[dict]) -> Iterator[Record]:
    for e in evts:
        order_id = e.get("initial_order_id", e.get("id"))
        yield Record(str(order_id).encode(), events.encode(e))


def produce(recs: list[Record] | Iterator[Record], topic: str, rate: float | None = None, progress_every: int = 100_000) -> int:
    """Produce records (keyed by order id) at `rate` events/s, or as fast as possible."""
    from aldebaran.kafka_io import producer
    from aldebaran.settings import KafkaSettings, load

    p = producer(load(KafkaSettings))
    errors: list = []
    t0 = time.monotonic()
    n = 0
    for r in recs:
        while True:
            try:
                p.produce(topic, value=r.value, key=r.key, on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.05)
        n += 1
        if rate:
            ahead = n / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        if n % 10_000 == 0:
            p.poll(0)
        if progress_every and n % progress_every == 0:
            log.info("loadgen: %d events, %.0f/s", n, n / (time.monotonic() - t0))
    p.flush(120)
    if errors:
        raise RuntimeError(f"loadgen: {len(errors)} deliveries failed: {errors[:3]}")
    log.info("loadgen: produced %d events to %s in %.1fs", n, topic, time.monotonic() - t0)
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--orders", type=int, default=1000, help="orders in the original publisher's mix")
    p.add_argument("--seed", type=int, default=1, help="random seed (same seed, same events)")
    p.add_argument("--rate", type=float, default=None, help="events per second (default: as fast as possible)")
    p.add_argument("--topic", default=None, help="target topic (default: ALDEBARAN_KAFKA_TRADES_TOPIC)")
    p.add_argument("--challenge-example", action="store_true", help="also send the challenge's order 1 example")


def main(args: argparse.Namespace) -> None:
    from aldebaran.settings import KafkaSettings, load

    topic = args.topic or load(KafkaSettings).trades_topic
    evts = list(CHALLENGE_EXAMPLE) if args.challenge_example else []
    evts += list(original_mix(args.orders, args.seed))
    produce(list(records(iter(evts))), topic, rate=args.rate)
