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
    every entry against the book's current deadline, and a book always has an entry for that one.

    An index whose due books are not being expired for now (the processing-time fallback while the
    event clock moves) is kept to O(open books) by `prune`, not left to hold every book ever opened."""

    __slots__ = ("width", "buckets", "keys", "hot", "hot_upto", "next_ms", "overdue", "overdue_seen", "overdue_min")

    def __init__(self, width_ms: int = 1000) -> None:
        self.width = max(1, width_ms)
        self.buckets: dict[int, list[str]] = {}
        self.keys: list[int] = []  # heap of the bucket numbers in `buckets`
        self.hot: list[tuple[int, str]] = []  # heap of the entries of buckets the clock reached
        self.hot_upto: float = float("-inf")  # every bucket number up to this one is in `hot`
        self.next_ms: float = float("inf")  # nothing can be due before this time
        self.overdue: list[tuple[int, str]] = []  # (deadline, order id) found due by `prune`, book still open
        self.overdue_seen = 0  # len(overdue) when prune last dropped its stale entries
        self.overdue_min: float = float("inf")  # the earliest deadline in overdue

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
        out = self._pop(clock, deadline_of)
        if self.overdue:  # set aside by prune at an earlier clock (a clock set back keeps the later ones)
            overdue = self.overdue
            self._set_overdue([(d, o) for d, o in overdue if d > clock])
            out += [o for d, o in overdue if d <= clock and deadline_of(o) == d]
        return out

    def prune(self, clock: int, deadline_of) -> None:
        """Like `due`, for an index whose due books are not expired now: the entries due by `clock` whose
        book is gone or has another deadline are dropped, the others set aside as overdue (the next
        `due` returns them). Each entry is looked at once when the clock reaches its bucket; the
        overdue ones again each time they have doubled in number (amortised O(1) an entry). So the
        fallback index holds the open books plus those opened within its lag, not every book opened
        since the stream last idled (which the first idle batch then had to walk)."""
        new = [(deadline_of(o), o) for o in self._pop(clock, deadline_of)]
        if new:
            self.overdue += new
            self.overdue_min = min(self.overdue_min, min(new)[0])
        if len(self.overdue) > 2 * self.overdue_seen + 1024:
            self._set_overdue(list(dict.fromkeys((d, o) for d, o in self.overdue if deadline_of(o) == d)))
        self.next_ms = min(self.next_ms, self.overdue_min)

    def _set_overdue(self, entries: list[tuple[int, str]]) -> None:
        self.overdue, self.overdue_seen = entries, len(entries)
        self.overdue_min = min(entries)[0] if entries else float("inf")
        self.next_ms = min(self.next_ms, self.overdue_min)

    def _pop(self, clock: int, deadline_of) -> list[str]:
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
