"""`aldebaran loadgen`: trades in the original publisher's mix or a configurable one, keyed by order id,
seeded, at a target rate or as fast as possible; writes the alerts the reference model expects.

The original publisher (the challenge's reference implementation) sends one request of
50–100 shares and four purchases of ``int(limit / 2 * random())`` shares each, so about 2 % of its
purchases are for 0 shares. Those are valid under the contract (docs/design.md § Contracts: ``#shares`` is an integer
≥ 0): the auditor applies them and they count 0.

The configurable mix (:class:`Mix`) controls what the benchmarks need to vary:

- ``purchases_per_order``: purchases per order (each ≥ 1 share);
- ``overfill_fraction``: share of orders whose purchases sum to more than the request (the others
  sum to at most the request, so exactly these orders raise an OVERFILL);
- ``orphan_fraction``: share of orders that never get a request (ORPHAN once their book expires);
- ``purchase_first``: each purchase independently comes before its request with this probability;
- ``duplicate_fraction``: each message is delivered a second time (same bytes, later in its order's
  sequence) with this probability — the bus is at-least-once;
- ``malformed_fraction``: after each message, with this probability, one invalid message (not JSON,
  negative or string shares, a missing field, a JSON array) — they belong on the DLQ;
- ``open_orders``: how many orders are in flight at once: the events of up to this many orders are
  interleaved at random (1 = one order after the other, like the original publisher).

Every message is keyed by its order id, so one order's events stay in one partition, in order.
The expected alerts come from :mod:`aldebaran.audit.reference` (an independent model), computed over the
exact bytes and Kafka timestamps produced: ``--expected`` writes them as JSON next to the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator

from aldebaran.audit import parse as events

log = logging.getLogger(__name__)

CHALLENGE_EXAMPLE = [
    events.request(1, 100, "Sendence", "AAPL"),
    events.purchase(2, 1, 90, "Sendence", "AAPL"),
    events.purchase(3, 1, 30, "Sendence", "AAPL"),
    events.purchase(4, 1, 10, "Sendence", "AAPL"),
]

CLIENTS = ("Sendence", "Goldman", "Acme", "Initech", "Globex")
STOCKS = ("AAPL", "MSFT", "GOOG", "AMZN", "TSLA", "IBM")


@dataclass(frozen=True)
class Record:
    """One Kafka message: key (the order id), value, and optionally its Kafka timestamp (epoch ms)."""

    key: bytes
    value: bytes
    ts: int | None = None


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


def records(evts: Iterable[dict]) -> Iterator[Record]:
    for e in evts:
        order_id = e.get("initial_order_id", e.get("id"))
        yield Record(str(order_id).encode(), events.encode(e))


# --- the configurable mix -----------------------------------------------------------------------
@dataclass(frozen=True)
class Mix:
    """A configurable trade mix (see the module docstring); validated on creation."""

    orders: int = 1000
    purchases_per_order: int = 4
    overfill_fraction: float = 0.5
    orphan_fraction: float = 0.0
    purchase_first: float = 0.0
    duplicate_fraction: float = 0.0
    malformed_fraction: float = 0.0
    open_orders: int = 1
    seed: int = 1
    id_prefix: str = ""

    def __post_init__(self) -> None:
        if self.orders < 0:
            raise ValueError(f"orders must be >= 0, got {self.orders}")
        if not 1 <= self.purchases_per_order <= 50:
            raise ValueError(f"purchases_per_order must be between 1 and 50, got {self.purchases_per_order}")
        for name in ("overfill_fraction", "orphan_fraction", "purchase_first", "duplicate_fraction",
                     "malformed_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.open_orders < 1:
            raise ValueError(f"open_orders must be >= 1, got {self.open_orders}")


def _split(rng: random.Random, total: int, parts: int) -> list[int]:
    """`total` as `parts` positive integers (a uniformly random composition)."""
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    edges = [0, *cuts, total]
    return [b - a for a, b in zip(edges, edges[1:])]


def _malformed(rng: random.Random, order_id: str, n: int, client: str, stock: str) -> bytes:
    choice = rng.randrange(5)
    if choice == 0:
        return b'{"id": "' + order_id.encode() + b'", "#shares": 10'  # truncated: not JSON
    if choice == 1:
        return events.encode({"id": f"{order_id}-m{n}", "initial_order_id": order_id, "#shares": -1,
                              "client": client, "stock": stock})
    if choice == 2:
        return events.encode({"id": order_id, "#shares": "100", "client": client, "stock": stock})
    if choice == 3:
        return events.encode({"id": order_id, "#shares": 100, "stock": stock})  # request without client
    return b'[{"id": "' + order_id.encode() + b'"}]'


def _order_messages(rng: random.Random, mix: Mix, n: int) -> tuple[str, list[bytes]]:
    """One order's messages, in the order they are sent."""
    order_id = f"{mix.id_prefix}{n}"
    client, stock = rng.choice(CLIENTS), rng.choice(STOCKS)
    k = mix.purchases_per_order
    requested = rng.randint(max(50, k), 100)
    overfill = rng.random() < mix.overfill_fraction
    total = rng.randint(requested + 1, requested + max(1, requested // 2)) if overfill else rng.randint(k, requested)
    purchases = [events.encode(events.purchase(f"{order_id}-{i}", order_id, shares, client, stock))
                 for i, shares in enumerate(_split(rng, total, k))]
    before = [p for p in purchases if rng.random() < mix.purchase_first]
    after = [p for p in purchases if p not in before]
    seq = list(before)
    if not rng.random() < mix.orphan_fraction:
        seq.append(events.encode(events.request(order_id, requested, client, stock)))
    seq.extend(after)
    if mix.duplicate_fraction:
        for msg in list(seq):
            if rng.random() < mix.duplicate_fraction:
                at = rng.randint(seq.index(msg) + 1, len(seq))
                seq.insert(at, msg)
    if mix.malformed_fraction:
        out = []
        for i, msg in enumerate(seq):
            out.append(msg)
            if rng.random() < mix.malformed_fraction:
                out.append(_malformed(rng, order_id, i, client, stock))
        seq = out
    return order_id, seq


def mix_records(mix: Mix) -> Iterator[Record]:
    """The mix's messages, keyed by order id: the events of up to `open_orders` orders interleaved."""
    rng = random.Random(mix.seed)
    active: list[tuple[bytes, list[bytes], int]] = []  # (key, messages, next index)
    started = 0
    while started < mix.orders or active:
        while started < mix.orders and len(active) < mix.open_orders:
            order_id, seq = _order_messages(rng, mix, started)
            active.append((order_id.encode(), seq, 0))
            started += 1
        i = rng.randrange(len(active)) if len(active) > 1 else 0
        key, seq, pos = active[i]
        yield Record(key, seq[pos])
        if pos + 1 < len(seq):
            active[i] = (key, seq, pos + 1)
        else:
            active[i] = active[-1]
            active.pop()


def with_timestamps(recs: Iterable[Record], start_ms: int, events_per_second: float) -> Iterator[Record]:
    """Give each record an event time (its Kafka timestamp): `events_per_second` of event time, from
    `start_ms`. Explicit timestamps make the reference model's expiry exact and runs repeatable."""
    for i, r in enumerate(recs):
        yield Record(r.key, r.value, start_ms + int(i * 1000 / events_per_second))


# --- producing ------------------------------------------------------------------------------------
@dataclass
class Sent:
    count: int
    seconds: float
    timestamps: list[int] | None = None  # the Kafka timestamps stamped at send time (stamp_now)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("nan")


def send(recs: Iterable[Record], topic: str, rate: float | None = None, stamp_now: bool = False,
         progress_every: int = 100_000, total: int | None = None, settings=None) -> Sent:
    """Produce records (keyed by order id) at `rate` events/s, or as fast as possible.

    A record's own `ts` becomes its Kafka timestamp; with `stamp_now` every record is stamped with the
    wall clock as it is handed to the producer, and the stamps are returned (for the reference model
    and for latency). Progress (count of `total`, rate, ETA: :mod:`aldebaran.runtime.progress`, a bar on a
    terminal, a log line every 10 s otherwise) is shown unless `progress_every` is 0 (the paced latency
    runs, which report their own figures); it once counted messages between log lines, and its callers
    still pass such counts. `total` defaults to ``len(recs)`` when `recs` has one.
    """
    from aldebaran.exceptions import AldebaranError
    from aldebaran.kafka.io import producer
    from aldebaran.runtime.progress import Progress
    from aldebaran.settings import KafkaSettings, load

    p = producer(settings or load(KafkaSettings))
    errors: list = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    if total is None and hasattr(recs, "__len__"):
        total = len(recs)  # type: ignore[arg-type]
    stamps: list[int] | None = [] if stamp_now else None
    chunk = max(1, int(rate / 1000)) if rate else 10_000
    t0 = time.monotonic()
    n = 0
    bar = Progress(f"loadgen → {topic}", total, unit="events", logger=log) if progress_every else None
    with bar or contextlib.nullcontext():
        for r in recs:
            ts = int(time.time() * 1000) if stamp_now else (r.ts or 0)
            while True:
                try:
                    p.produce(topic, value=r.value, key=r.key, timestamp=ts, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            if stamps is not None:
                stamps.append(ts)
            n += 1
            if n % chunk == 0:
                p.poll(0)
                if bar:
                    bar.update(n)
                if rate:
                    ahead = n / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        if bar:
            bar.update(n)
        remaining = p.flush(120)
    elapsed = time.monotonic() - t0
    if remaining or errors:
        raise AldebaranError(f"loadgen: {remaining} undelivered, {len(errors)} failed deliveries to {topic}: {errors[:3]}")
    log.info("loadgen: produced %s events to %s in %.1fs (%.0f/s)", f"{n:,}", topic, elapsed, n / elapsed if elapsed else 0)
    return Sent(n, elapsed, stamps)


def produce(recs: list[Record] | Iterator[Record], topic: str, rate: float | None = None, progress_every: int = 100_000) -> int:
    """Produce records (keyed by order id) at `rate` events/s, or as fast as possible; returns the count."""
    return send(recs, topic, rate=rate, progress_every=progress_every).count


# --- expected alerts --------------------------------------------------------------------------------
def expected(recs: Iterable[Record], stamps: Iterable[int] | None = None, ttl_ms: int | None = None,
             rules: Iterable[str] = ("overfill",)) -> list[dict]:
    """The reference model's alerts for these records as produced (record ts, or the send stamps)."""
    from aldebaran.audit import reference

    recs = list(recs)
    times = list(stamps) if stamps is not None else [r.ts or 0 for r in recs]
    ttl_ms = ttl_ms or reference.DEFAULT_TTL_MS
    if tuple(rules) == ("overfill",):  # the model per group of orders (same result, linear time)
        return reference.expected_grouped(((r.key, r.value, t) for r, t in zip(recs, times)), ttl_ms)
    return reference.expected_alerts([(r.value, t) for r, t in zip(recs, times)], ttl_ms=ttl_ms, rules=rules)


def write_expected(path: str | Path, alerts: list[dict], **meta) -> Path:
    """The expected alert set as JSON (meta: what produced it), for benchmarks to check against."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "count": len(alerts), "alerts": alerts}, indent=1))
    return path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mix", choices=["original", "custom"], default="original",
                   help="original: the publisher's mix (--orders, --seed); custom: the options below")
    p.add_argument("--orders", type=int, default=1000, help="orders to generate")
    p.add_argument("--seed", type=int, default=1, help="random seed (same seed, same events)")
    p.add_argument("--rate", type=float, default=None, help="events per second (default: as fast as possible)")
    p.add_argument("--seconds", type=float, default=None,
                   help="with --rate: produce for this long (rate × seconds events of the chosen mix; more orders "
                   "than --orders are generated when it gives too few events to fill the time)")
    p.add_argument("--watch", action="store_true",
                   help="while producing to the running platform, a line every 2 s: trades/s in, alerts/s, "
                   "deliveries/s per channel, trade → alert and trade → log p99 (aldebaran_capacity.watch)")
    p.add_argument("--watch-linger", type=float, default=15.0,
                   help="--watch: keep watching this long after the last trade (the deliveries that follow it)")
    p.add_argument("--topic", default=None, help="target topic (default: ALDEBARAN_KAFKA_TRADES_TOPIC)")
    p.add_argument("--challenge-example", action="store_true", help="also send the challenge's order 1 example")
    m = Mix()
    p.add_argument("--purchases-per-order", type=int, default=m.purchases_per_order, help="custom mix: purchases per order")
    p.add_argument("--overfill-fraction", type=float, default=m.overfill_fraction, help="custom mix: share of overfilled orders")
    p.add_argument("--orphan-fraction", type=float, default=m.orphan_fraction, help="custom mix: share of orders without a request")
    p.add_argument("--purchase-first", type=float, default=m.purchase_first,
                   help="custom mix: probability that a purchase comes before its request")
    p.add_argument("--duplicate-fraction", type=float, default=m.duplicate_fraction,
                   help="custom mix: share of messages delivered twice")
    p.add_argument("--malformed-fraction", type=float, default=m.malformed_fraction,
                   help="custom mix: invalid messages per valid one")
    p.add_argument("--open-orders", type=int, default=m.open_orders, help="custom mix: orders in flight at once (interleaved)")
    p.add_argument("--expected", default=None,
                   help="write the reference model's expected alerts here (JSON; default: <run dir>/loadgen/<topic>-expected.json)")
    p.add_argument("--ttl-seconds", type=float, default=600.0, help="book TTL the reference model assumes")


def _watch(topic: str):
    """The live line of --watch, over the running platform's channels (ALDEBARAN_CHANNELS)."""
    from aldebaran.delivery.channels import channel_names, configured_channels
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import KafkaSettings, load
    from aldebaran_capacity.watch import LiveWatch

    kafka = load(KafkaSettings).model_copy(update={"trades_topic": topic})
    channels = channel_names()
    log_path = configured_channels(["log"])[0].path if "log" in channels else None
    w = LiveWatch(kafka, channels, load(DeliverySettings).group, log_path)
    w.start()
    return w


def planned(args: argparse.Namespace) -> tuple[list, dict]:
    """The records `aldebaran loadgen` sends for its arguments, and the mix's description: with --rate and
    --seconds, rate × seconds of them (more orders generated than --orders when it gives too few)."""
    recs = list(records(CHALLENGE_EXAMPLE)) if args.challenge_example else []
    if args.mix == "original":
        recs += list(records(original_mix(args.orders, args.seed)))
        mix_meta: dict = {"mix": "original", "orders": args.orders, "seed": args.seed}
    else:
        mix = Mix(orders=args.orders, purchases_per_order=args.purchases_per_order,
                  overfill_fraction=args.overfill_fraction, orphan_fraction=args.orphan_fraction,
                  purchase_first=args.purchase_first, duplicate_fraction=args.duplicate_fraction,
                  malformed_fraction=args.malformed_fraction, open_orders=args.open_orders, seed=args.seed)
        made = list(mix_records(mix))
        needed = int(args.rate * args.seconds) if args.seconds is not None and args.rate else 0
        if made and len(made) < needed:
            # too few orders to fill the time: the same mix and seed, scaled up to the events it needs
            orders = int(mix.orders * needed * 1.02 / len(made)) + 1  # a little over: the mix is random
            log.info("loadgen: %d orders give %d events, %g s at %g/s need %d: generating %d orders",
                     mix.orders, len(made), args.seconds, args.rate, needed, orders)
            mix = replace(mix, orders=orders)
            made = list(mix_records(mix))
        recs += made
        mix_meta = {"mix": "custom", **asdict(mix)}
    if args.seconds is not None:
        if not args.rate:
            raise SystemExit("loadgen: --seconds needs --rate (events per second)")
        if args.mix == "original" and args.rate * args.seconds > len(recs):
            # the orders to fill the time: the mix averages ~4.5 events per order; generated, then cut
            recs += list(records(original_mix(int(args.rate * args.seconds / 2) + 1, args.seed + 1)))
        recs = recs[: int(args.rate * args.seconds)]
    return recs, mix_meta


def main(args: argparse.Namespace) -> None:
    from aldebaran.runtime import paths
    from aldebaran.settings import KafkaSettings, load

    topic = args.topic or load(KafkaSettings).trades_topic
    recs, mix_meta = planned(args)
    watch = _watch(topic) if args.watch else None
    try:
        sent = send(recs, topic, rate=args.rate, stamp_now=True, total=len(recs))
    finally:
        if watch is not None:
            watch.stop(linger=args.watch_linger)
    alerts = expected(recs, sent.timestamps, ttl_ms=int(args.ttl_seconds * 1000))
    path = args.expected or paths.run_dir() / "loadgen" / f"{topic}-expected.json"
    write_expected(path, alerts, topic=topic, messages=sent.count, ttl_ms=int(args.ttl_seconds * 1000), **mix_meta)
    log.info("loadgen: %d alerts expected by the reference model, written to %s", len(alerts), path)
