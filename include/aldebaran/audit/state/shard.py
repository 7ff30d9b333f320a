"""One shard's books in memory: the state a :class:`aldebaran.audit.state.store.ShardStore` works on
and a snapshot child writes out (aldebaran.audit.state.snapshots). Its own module so that both import
it and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aldebaran.audit.findings import Book
from aldebaran.audit.state.deadlines import DeadlineIndex, bucket_width
from aldebaran.audit.state.rows import thaw, times


@dataclass
class Shard:
    version: int = -1
    # order id → its book: frozen (bytes, see state.rows) between batches, a live Book while a batch works on it
    books: dict[str, Book | bytes] = field(default_factory=dict)
    clock_ms: int = 0  # the shard's event-time clock: the largest event time applied
    clock_moved_ms: int = 0  # processing time at which that clock last moved forward
    expiry: DeadlineIndex = field(default_factory=DeadlineIndex)  # by event-time deadline (first_ts + ttl)
    snapshot_bytes: int = 0  # size of the snapshot this state was built on (0: none)
    delta_bytes: int = 0  # bytes of deltas written (or replayed) since that snapshot
    fallback: DeadlineIndex = field(default_factory=DeadlineIndex)  # by processing deadline (first seen + ttl + grace)

    def index(self, order_id: str, first_ts: int, first_seen_ms: int, ttl_ms: int, grace_ms: int) -> None:
        self.expiry.add(first_ts + ttl_ms, order_id)
        self.fallback.add(first_seen_ms + ttl_ms + grace_ms, order_id)

    def reindex(self, ttl_ms: int, grace_ms: int) -> None:
        width = bucket_width(ttl_ms)
        self.expiry, self.fallback = DeadlineIndex(width), DeadlineIndex(width)
        for order_id, book in self.books.items():
            self.index(order_id, *times(book), ttl_ms, grace_ms)

    def book(self, order_id: str) -> Book | None:
        """The book of an order, decoded (a copy if it is frozen): for inspection and tests."""
        book = self.books.get(order_id)
        return thaw(book, order_id) if book.__class__ is bytes else book
