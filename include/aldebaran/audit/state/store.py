"""Per-order books, partitioned into shards by key, versioned by micro-batch id.

Each micro-batch, every shard task (one Python call per shard, see aldebaran.audit.sparkjob.batch):
  1. gets the shard's books at version batch_id-1: from this Python worker's cache, caught up by
     replaying the durable deltas it missed (cost O(books changed since), not O(books open)); or,
     cold, from the latest snapshot plus deltas;
  2. runs the batch's events, in Kafka order, through the book step (aldebaran.audit.book), finding
     or opening each event's book. Event-time expiry is checked before every event: the shard's
     clock (the largest event time seen) first takes the event's time into account, and every book
     with first_ts + ttl <= clock expires before the event is applied. So an event at or past its
     book's deadline opens a new book, and the alerts do not depend on where the stream was cut into
     micro-batches (a replay that batches differently gives the same alerts; aldebaran.audit.reference is
     the model);
  3. at the end of the batch, expires books whose time is up on the event clock or on the
     processing-time fallback for idle streams (first seen + ttl + grace, applied only while the
     shard's event clock has not moved for `grace`, so catching up after a restart is unaffected);
  4. writes the delta of version batch_id (touched books + dropped ones) durably, and only then
     returns the alerts; at most every `snapshot_every` batches, and only once the deltas written
     since the last snapshot add up to at least `snapshot_delta_ratio` × its size, it also starts a
     full snapshot of that version in a child process (aldebaran.audit.state.snapshots), which the
     batch does not wait for.

The snapshot rule keeps the state's cost per batch proportional to the books touched, amortised: a
snapshot is O(open books), but it is only written after deltas of at least that size (the touched
books) were written since the last one; and a cold load reads a snapshot plus at most about as much
delta. Snapshots on a fixed schedule instead made every snapshot batch pay O(open books) whatever it
touched (docs/design.md §2).

Memory: between batches a shard holds every book frozen (aldebaran.audit.state.rows: one compact
JSON row as bytes), decoded only when an event touches it and frozen again at the end of that batch,
and indexes the deadlines in buckets of plain lists (aldebaran.audit.state.deadlines). The same
bytes are the book's line in its delta and in the snapshots. Measurements: docs/design.md §8.

If the batch fails part-way (its input iterator or a write raises), this worker's cached copy of the
shard is dropped: the retry reloads version batch_id-1 rather than half-applied books.

A re-executed batch (task retry, or a restart after a crash before Spark committed the batch) loads
version batch_id-1 again and rewrites the same delta: state and alerts converge. Deltas live under
the query's checkpoint directory (local path or s3://), so the books survive a restart with it and a
task may run on any executor of a cluster.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from aldebaran.audit import book as book_step
from aldebaran.audit.findings import Book
from aldebaran.audit.rules import Rule
from aldebaran.audit.state import snapshots
from aldebaran.audit.state.files import file_name, files_for, versions
from aldebaran.audit.state.rows import dump_lines, freeze, read_lines, request_known, thaw, times
from aldebaran.audit.state.shard import Shard
from aldebaran.model import Alert, Event

log = logging.getLogger(__name__)


@dataclass
class Config:
    state_root: str  # <checkpoint>/books
    rules: list[Rule]
    ttl_ms: int = 10 * 60 * 1000
    grace_ms: int = 60 * 1000  # processing-time fallback: ttl + grace after a book was opened
    snapshot_every: int = 20  # 0: never
    snapshot_delta_ratio: float = 1.0  # snapshot only once deltas since the last one reach ratio × its size
    keep_snapshots: int = 2

    def __post_init__(self) -> None:
        from aldebaran.exceptions import ConfigError

        if self.ttl_ms <= 0 or self.grace_ms < 0 or self.snapshot_every < 0 or self.snapshot_delta_ratio < 0:
            raise ConfigError("books: ttl_ms > 0, grace_ms >= 0, snapshot_every >= 0 and snapshot_delta_ratio >= 0 "
                              f"required, got {self}")
        if self.keep_snapshots < 2:
            # Deltas up to the oldest kept snapshot are deleted; with a single snapshot, the batch that
            # wrote it could not be re-executed (version batch_id - 1 would be gone).
            raise ConfigError(f"books: keep_snapshots must be at least 2, got {self.keep_snapshots}")


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


_CACHE: dict[tuple[str, int], Shard] = {}


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


class ShardStore:
    """Load, update and persist one shard's books at a given version."""

    def __init__(self, config: Config, shard_id: int) -> None:
        self.config = config
        self.shard_id = shard_id
        self.files = files_for(self.root)
        self.loaded = ""  # how the last load found the shard: cache | replay | cold

    @property
    def root(self) -> str:
        return f"{self.config.state_root.rstrip('/')}/shard-{self.shard_id:04d}"

    @property
    def key(self) -> tuple[str, int]:
        return (self.config.state_root, self.shard_id)

    def load(self, version: int) -> Shard:
        """The shard's state after batch `version` (-1: empty)."""
        key = self.key
        cached = _CACHE.get(key)
        if cached is not None and cached.version == version:
            self.loaded = "cache"
            return cached
        if cached is not None and cached.version < version:
            try:
                deltas, _ = versions(self.files)
                self._replay(cached, [(v, deltas[v]) for v in range(cached.version + 1, version + 1)])
                self.loaded = "replay"  # another Python worker ran this shard's last batch(es)
                return cached
            except (FileNotFoundError, KeyError):
                log.info("shard %d: cache at %d cannot catch up to %d, reloading", self.shard_id, cached.version, version)
                _CACHE.pop(key, None)  # possibly half caught up: never used again
        shard = self._load_cold(version)
        _CACHE[key] = shard
        self.loaded = "cold"
        return shard

    def _load_cold(self, version: int) -> Shard:
        shard = Shard()
        if version < 0:
            shard.reindex(self.config.ttl_ms, self.config.grace_ms)
            return shard
        deltas, snaps = versions(self.files)
        base = max((s for s in snaps if s <= version), default=None)
        if base is not None:
            raw = self.files.get(snaps[base])
            shard.snapshot_bytes = len(raw)
            header, rows = read_lines(raw, snaps[base])
            shard.books = dict(rows)
            shard.clock_ms = header["clock_ms"]
            shard.clock_moved_ms = header.get("clock_moved_ms", 0)
            shard.version = base
        needed = range(shard.version + 1, version + 1)
        missing = [v for v in needed if v not in deltas]
        if missing:
            raise FileNotFoundError(
                f"books shard {self.shard_id}: versions {missing[:5]}... missing under {self.config.state_root} "
                f"(state and checkpoint out of step?)"
            )
        shard.reindex(self.config.ttl_ms, self.config.grace_ms)
        self._replay(shard, [(v, deltas[v]) for v in needed])
        return shard

    def _replay(self, shard: Shard, versions: Iterable[tuple[int, str]]) -> None:
        """Apply the deltas (version, file name) in order. The rows stay frozen: O(books in the deltas)."""
        books = shard.books
        ttl, grace = self.config.ttl_ms, self.config.grace_ms
        for v, name in versions:
            raw = self.files.get(name)
            shard.delta_bytes += len(raw)
            header, rows = read_lines(raw, name)
            for order_id, row in rows:
                if row is None:
                    books.pop(order_id, None)
                    continue
                old = books.get(order_id)
                books[order_id] = row
                # A new book, or one that expired and re-opened within that batch: index it.
                t = times(row)
                if old is None or times(old) != t:
                    shard.index(order_id, *t, ttl, grace)
            shard.clock_ms = max(shard.clock_ms, header["clock_ms"])
            shard.clock_moved_ms = max(shard.clock_moved_ms, header.get("clock_moved_ms", 0))
            shard.version = v

    def apply(self, batch_id: int, rows: Iterable[Event], now_ms: int | None = None,
              owns: Callable[[str], bool] | None = None, expire_all: bool = False) -> Outcome:
        """Apply one batch's events (already in Kafka order) and persist version `batch_id`.

        `expire_all`: after the events, every open book expires (the end pass of a bounded run with
        expire-at-end: aldebaran.audit.sparkjob.endpass).

        `owns(order_id)`, if given, is asked before an event would open a new book: an event of an order
        this shard does not own is not applied (it touches neither a book nor the clock) and comes back
        in `Outcome.misrouted`. An order with a book here is owned: only owned events open books. So the
        check costs one call per new book, not one per event."""
        t0 = time.perf_counter()
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        # The cyclic garbage collector off while the batch allocates: books hold no reference cycles
        # (refcounting frees them), and each generation-2 collection would walk every live object — a
        # cost O(books open) per batch. After the batch, the survivors are frozen out of the collector's
        # generations, so later collections skip them (frozen books are bytes: not tracked at all).
        # What the collector cost the shard step: docs/design.md §8.
        gc_enabled = gc.isenabled()
        gc.disable()
        try:
            shard = self.load(batch_id - 1)
            if shard.version != batch_id - 1:
                raise RuntimeError(f"shard {self.shard_id}: loaded version {shard.version}, wanted {batch_id - 1}")
            try:
                outcome = self._apply(shard, batch_id, rows, now_ms, t0, owns, expire_all)
            except BaseException:
                # The cached shard may hold part of this batch: the retry must start from batch_id-1.
                _CACHE.pop(self.key, None)
                raise
            # After _apply returned: the batch's live books and buffers are freed before a snapshot
            # child shares the pages; freed after the fork, each page they sat on was copied
            # (docs/design.md §2).
            self._snapshot_if_due(shard, batch_id)
            gc.freeze()
            return outcome
        finally:
            if gc_enabled:
                gc.enable()

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

    def _snapshot_if_due(self, shard: Shard, batch_id: int) -> None:
        """Take in the last snapshot child's outcome, then start one of this version if it is due:
        at most every `snapshot_every` batches, once the deltas since the last snapshot reach
        `snapshot_delta_ratio` × its size, and never two at once for a shard."""
        self._collect_snapshot(block=False)
        every = self.config.snapshot_every
        # Shards take their turns a batch apart (shard_id in the modulo): two snapshot children at once
        # would each take a core and copy their shard's pages (state.snapshots).
        if not (every and (batch_id + self.shard_id) % every == 0 and batch_id > 0
                and shard.delta_bytes >= self.config.snapshot_delta_ratio * shard.snapshot_bytes
                and snapshots.in_flight(self.key) is None):
            return
        t = time.perf_counter()
        try:
            snapshots.start(self.key, shard, self.root, self.config.keep_snapshots)
        except OSError as exc:  # no fork (out of memory, process limit): the deltas keep the state durable
            log.warning("shard %d: snapshot of version %d not started: %s; retried when next due",
                        self.shard_id, batch_id, exc)
            return
        log.info("shard %d: snapshot of version %d (%d books) started in the background, fork %.1f ms",
                 self.shard_id, batch_id, len(shard.books), (time.perf_counter() - t) * 1000)

    def _collect_snapshot(self, block: bool) -> snapshots.Done | None:
        """Take in the outcome of this shard's snapshot child if it has ended (or, with `block`, once it
        has): on success the shard's state is now built on that snapshot, for the snapshot rule."""
        done = snapshots.poll(self.key, block)
        if done is None:
            return None
        pending_shard = done.shard
        if done.size is None:
            log.warning("shard %d: background snapshot of version %d failed after %.1f s (%s); the previous "
                        "snapshot and the deltas since stay, and it is retried when next due",
                        self.shard_id, done.version, done.seconds, done.detail)
        else:
            log.info("shard %d: background snapshot of version %d written: %d bytes in %.1f s",
                     self.shard_id, done.version, done.size, done.seconds)
            if _CACHE.get(self.key) is pending_shard:  # not reloaded since: its accounting follows
                pending_shard.snapshot_bytes = done.size
                pending_shard.delta_bytes -= done.delta_bytes
        return done

    def finish_snapshot(self) -> snapshots.Done | None:
        """Wait for this shard's snapshot in flight, if any, and take in its outcome (tests, shutdown)."""
        return self._collect_snapshot(block=True)
