"""One batch's walk over one shard's books: its events in Kafka order through the book step (finding or
opening each event's book, expiring on the event clock before each event), then the end-of-batch expiry
(event clock, or the processing-time fallback of an idle stream), then the touched books frozen into the
version's delta, written before any alert leaves. The hot loop of the audit, kept apart from the store
(store.py: which version is loaded, from the cache, the deltas or a snapshot, and when a snapshot is
taken) so that each reads on its own; :class:`BatchStep` is a base of :class:`store.ShardStore`, which
supplies the config, the files and how the shard was loaded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from aldebaran.audit import book as book_step
from aldebaran.audit.findings import Book
from aldebaran.audit.state.files import file_name
from aldebaran.audit.state.rows import dump_lines, freeze, request_known, thaw, times
from aldebaran.audit.state.shard import Shard
from aldebaran.model import Alert, Event


@dataclass
class Outcome:
    alerts: list[Alert]
    open_books: int
    opened: int
    expired: int
    applied: int
    duplicates: int
    state_ms: float
    loaded: str = ""  # cache (this worker had it), replay (caught up on deltas) or cold (snapshot + deltas)
    # Events of orders this shard does not own (co-partitioned plan: the producer broke the keying
    # contract). Not applied here; the caller routes them to their owner.
    misrouted: list[Event] = field(default_factory=list)
    # Beside `alerts`, one per alert: its book's trail when it fired (aldebaran.audit.provenance), or None.
    trails: list = field(default_factory=list)


def _deadline_of(books: dict, ttl: int, grace: int):
    """(event deadline, fallback deadline) of an order id's current book, None if it has none: what the
    two deadline indexes check their entries against. One call each, no decoding of a frozen row."""

    def event(order_id: str) -> int | None:
        book = books.get(order_id)
        if book is None:
            return None
        if book.__class__ is bytes:
            return int(book[1:book.index(b",")]) + ttl  # a frozen row starts `[first_ts,` (state.rows)
        return book.first_ts + ttl

    def fallback(order_id: str) -> int | None:
        book = books.get(order_id)
        return None if book is None else times(book)[1] + ttl + grace

    return event, fallback


class BatchStep:
    def _apply(self, shard: Shard, batch_id: int, rows: Iterable[Event], now_ms: int, t0: float,
               owns: Callable[[str], bool] | None = None, expire_all: bool = False) -> Outcome:
        touched: dict[str, Book | None] = {}  # order id → its live book, None: dropped
        misrouted: list[Event] = []
        alerts: list[Alert] = []
        trails: list = []  # aligned with alerts: the book step appends to both
        rules = self.config.rules
        ttl, grace = self.config.ttl_ms, self.config.grace_ms
        expiry, fallback, books = shard.expiry, shard.fallback, shard.books
        event_deadline, fallback_deadline = _deadline_of(books, ttl, grace)
        apply_event = book_step.step
        opened = applied = duplicates = expired = 0
        for ev in rows:
            order_id, ts = ev.order_id, ev.event_ts
            if owns is not None and order_id not in books and not owns(order_id):
                misrouted.append(ev)
                continue
            # Event-time expiry before the event: the clock counts every valid event (duplicates too).
            if ts > shard.clock_ms:
                shard.clock_ms = ts
                shard.clock_moved_ms = now_ms
            if expiry.next_ms <= shard.clock_ms:
                expired += self._expire(books, expiry.due(shard.clock_ms, event_deadline), touched, alerts, now_ms,
                                        trails)
            book = books.get(order_id)
            if book is None:
                book = books[order_id] = Book(order_id, ts, now_ms)
                # Shard.index, inlined: a bucket still in the dict is one the clock has not reached.
                bucket = expiry.buckets.get((ts + ttl) // expiry.width)
                if bucket is not None:
                    bucket.append(order_id)
                else:
                    expiry.add(ts + ttl, order_id)
                bucket = fallback.buckets.get((now_ms + ttl + grace) // fallback.width)
                if bucket is not None:
                    bucket.append(order_id)
                else:
                    fallback.add(now_ms + ttl + grace, order_id)
                opened += 1
            elif book.__class__ is bytes:
                book = books[order_id] = thaw(book, order_id)
            touched[order_id] = book  # refrozen at the end (a book that only saw duplicates: the same row)
            if apply_event(book, ev, rules, now_ms, alerts, trails):
                applied += 1
            else:
                duplicates += 1
        due = expiry.due(shard.clock_ms, event_deadline)
        # The processing-time fallback only when this shard's event clock has stalled for longer than
        # the grace: an idle stream still expires its books, while an auditor catching up on a
        # backlog after a restart (event clock moving) keeps expiring on event time only. Meanwhile
        # its entries of books already expired on event time are dropped as processing time passes
        # them (prune), so the index holds the open books, not every book opened since the last idle.
        if expire_all:
            due = list(books)
        elif now_ms - shard.clock_moved_ms >= grace:
            due += fallback.due(now_ms, fallback_deadline)
        else:
            fallback.prune(now_ms, fallback_deadline)
        expired += self._expire(books, due, touched, alerts, now_ms, trails)
        shard.version = batch_id
        # Freeze what the batch touched: the new rows are also the books' lines in the delta.
        frozen: list[tuple[str, bytes | None]] = []
        for order_id, book in touched.items():
            if book is None:
                frozen.append((order_id, None))
            else:
                books[order_id] = row = freeze(book)
                frozen.append((order_id, row))
        # Durable first: the delta is written before any alert leaves (a snapshot is not: see apply).
        delta = dump_lines(frozen, clock_ms=shard.clock_ms, clock_moved_ms=shard.clock_moved_ms)
        self.files.put(file_name("delta", batch_id), delta)
        shard.delta_bytes += len(delta)
        return Outcome(alerts, len(books), opened, expired, applied, duplicates,
                       (time.perf_counter() - t0) * 1000, self.loaded, misrouted, trails)

    def _expire(self, books: dict, due: list[str], touched: dict, alerts: list[Alert], now_ms: int,
                trails: list) -> int:
        """Drop the books `due` (an id may come twice), in order id order, asking the rules first."""
        due = sorted(set(due))
        rules = self.config.rules
        # A frozen book whose request is known, when no rule can alert at expiry for such a book (the
        # shipped rules: ORPHAN needs the request missing), is dropped without decoding it.
        skip_known = all(rule.quiet_at_expiry(True) for rule in rules)
        for order_id in due:
            book = books.pop(order_id)
            touched[order_id] = None
            if book.__class__ is bytes:
                if skip_known and request_known(book):
                    continue
                book = thaw(book, order_id)
            book_step.expire(book, rules, now_ms, alerts, trails)
        return len(due)
