"""The open books by deadline: what expires when, without scanning the books."""

from __future__ import annotations

import heapq


def bucket_width(ttl_ms: int) -> int:
    """Expiry buckets: 1 s, or finer for short TTLs (a bucket is at most 1/16 of the TTL)."""
    return max(1, min(1000, ttl_ms // 16))


class DeadlineIndex:
    """The open books by deadline, at ~8 bytes per book: deadlines fall into buckets `width` ms wide,
    each a plain list of order ids (the strings the books dict already holds); only when the clock
    reaches a bucket are its books ordered, as a heap of (deadline, order id). A heap of tuples over
    every book (what this replaces) cost ~100 bytes per book per index: 2 GiB per copy at 10M books.

    Entries may be stale (the book expired and re-opened since, with another deadline): `due` checks
    every entry against the book's current deadline, and a book always has an entry for that one."""

    __slots__ = ("width", "buckets", "keys", "hot", "hot_upto", "next_ms")

    def __init__(self, width_ms: int = 1000) -> None:
        self.width = max(1, width_ms)
        self.buckets: dict[int, list[str]] = {}
        self.keys: list[int] = []  # heap of the bucket numbers in `buckets`
        self.hot: list[tuple[int, str]] = []  # heap of the entries of buckets the clock reached
        self.hot_upto: float = float("-inf")  # every bucket number up to this one is in `hot`
        self.next_ms: float = float("inf")  # nothing can be due before this time

    def add(self, deadline: int, order_id: str) -> None:
        b = deadline // self.width
        if b <= self.hot_upto:
            heapq.heappush(self.hot, (deadline, order_id))
            if deadline < self.next_ms:
                self.next_ms = deadline
            return
        bucket = self.buckets.get(b)
        if bucket is None:
            self.buckets[b] = [order_id]
            heapq.heappush(self.keys, b)
            if b * self.width < self.next_ms:
                self.next_ms = b * self.width
        else:
            bucket.append(order_id)

    def due(self, clock: int, deadline_of) -> list[str]:
        """Pop the order ids whose current deadline (`deadline_of(order id)`, None: no such book) is at or
        before `clock`. An id may come more than once; stale entries are dropped on the way."""
        keys, hot, width = self.keys, self.hot, self.width
        promoted = False
        while keys and keys[0] * width <= clock:
            b = heapq.heappop(keys)
            for order_id in self.buckets.pop(b):
                d = deadline_of(order_id)
                if d is not None and d // width == b:  # else stale: the book's entry is in another bucket
                    hot.append((d, order_id))
            self.hot_upto = b
            promoted = True
        if promoted:
            heapq.heapify(hot)
        out = []
        while hot and hot[0][0] <= clock:
            d, order_id = heapq.heappop(hot)
            if deadline_of(order_id) == d:
                out.append(order_id)
        self.next_ms = min(hot[0][0] if hot else float("inf"), keys[0] * width if keys else float("inf"))
        return out
