"""The deployed bench's order mixes (aldebaran_lab.deployed_capacity, deployed_parts' producer): ``one-alert``
— a request for 100 shares, then two purchases of 60, one OVERFILL per order — and ``publisher``, the original
publisher's mix, whose expected alerts the reference model gives."""

from __future__ import annotations

import json
import random
from typing import Iterator

MIXES = ("one-alert", "publisher")
EVENTS_PER_ORDER = {"one-alert": 3, "publisher": 5}


def order_values(mix: str, oid: str, rng: random.Random) -> list[dict]:
    """One order's events, in the order they are sent."""
    if mix == "one-alert":
        return [{"id": oid, "#shares": 100, "client": "Bench", "stock": "AAPL"},
                {"id": f"{oid}-a", "initial_order_id": oid, "#shares": 60, "client": "Bench", "stock": "AAPL"},
                {"id": f"{oid}-b", "initial_order_id": oid, "#shares": 60, "client": "Bench", "stock": "AAPL"}]
    if mix == "publisher":
        # original_mix's draws, in its order (limit, then the four amounts), under a prefixed order id
        limit = rng.randint(50, 100)
        amounts = [int(limit / 2 * rng.random()) for _ in range(4)]
        return [{"id": oid, "#shares": limit, "client": "Goldman", "stock": "AAPL"},
                *({"id": f"{oid}-{k}", "initial_order_id": oid, "#shares": a, "client": "Goldman", "stock": "AAPL"}
                  for k, a in enumerate(amounts))]
    raise ValueError(f"unknown mix {mix!r}; known: {', '.join(MIXES)}")


def orders_of(mix: str, prefix: str, orders: int, seed: int) -> Iterator[tuple[str, list[dict]]]:
    rng = random.Random(seed)
    for i in range(orders):
        oid = f"{prefix}-{i}"
        yield oid, order_values(mix, oid, rng)


def order_count(mix: str, rate: float, seconds: float) -> int:
    return max(1, int(rate * seconds / EVENTS_PER_ORDER[mix]))


def expected_ids(mix: str, prefix: str, orders: int, seed: int) -> set[str]:
    """The alert ids the reference model expects for these orders (sent in order, times increasing)."""
    from aldebaran.audit import reference

    def pairs():
        n = 0
        for oid, values in orders_of(mix, prefix, orders, seed):
            for v in values:
                n += 1
                yield oid.encode(), json.dumps(v).encode(), n

    return {a["alert_id"] for a in reference.expected_grouped(pairs(), ttl_ms=reference.DEFAULT_TTL_MS)}
