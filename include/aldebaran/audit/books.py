"""Per-order books, partitioned into shards by key, versioned by micro-batch id.

Each micro-batch, every shard task (one Python call per shard, see aldebaran.audit.engine):
  1. gets the shard's books at version batch_id-1: from this Python worker's cache, caught up by
     replaying the durable deltas it missed (cost O(books changed since), not O(books open)); or,
     cold, from the latest snapshot plus deltas;
  2. applies the batch's events to the books they touch, in Kafka order, asking the rules. Event-time
     expiry is checked before every event: the shard's clock (the largest event time seen) first
     takes the event's time into account, and every book with first_ts + ttl <= clock expires before
     the event is applied. So an event at or past its book's deadline opens a new book, and the
     alerts do not depend on where the stream was cut into micro-batches (a replay that batches
     differently gives the same alerts; aldebaran.reference is the model);
  3. at the end of the batch, expires books whose time is up on the event clock or on the
     processing-time fallback for idle streams (first seen + ttl + grace, applied only while the
     shard's event clock has not moved for `grace`, so catching up after a restart is unaffected);
  4. writes the delta of version batch_id (changed books + dropped ones) durably, and — at most every
     `snapshot_every` batches, and only once the deltas written since the last snapshot add up to at
     least `snapshot_delta_ratio` × its size — a full snapshot; only then returns the alerts.

The snapshot rule keeps the state's cost per batch proportional to the books touched, amortised: a
snapshot is O(open books), but it is only written after deltas of at least that size (the touched
books) were written since the last one; and a cold load reads a snapshot plus at most about as much
delta. Taking snapshots on a fixed schedule instead made a batch with 700k open books spend 15.6 s on
its snapshot every 20 batches (capacity bench, 2026-11-23); at 10M open books that would dominate.

If the batch fails part-way (its input iterator or a write raises), this worker's cached copy of the
shard is dropped: the retry reloads version batch_id-1 rather than half-applied books.

A re-executed batch (task retry, or a restart after a crash before Spark committed the batch) loads
version batch_id-1 again and rewrites the same delta: state and alerts converge. Deltas live under
the query's checkpoint directory (local path or s3://), so the books survive a restart with it and a
task may run on any executor of a cluster.
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import heapq
import itertools
import json
import logging
import operator
import os
import re
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from sys import intern
from typing import Iterable, Protocol

from aldebaran import events
from aldebaran.audit.rules import Alert, Book, EventRow, Rule, render

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(delta|snapshot)-(\d{12})\.json\.gz$")


# --- durable files ----------------------------------------------------------------------------
class Files(Protocol):
    def put(self, name: str, data: bytes) -> None: ...
    def get(self, name: str) -> bytes: ...
    def names(self) -> list[str]: ...
    def delete(self, name: str) -> None: ...


class LocalFiles:
    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def put(self, name: str, data: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.root / name)  # atomic: a reader sees the old or the new file, whole

    def get(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def names(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("*.json.gz")) if self.root.exists() else []

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


class S3Files:
    def __init__(self, uri: str) -> None:
        from aldebaran.objectstore import ObjectStore
        from aldebaran.settings import ObjectStoreSettings, load

        bucket, _, prefix = uri.split("://", 1)[1].partition("/")
        self.store = ObjectStore(load(ObjectStoreSettings, bucket=bucket))
        self.prefix = prefix.rstrip("/") + "/"

    def put(self, name: str, data: bytes) -> None:
        self.store.put(self.prefix + name, data, content_type="application/gzip")

    def get(self, name: str) -> bytes:
        from aldebaran.exceptions import NotFound

        try:
            return self.store.get(self.prefix + name).body
        except NotFound as exc:
            # The same error as LocalFiles: ShardStore.load falls back to a cold load on it.
            raise FileNotFoundError(f"{exc}") from exc

    def names(self) -> list[str]:
        return sorted(o["Key"][len(self.prefix):] for o in self.store.list(self.prefix))

    def delete(self, name: str) -> None:
        self.store.delete(self.prefix + name)


def files_for(root: str) -> Files:
    if root.startswith(("s3://", "s3a://")):
        return S3Files(root)
    return LocalFiles(root.removeprefix("file://"))


# --- serialisation -----------------------------------------------------------------------------
def decode_book(data: dict | list, order_id: str | None = None) -> Book:
    """A book from a delta or snapshot: positional (what _book_row writes) or, from files written
    before 2026-11-23 evening, keyed by field name. `order_id`, the key it was stored under, becomes
    the book's own (one string object, not two), and the names are shared (see _compact)."""
    if isinstance(data, list):
        if order_id is not None:
            data[0] = order_id
        book = Book(*data)
    else:
        book = Book(**data)
    return _compact(book)


def _compact(book: Book) -> Book:
    """Share the strings a decoded book repeats: client and stock names (interned: a handful of names
    across millions of books) and the request's and first purchase's event ids (the same strings as
    in `seen`). A decoded book then takes about the memory of one built by the batch loop."""
    seen = book.seen
    for part in (book.request, book.first_purchase):
        if part is not None:
            client, stock, event_id = part.get("client"), part.get("stock"), part.get("event_id")
            if client is not None:
                part["client"] = intern(client)
            if stock is not None:
                part["stock"] = intern(stock)
            for e in seen:
                if e == event_id:
                    part["event_id"] = e
                    break
    return book


# The persisted form of a book: its fields in declaration order, as one JSON array. Encoded right away
# (json.dumps), so it may share the live book's containers; ~2x faster than keyed dicts, and smaller.
_book_row = operator.attrgetter(*(f.name for f in dataclasses.fields(Book)))


def _dump(records: dict) -> bytes:
    return gzip.compress(json.dumps(records, separators=(",", ":")).encode(), compresslevel=1)


def _dump_books(books: dict[str, Book], chunk: int = 50_000, **fields) -> bytes:
    """`_dump({"books": {order: row}, **fields})` for a whole shard, encoded and compressed `chunk` books
    at a time: the peak memory is one chunk's JSON plus the compressed output, not the shard's whole
    JSON text (at millions of open books that was gigabytes per snapshot, on top of the books)."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip container, read by gzip.decompress
    out = [z.compress(b'{"books":{')]
    items = iter(books.items())
    first = True
    while True:
        part = {o: _book_row(b) for o, b in itertools.islice(items, chunk)}
        if not part:
            break
        text = json.dumps(part, separators=(",", ":"))[1:-1]
        out.append(z.compress((text if first else "," + text).encode()))
        first = False
    tail = json.dumps(fields, separators=(",", ":"))[1:-1]
    out.append(z.compress(("}" + ("," + tail if tail else "") + "}").encode()))
    out.append(z.flush())
    return b"".join(out)


def _load(data: bytes) -> dict:
    return json.loads(gzip.decompress(data))


# --- one shard -----------------------------------------------------------------------------------
@dataclass
class Shard:
    version: int = -1
    books: dict[str, Book] = field(default_factory=dict)
    clock_ms: int = 0  # the shard's event-time clock: the largest event time applied
    clock_moved_ms: int = 0  # processing time at which that clock last moved forward
    expiry: list[tuple[int, str]] = field(default_factory=list)  # heap of (event-time deadline, order)
    snapshot_bytes: int = 0  # size of the snapshot this state was built on (0: none)
    delta_bytes: int = 0  # bytes of deltas written (or replayed) since that snapshot
    fallback: list[tuple[int, str]] = field(default_factory=list)  # heap of (processing deadline, order)

    def index(self, book: Book, ttl_ms: int, grace_ms: int) -> None:
        heapq.heappush(self.expiry, (book.first_ts + ttl_ms, book.order_id))
        heapq.heappush(self.fallback, (book.first_seen_ms + ttl_ms + grace_ms, book.order_id))

    def reindex(self, ttl_ms: int, grace_ms: int) -> None:
        self.expiry, self.fallback = [], []
        for book in self.books.values():
            self.expiry.append((book.first_ts + ttl_ms, book.order_id))
            self.fallback.append((book.first_seen_ms + ttl_ms + grace_ms, book.order_id))
        heapq.heapify(self.expiry)
        heapq.heapify(self.fallback)


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
    alerts: list[dict]
    open_books: int
    opened: int
    expired: int
    applied: int
    duplicates: int
    state_ms: float
    loaded: str = ""  # cache (this worker had it), replay (caught up on deltas) or cold (snapshot + deltas)


_CACHE: dict[tuple[str, int], Shard] = {}


class ShardStore:
    """Load, update and persist one shard's books at a given version."""

    def __init__(self, config: Config, shard_id: int) -> None:
        self.config = config
        self.shard_id = shard_id
        self.files = files_for(f"{config.state_root.rstrip('/')}/shard-{shard_id:04d}")
        self.loaded = ""  # how the last load found the shard: cache | replay | cold

    def _versions(self) -> tuple[list[int], list[int]]:
        deltas, snaps = [], []
        for name in self.files.names():
            m = _NAME.match(name)
            if m:
                (deltas if m.group(1) == "delta" else snaps).append(int(m.group(2)))
        return sorted(deltas), sorted(snaps)

    def load(self, version: int) -> Shard:
        """The shard's state after batch `version` (-1: empty)."""
        key = (self.config.state_root, self.shard_id)
        cached = _CACHE.get(key)
        if cached is not None and cached.version == version:
            self.loaded = "cache"
            return cached
        if cached is not None and cached.version < version:
            try:
                self._replay(cached, range(cached.version + 1, version + 1))
                self.loaded = "replay"  # another Python worker ran this shard's last batch(es)
                return cached
            except FileNotFoundError:
                log.info("shard %d: cache at %d cannot catch up to %d, reloading", self.shard_id, cached.version, version)
        shard = self._load_cold(version)
        _CACHE[key] = shard
        self.loaded = "cold"
        return shard

    def _load_cold(self, version: int) -> Shard:
        shard = Shard()
        if version < 0:
            return shard
        deltas, snaps = self._versions()
        base = max((s for s in snaps if s <= version), default=None)
        if base is not None:
            raw = self.files.get(f"snapshot-{base:012d}.json.gz")
            shard.snapshot_bytes = len(raw)
            data = _load(raw)
            shard.books = {o: decode_book(b, o) for o, b in data["books"].items()}
            shard.clock_ms = data["clock_ms"]
            shard.clock_moved_ms = data.get("clock_moved_ms", 0)
            shard.version = base
        needed = range(shard.version + 1, version + 1)
        present = set(deltas)
        missing = [v for v in needed if v not in present]
        if missing:
            raise FileNotFoundError(
                f"books shard {self.shard_id}: versions {missing[:5]}... missing under {self.config.state_root} "
                f"(state and checkpoint out of step?)"
            )
        self._replay(shard, needed)
        shard.reindex(self.config.ttl_ms, self.config.grace_ms)
        return shard

    def _replay(self, shard: Shard, versions: Iterable[int]) -> None:
        for v in versions:
            raw = self.files.get(f"delta-{v:012d}.json.gz")
            shard.delta_bytes += len(raw)
            data = _load(raw)
            for order_id, raw in data["books"].items():
                if raw is None:
                    shard.books.pop(order_id, None)
                else:
                    old = shard.books.get(order_id)
                    book = decode_book(raw, order_id)
                    shard.books[order_id] = book
                    # A new book, or one that expired and re-opened within that batch: index it.
                    if old is None or (old.first_ts, old.first_seen_ms) != (book.first_ts, book.first_seen_ms):
                        shard.index(book, self.config.ttl_ms, self.config.grace_ms)
            shard.clock_ms = max(shard.clock_ms, data["clock_ms"])
            shard.clock_moved_ms = max(shard.clock_moved_ms, data.get("clock_moved_ms", 0))
            shard.version = v

    def apply(self, batch_id: int, rows: Iterable[EventRow], now_ms: int | None = None) -> Outcome:
        """Apply one batch's events (already in Kafka order) and persist version `batch_id`."""
        t0 = time.perf_counter()
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        # The cyclic garbage collector off while the batch allocates: books hold no reference cycles
        # (refcounting frees them), and each generation-2 collection would walk every open book — a
        # cost O(books open) per batch. After the batch, the survivors (the books) are frozen out of
        # the collector's generations, so later collections skip them. Shard step +20-40% on 200k
        # events / 40k books (/tmp profile, 2026-11-23).
        gc_enabled = gc.isenabled()
        gc.disable()
        try:
            shard = self.load(batch_id - 1)
            if shard.version != batch_id - 1:
                raise RuntimeError(f"shard {self.shard_id}: loaded version {shard.version}, wanted {batch_id - 1}")
            try:
                outcome = self._apply(shard, batch_id, rows, now_ms, t0)
            except BaseException:
                # The cached shard may hold part of this batch: the retry must start from batch_id-1.
                _CACHE.pop((self.config.state_root, self.shard_id), None)
                raise
            gc.freeze()
            return outcome
        finally:
            if gc_enabled:
                gc.enable()

    def _apply(self, shard: Shard, batch_id: int, rows: Iterable[EventRow], now_ms: int, t0: float) -> Outcome:
        changed: dict[str, Book | None] = {}
        alerts: list[dict] = []
        applied = duplicates = opened = expired = 0
        rules = self.config.rules
        ttl = self.config.ttl_ms
        expiry = shard.expiry

        books = shard.books
        fallback = shard.fallback
        heappush = heapq.heappush
        grace_ms = self.config.grace_ms
        request_kind = events.REQUEST
        for ev in rows:
            order_id, event_id, ts = ev.order_id, ev.event_id, ev.event_ts
            # Event-time expiry before the event: the clock counts every valid event (duplicates too).
            if ts > shard.clock_ms:
                shard.clock_ms = ts
                shard.clock_moved_ms = now_ms
            if expiry and expiry[0][0] <= shard.clock_ms:
                expired += self._expire(shard, [(expiry, shard.clock_ms, lambda b: b.first_ts + ttl)],
                                        changed, alerts, now_ms)
            book = books.get(order_id)
            if book is None:
                book = books[order_id] = Book(order_id, ts, now_ms)
                heappush(expiry, (ts + ttl, order_id))  # Shard.index, inlined
                heappush(fallback, (now_ms + ttl + grace_ms, order_id))
                opened += 1
            seen = book.seen
            if event_id in seen:
                duplicates += 1
                continue
            seen.append(event_id)
            applied += 1
            if ev.kind == request_kind:
                client, stock = ev.client, ev.stock  # interned: millions of books, a handful of names
                book.request = {"event_id": event_id, "shares": ev.shares, "client": client and intern(client),
                                "stock": stock and intern(stock), "ts": ts}
            else:
                book.purchased += ev.shares
                book.purchase_count += 1
                if book.first_purchase is None:
                    client, stock = ev.client, ev.stock
                    book.first_purchase = {"event_id": event_id, "ts": ts, "client": client and intern(client),
                                           "stock": stock and intern(stock)}
            for rule in rules:
                alert = rule.on_event(book, ev)
                if alert is not None:
                    self._fire(book, rule, alert, alerts, now_ms)
            changed[order_id] = book

        grace = self.config.grace_ms
        deadlines = [(shard.expiry, shard.clock_ms, lambda b: b.first_ts + ttl)]
        # The processing-time fallback only when this shard's event clock has stalled for longer than
        # the grace: an idle stream still expires its books, while an auditor catching up on a
        # backlog after a restart (event clock moving) keeps expiring on event time only.
        if now_ms - shard.clock_moved_ms >= grace:
            deadlines.append((shard.fallback, now_ms, lambda b: b.first_seen_ms + ttl + grace))
        expired += self._expire(shard, deadlines, changed, alerts, now_ms)
        shard.version = batch_id
        # Durable first: the delta (and maybe a snapshot) is written before any alert leaves.
        delta = _dump({"books": {o: (_book_row(b) if b is not None else None) for o, b in changed.items()},
                       "clock_ms": shard.clock_ms, "clock_moved_ms": shard.clock_moved_ms})
        self.files.put(f"delta-{batch_id:012d}.json.gz", delta)
        shard.delta_bytes += len(delta)
        if (self.config.snapshot_every and batch_id % self.config.snapshot_every == 0 and batch_id > 0
                and shard.delta_bytes >= self.config.snapshot_delta_ratio * shard.snapshot_bytes):
            self._snapshot(shard)
        return Outcome(alerts, len(shard.books), opened, expired, applied, duplicates,
                       (time.perf_counter() - t0) * 1000, self.loaded)

    @staticmethod
    def _fire(book: Book, rule: Rule, alert: Alert | None, out: list[dict], now_ms: int) -> None:
        if alert is None or alert.kind in book.fired:
            return
        book.fired.append(alert.kind)
        out.append(render(book, alert, rule.name, now_ms))

    def _expire(self, shard: Shard, deadlines, changed: dict, alerts: list[dict], now_ms: int) -> int:
        """Drop the books due on any of `deadlines` [(heap, clock, deadline_of)], asking the rules first."""
        due: set[str] = set()
        for heap, clock, deadline_of in deadlines:
            while heap and heap[0][0] <= clock:
                _, order_id = heapq.heappop(heap)
                book = shard.books.get(order_id)
                # A heap entry may be stale (its book expired and the order re-opened since).
                if book is not None and deadline_of(book) <= clock:
                    due.add(order_id)
        for order_id in sorted(due):
            book = shard.books.pop(order_id)
            for rule in self.config.rules:
                self._fire(book, rule, rule.on_expire(book), alerts, now_ms)
            changed[order_id] = None
        return len(due)

    def _snapshot(self, shard: Shard) -> None:
        data = _dump_books(shard.books, clock_ms=shard.clock_ms, clock_moved_ms=shard.clock_moved_ms)
        self.files.put(f"snapshot-{shard.version:012d}.json.gz", data)
        shard.snapshot_bytes, shard.delta_bytes = len(data), 0
        deltas, snaps = self._versions()
        keep = snaps[-self.config.keep_snapshots:]
        if len(keep) == self.config.keep_snapshots:
            oldest = keep[0]
            for s in snaps[: -self.config.keep_snapshots]:
                self.files.delete(f"snapshot-{s:012d}.json.gz")
            for d in deltas:
                if d <= oldest:
                    self.files.delete(f"delta-{d:012d}.json.gz")
