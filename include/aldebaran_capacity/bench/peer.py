"""What a user could write instead: the hand-rolled loop that anchors every deployed figure.

A plain confluent-kafka consumer on ``trades``, a dict per order, a plain producer of alerts: the ~80
lines a team writes before it picks a platform. No checkpoint, no dead-letter topic, no exactly-once, no
expiry — none of what Aldebaran is for; it only answers the same question (purchased > requested, once
per order) as fast as this box allows. The deployed bench runs it on the same box, at the same rates, in
the same run, and reports our p99 ÷ its p99 (``peer_p99_ms``), read the same way: a consumer of its
alerts topic, minus the trade's Kafka timestamp.

Run as its own process (``python -m aldebaran_capacity.bench.peer BOOTSTRAP TRADES ALERTS GROUP``), so
that its CPU is a process of its own in the box's state; SIGTERM stops it.
"""

from __future__ import annotations

import json
import signal
import sys


def loop(bootstrap: str, trades: str, alerts: str, group: str) -> None:
    from confluent_kafka import Consumer, Producer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
                         "enable.partition.eof": False})
    producer = Producer({"bootstrap.servers": bootstrap})
    # "assigned" tells the bench when the group's partitions are this consumer's: trades produced before
    # that are not read (auto.offset.reset latest), so the bench starts its load only after this line.
    consumer.subscribe([trades], on_assign=lambda _c, parts: print(f"assigned {len(parts)}", flush=True))
    books: dict[str, list] = {}  # order id → [requested or None, purchased, alerted]
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    print("ready", flush=True)
    while running[0]:
        msg = consumer.poll(0.1)  # returns as soon as a message is there
        if msg is None or msg.error() is not None:
            producer.poll(0)
            continue
        try:
            trade = json.loads(msg.value())
            order = str(trade.get("initial_order_id", trade["id"]))
            shares = int(trade["#shares"])
        except (ValueError, KeyError, TypeError):
            continue
        book = books.setdefault(order, [None, 0, False])
        if "initial_order_id" in trade:
            book[1] += shares
        elif book[0] is None:
            book[0] = shares
        if not book[2] and book[0] is not None and book[1] > book[0]:
            book[2] = True
            alert = {"alert_id": f"peer-{order}", "kind": "OVERFILL", "order_id": order,
                     "requested": book[0], "purchased": book[1], "trigger_event_ts": msg.timestamp()[1]}
            producer.produce(alerts, key=order, value=json.dumps(alert))
            producer.poll(0)
    producer.flush(10)
    consumer.close()


if __name__ == "__main__":
    loop(*sys.argv[1:5])
