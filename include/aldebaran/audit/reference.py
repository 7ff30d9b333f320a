"""The audit semantics (docs/design.md § Contracts) as a deliberately simple, independent reference model.

Written from the brief, not from the auditor's code (aldebaran.audit.book / rules / state): one
loop over the messages in order, one plain dict of books, no heaps, no files, no batches. Tests and
the demo hold the auditor to it: the same input must give the same alerts. It shares only the
contract-level parts with the auditor: :func:`aldebaran.audit.parse.validate` (which messages are
valid, as :class:`aldebaran.model.Event`) and :func:`aldebaran.audit.findings.alert_id` (the id of an alert
is a function of its kind and order id).

Semantics, precisely:

- Invalid messages (``events.validate``) never reach a book. ``#shares`` 0 is valid: such a request or
  purchase is applied like any other (it opens a book, may be a duplicate, is counted in
  ``purchase_count``) and adds 0 to the sum; a request of 0 is overfilled only by a positive sum.
- Event time = the message's ``ts`` if present, else its Kafka timestamp (the second element of a
  ``(value, kafka_ts)`` pair; a bare ``bytes`` value without ``ts`` counts as time 0).
- One book per order id (request ``id`` = purchase ``initial_order_id``, compared as strings).
- **Expiry is per event on an event-time clock**, so the result does not depend on how the stream is
  cut into micro-batches: the clock is the largest event time of any valid event seen so far
  (duplicates included). Before a message is applied, the clock takes its event time into account
  and every book with ``first_ts + ttl <= clock`` expires (in order-id order) — so an event at or past
  its own book's deadline opens a new book. At the end of the input, books due at the final clock
  expire too; books not yet due stay open and say nothing. (The auditor expires the same books at
  the end of each micro-batch as well; nothing is applied between that and the next event's check,
  so it is the same result.) The processing-time fallback for idle streams is not modelled: it is
  the one place where wall-clock time may legitimately change the outcome.
- At expiry a book that saw purchases but never a request gives one ORPHAN (trigger: its first
  purchase); then its state is gone. A later event for that order opens a new book, which may alert
  again — with the same alert id, since ids are f(kind, order id).
- Within a book an event id seen before is ignored (counts once), whatever it carries. A request's
  id is its order id, so a second request for an order is such a duplicate: the first wins.
- OVERFILL (rule ``overfill``): once per book, after the first event that leaves the book with a
  known request and purchased > requested (equal is not over). If purchases came first, that event
  is the request.
- MISMATCH (rule ``mismatch``): once per book, after the first event that leaves the book with a
  known request and at least one purchase whose client or stock — where the purchase carries one —
  differs from the request's. Purchases that came before the request count (the trigger is then the
  request).
- An alert's ``requested``/``purchased``/``purchase_count`` are the book's at the moment it fires.

The original publisher's mix (one request of 50–100 shares, four purchases of
``int(limit / 2 * random())`` each, 0 for ~2 % of them: valid, audited, counting 0) is
:func:`aldebaran_capacity.loadgen.original_mix`.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from typing import Iterable, Union

from aldebaran.audit import parse as events
from aldebaran.audit.findings import alert_id
from aldebaran.model import Alert, Event

log = logging.getLogger(__name__)

DEFAULT_TTL_MS = 10 * 60 * 1000

Message = Union[bytes, tuple[bytes, int]]  # a Kafka message value, optionally with its Kafka timestamp (ms)

#: The fields a test compares an auditor alert with the reference's on.
KEY_FIELDS = ("alert_id", "kind", "order_id", "requested", "purchased", "purchase_count", "trigger_event_id")


@dataclass
class _Book:
    order_id: str
    first_ts: int
    seen: set[str] = field(default_factory=set)
    request: Event | None = None
    purchases: list[Event] = field(default_factory=list)
    fired: set[str] = field(default_factory=set)

    @property
    def purchased(self) -> int:
        return sum(p.shares for p in self.purchases)


def valid_events(messages: Iterable[Message]) -> list[Event]:
    """The valid events of the input, in order, their event time resolved (``ts``, else the Kafka
    timestamp): what the auditor's parse hands its books, for tests that drive the books directly."""
    out = []
    for message in messages:
        value, kafka_ts = (message, 0) if isinstance(message, (bytes, bytearray)) else message
        ev = events.validate(bytes(value), kafka_ts=kafka_ts)
        if not isinstance(ev, events.Invalid):
            out.append(ev)
    return out


def expected_alerts(
    messages: Iterable[Message],
    *,
    ttl_ms: int = DEFAULT_TTL_MS,
    rules: Iterable[str] = ("overfill",),
    expire_at_end: bool = False,
) -> list[dict]:
    """The alerts the auditor must emit for these messages, in the order the model emits them.
    `expire_at_end`: a bounded run's end pass follows, in which every book still open expires (in
    order-id order), as ``ALDEBARAN_AUDIT_EXPIRE_AT_END`` does.

    An alert id may appear more than once (an order whose book expired and re-opened); compare as a
    multiset, e.g. ``sorted(key(a) for a in alerts)``.
    """
    rules = set(rules)
    unknown = rules - {"overfill", "mismatch"}
    if unknown:
        raise ValueError(f"the reference model knows the rules overfill and mismatch, not {sorted(unknown)}")
    books: dict[str, _Book] = {}
    alerts: list[dict] = []
    clock: int | None = None

    def emit(book: _Book, kind: str, trigger_id: str | None, trigger_ts: int | None) -> None:
        book.fired.add(kind)
        request = book.request
        first = book.purchases[0] if book.purchases else None
        alerts.append({
            "alert_id": alert_id(kind, book.order_id),
            "kind": kind,
            "order_id": book.order_id,
            "client": request.client if request else (first.client if first else None),
            "stock": request.stock if request else (first.stock if first else None),
            "requested": request.shares if request else None,
            "purchased": book.purchased,
            "purchase_count": len(book.purchases),
            "trigger_event_id": trigger_id,
            "trigger_event_ts": trigger_ts,
        })

    # (deadline, order_id) of every book opened, a min-heap: finding the due books costs O(due · log n)
    # rather than a scan of every open book per event (which made a 1M-event model take hours).
    deadlines: list[tuple[int, str]] = []

    def expire_due() -> None:
        due = []
        while deadlines and deadlines[0][0] <= clock:
            deadline, order_id = heapq.heappop(deadlines)
            book = books.get(order_id)
            if book is not None and book.first_ts + ttl_ms == deadline:
                due.append(order_id)
        for order_id in sorted(set(due)):  # the books due at this event expire in order-id order
            expire(books.pop(order_id))

    def expire(book: _Book) -> None:
        if "overfill" in rules and book.request is None and book.purchases:
            first = book.purchases[0]
            emit(book, "ORPHAN", first.event_id, first.event_ts)

    for ev in valid_events(messages):
        ts = ev.event_ts
        clock = ts if clock is None else max(clock, ts)
        expire_due()
        book = books.get(ev.order_id)
        if book is None:
            book = books[ev.order_id] = _Book(ev.order_id, first_ts=ts)
            heapq.heappush(deadlines, (ts + ttl_ms, ev.order_id))
        if ev.event_id in book.seen:
            continue
        book.seen.add(ev.event_id)
        if ev.kind == events.REQUEST:
            if book.request is None:  # first wins (a second one has the same id, so it never gets here)
                book.request = ev
        else:
            book.purchases.append(ev)
        request = book.request
        if request is None:
            continue
        if "overfill" in rules and "OVERFILL" not in book.fired and book.purchased > request.shares:
            emit(book, "OVERFILL", ev.event_id, ts)
        if "mismatch" in rules and "MISMATCH" not in book.fired and any(
            (p.client is not None and p.client != request.client) or (p.stock is not None and p.stock != request.stock)
            for p in book.purchases
        ):
            emit(book, "MISMATCH", ev.event_id, ts)

    if clock is not None:
        expire_due()
    if expire_at_end:
        for order_id in sorted(books):
            expire(books.pop(order_id))
    return alerts


CLOCK_ORDER = "__bench_clock__"


def expected_grouped(pairs: Iterable[tuple[bytes, bytes, int]], ttl_ms: int, keys_per_group: int = 100) -> list[dict]:
    """The reference model's alerts for (key, value, Kafka ts) messages, computed over groups of orders.

    :func:`expected_alerts` is deliberately simple: it scans every open book at every event, O(events ×
    open books), too slow for a benchmark's hundreds of thousands of open books. Its result is
    the same when computed per group of orders, provided event times never decrease along the stream
    (checked; otherwise the model runs over the whole stream): books interact only through the event
    clock, which then equals each event's own time, and each group gets one extra request (order
    ``__bench_clock__``, never an alert) at the stream's last time, so its final clock is the stream's.
    Messages of one key always belong to one group; alerts are compared as multisets."""
    by_key: dict[bytes, list[tuple[bytes, int]]] = {}
    everything: list[tuple[bytes, int]] = []
    last = None
    monotone = True
    for key, value, ts in pairs:
        if last is not None and ts < last:
            monotone = False
        last = ts if last is None else max(last, ts)
        by_key.setdefault(key, []).append((value, ts))
        everything.append((value, ts))
    if last is None:
        return []
    if not monotone:
        log.warning("event times decrease along the stream: reference model over the whole stream (slow)")
        return expected_alerts(everything, ttl_ms=ttl_ms)
    del everything
    clock = (events.encode(events.request(CLOCK_ORDER, 1)), last)
    out: list[dict] = []
    keys = list(by_key)
    for i in range(0, len(keys), keys_per_group):
        group = [m for k in keys[i:i + keys_per_group] for m in by_key[k]]
        out += expected_alerts(group + [clock], ttl_ms=ttl_ms)
    return out


def key(alert: Alert | dict) -> tuple:
    """The comparison key of an alert: the auditor's (an Alert), the reference's or one read back as JSON."""
    if isinstance(alert, Alert):
        return tuple(getattr(alert, f) for f in KEY_FIELDS)
    return tuple(alert[f] for f in KEY_FIELDS)


__all__ = ["DEFAULT_TTL_MS", "KEY_FIELDS", "Message", "expected_alerts", "expected_grouped", "key", "valid_events"]
