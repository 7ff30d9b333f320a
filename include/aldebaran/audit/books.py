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
delta. Snapshots on a fixed schedule instead made every snapshot batch pay O(open books) whatever it
touched (measured in docs/design.md §2); at 10M open books that would dominate.

Memory: between batches a shard holds every book frozen — one compact JSON row as bytes (see
`freeze`), decoded only when an event touches it and frozen again at the end of that batch — and
indexes the deadlines in buckets of plain lists (`DeadlineIndex`). A frozen book takes about a third
of the memory of a live one, so two Python workers can each hold every shard of 10M open books on a
24 GiB machine (Spark hands a shard task to any idle Python worker: each worker ends up with a copy).
The same bytes are the book's line in its delta and in the snapshots: a snapshot is a concatenation,
a cold load a split. The measurements are in docs/design.md §8.

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
import heapq
import itertools
import json
import logging
import os
import re
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from sys import intern
from typing import Callable, Iterable, Protocol

from aldebaran import events
from aldebaran.audit.rules import Alert, Book, EventRow, Rule, render

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(delta|snapshot)-(\d{12})\.jsonl\.gz$")


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
        return sorted(p.name for p in self.root.glob("*.gz")) if self.root.exists() else []

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
_encode_key = json.encoder.encode_basestring_ascii  # C: the order id as a JSON string


def _no_default(o):
    raise TypeError(f"a book holds {type(o).__name__}, which JSON cannot store: {o!r}")


def _row_encoder():
    """Compact JSON, ASCII only (a row never holds a raw tab or newline: the line format relies on it).
    json's C encoder made once, not per call as json.dumps does: 1.55 vs 2.35 µs a row."""
    c_make = getattr(json.encoder, "c_make_encoder", None)
    if c_make is None:  # a Python without the _json accelerator
        return json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
    encode = c_make(None, _no_default, _encode_key, None, ":", ",", False, False, True)
    join = "".join
    return lambda obj: join(encode(obj, 0))


_encode = _row_encoder()


# --- frozen books: how a shard holds the books a batch does not touch ----------------------------
# A book between batches is one compact JSON array as bytes, without its order id (the dict key):
#   [first_ts, first_seen_ms, request, purchased, purchase_count, first_purchase, seen, fired, slots]
#   request        null | [event id, shares, client, stock, ts - first_ts]
#   first_purchase null | [event id, ts - first_ts, client, stock]
# where an event id found in `seen` is stored as its index there. ~150 bytes instead of ~1.1 KiB of
# Python objects (a slotted Book, two dicts, two lists, boxed integers); and the same bytes are the
# book's line in the delta that changed it and in every snapshot after, so writing a snapshot is a
# concatenation and loading one a split: no book is decoded until a batch touches it.
_BOOK_FIELDS = ("order_id", "first_ts", "first_seen_ms", "request", "purchased", "purchase_count",
                "first_purchase", "seen", "fired", "slots")
if tuple(f.name for f in dataclasses.fields(Book)) != _BOOK_FIELDS:  # a field added to Book: extend freeze/thaw
    raise ImportError(f"aldebaran.audit.books: freeze/thaw know Book fields {_BOOK_FIELDS}, not "
                      f"{tuple(f.name for f in dataclasses.fields(Book))}")


def _ref(seen: list[str], event_id: str) -> int | str:
    for i, e in enumerate(seen):
        if e == event_id:
            return i
    return event_id


def freeze(book: Book) -> bytes:
    seen, ft = book.seen, book.first_ts
    r, f = book.request, book.first_purchase
    return _encode((
        ft, book.first_seen_ms,
        None if r is None else (_ref(seen, r["event_id"]), r["shares"], r["client"], r["stock"], r["ts"] - ft),
        book.purchased, book.purchase_count,
        None if f is None else (_ref(seen, f["event_id"]), f["ts"] - ft, f["client"], f["stock"]),
        seen, book.fired, book.slots,
    )).encode()


def thaw(row: bytes, order_id: str) -> Book:
    """The live book of a frozen row. Client and stock names are interned, event ids shared with `seen`."""
    ft, first_seen, r, purchased, count, f, seen, fired, slots = json.loads(row)
    if r is not None:
        e, client, stock = r[0], r[2], r[3]
        r = {"event_id": seen[e] if e.__class__ is int else e, "shares": r[1],
             "client": client and intern(client), "stock": stock and intern(stock), "ts": r[4] + ft}
    if f is not None:
        e, client, stock = f[0], f[2], f[3]
        f = {"event_id": seen[e] if e.__class__ is int else e, "ts": f[1] + ft,
             "client": client and intern(client), "stock": stock and intern(stock)}
    return Book(order_id, ft, first_seen, r, purchased, count, f, seen, fired, slots)


def _times(book: Book | bytes) -> tuple[int, int]:
    """(first_ts, first_seen_ms) of a live or a frozen book, without decoding the frozen one."""
    if book.__class__ is bytes:
        first_ts, first_seen, _ = book.split(b",", 2)
        return int(first_ts[1:]), int(first_seen)
    return book.first_ts, book.first_seen_ms


# --- files: a header line, then one line per book ------------------------------------------------
# `{"format":2,"clock_ms":..,"clock_moved_ms":..}` then `<order id as a JSON string>\t<frozen row or null>`
# (null: the book was dropped; deltas only).
_FORMAT = 2
_CHUNK = 50_000  # books encoded and compressed at a time: bounds the peak memory of a snapshot


def _dump_lines(items: Iterable[tuple[str, bytes | None]], **header) -> bytes:
    z = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip container, read by gzip.decompress
    out = [z.compress(json.dumps({"format": _FORMAT, **header}, separators=(",", ":")).encode() + b"\n")]
    items = iter(items)
    while True:
        part = list(itertools.islice(items, _CHUNK))
        if not part:
            break
        out.append(z.compress(b"".join(
            b"%s\t%s\n" % (_encode_key(o).encode(), b"null" if row is None else row) for o, row in part)))
    out.append(z.flush())
    return b"".join(out)


def _read_lines(data: bytes, name: str) -> tuple[dict, Iterable[tuple[str, bytes | None]]]:
    """(header, (order id, frozen row or None) ...) of a file written by _dump_lines. Decompressed a
    piece at a time."""
    z = zlib.decompressobj(31)
    first, _, rest = z.decompress(data, 1 << 16).partition(b"\n")
    while not _ and z.unconsumed_tail:  # a header longer than the first piece (not written by us)
        more = z.decompress(z.unconsumed_tail, 1 << 16)
        first, _, rest = (first + more).partition(b"\n")
    header = json.loads(first)
    if header.get("format") != _FORMAT:
        raise ValueError(f"books file {name}: format {header.get('format')!r}, this version reads {_FORMAT}")

    def lines():
        tail = rest
        while True:
            chunk = z.decompress(z.unconsumed_tail, 1 << 24) if z.unconsumed_tail else z.flush()
            buf = tail + chunk
            if not chunk:
                break
            body, _, tail = buf.rpartition(b"\n")
            yield from _split(body)
        if buf.strip():
            yield from _split(buf)

    return header, lines()


def _split(body: bytes) -> Iterable[tuple[str, bytes | None]]:
    for line in body.split(b"\n"):
        if not line:
            continue
        key, _, row = line.partition(b"\t")
        order = key[1:-1].decode() if b"\\" not in key else json.loads(key)
        yield order, (None if row == b"null" else row)


# --- expiry index --------------------------------------------------------------------------------
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


# --- one shard -----------------------------------------------------------------------------------
def _bucket_width(ttl_ms: int) -> int:
    """Expiry buckets: 1 s, or finer for short TTLs (a bucket is at most 1/16 of the TTL)."""
    return max(1, min(1000, ttl_ms // 16))


@dataclass
class Shard:
    version: int = -1
    # order id → its book: frozen (bytes, see `freeze`) between batches, a live Book while a batch works on it
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
        width = _bucket_width(ttl_ms)
        self.expiry, self.fallback = DeadlineIndex(width), DeadlineIndex(width)
        for order_id, book in self.books.items():
            self.index(order_id, *_times(book), ttl_ms, grace_ms)

    def book(self, order_id: str) -> Book | None:
        """The book of an order, decoded (a copy if it is frozen): for inspection and tests."""
        book = self.books.get(order_id)
        return thaw(book, order_id) if book.__class__ is bytes else book


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
    # Events of orders this shard does not own (co-partitioned plan: the producer broke the keying
    # contract). Not applied here; the caller routes them to their owner.
    misrouted: list[EventRow] = field(default_factory=list)


_CACHE: dict[tuple[str, int], Shard] = {}


class ShardStore:
    """Load, update and persist one shard's books at a given version."""

    def __init__(self, config: Config, shard_id: int) -> None:
        self.config = config
        self.shard_id = shard_id
        self.files = files_for(f"{config.state_root.rstrip('/')}/shard-{shard_id:04d}")
        self.loaded = ""  # how the last load found the shard: cache | replay | cold

    def _versions(self) -> tuple[dict[int, str], dict[int, str]]:
        """{version: file name} of the deltas and of the snapshots present."""
        deltas, snaps = {}, {}
        for name in self.files.names():
            m = _NAME.match(name)
            if m:
                (deltas if m.group(1) == "delta" else snaps)[int(m.group(2))] = name
        return deltas, snaps

    def load(self, version: int) -> Shard:
        """The shard's state after batch `version` (-1: empty)."""
        key = (self.config.state_root, self.shard_id)
        cached = _CACHE.get(key)
        if cached is not None and cached.version == version:
            self.loaded = "cache"
            return cached
        if cached is not None and cached.version < version:
            try:
                deltas, _ = self._versions()
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
        deltas, snaps = self._versions()
        base = max((s for s in snaps if s <= version), default=None)
        if base is not None:
            raw = self.files.get(snaps[base])
            shard.snapshot_bytes = len(raw)
            header, rows = _read_lines(raw, snaps[base])
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
            header, rows = _read_lines(raw, name)
            for order_id, row in rows:
                if row is None:
                    books.pop(order_id, None)
                    continue
                old = books.get(order_id)
                books[order_id] = row
                # A new book, or one that expired and re-opened within that batch: index it.
                times = _times(row)
                if old is None or _times(old) != times:
                    shard.index(order_id, *times, ttl, grace)
            shard.clock_ms = max(shard.clock_ms, header["clock_ms"])
            shard.clock_moved_ms = max(shard.clock_moved_ms, header.get("clock_moved_ms", 0))
            shard.version = v

    def apply(self, batch_id: int, rows: Iterable[EventRow], now_ms: int | None = None,
              owns: Callable[[str], bool] | None = None) -> Outcome:
        """Apply one batch's events (already in Kafka order) and persist version `batch_id`.

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
                outcome = self._apply(shard, batch_id, rows, now_ms, t0, owns)
            except BaseException:
                # The cached shard may hold part of this batch: the retry must start from batch_id-1.
                _CACHE.pop((self.config.state_root, self.shard_id), None)
                raise
            gc.freeze()
            return outcome
        finally:
            if gc_enabled:
                gc.enable()

    def _apply(self, shard: Shard, batch_id: int, rows: Iterable[EventRow], now_ms: int, t0: float,
               owns: Callable[[str], bool] | None = None) -> Outcome:
        changed: dict[str, Book | None] = {}
        misrouted: list[EventRow] = []
        thawed: dict[str, bytes] = {}  # books decoded for this batch: their frozen rows, as they were
        alerts: list[dict] = []
        applied = duplicates = opened = expired = 0
        rules = self.config.rules
        ttl = self.config.ttl_ms
        grace_ms = self.config.grace_ms
        expiry = shard.expiry
        fallback = shard.fallback
        books = shard.books
        request_kind = events.REQUEST
        for ev in rows:
            order_id, event_id, ts = ev.order_id, ev.event_id, ev.event_ts
            if owns is not None and order_id not in books and not owns(order_id):
                misrouted.append(ev)
                continue
            # Event-time expiry before the event: the clock counts every valid event (duplicates too).
            if ts > shard.clock_ms:
                shard.clock_ms = ts
                shard.clock_moved_ms = now_ms
            if expiry.next_ms <= shard.clock_ms:
                expired += self._expire(shard, [(expiry, shard.clock_ms, lambda b: _times(b)[0] + ttl)],
                                        changed, thawed, alerts, now_ms)
            book = books.get(order_id)
            if book is None:
                book = books[order_id] = Book(order_id, ts, now_ms)
                # Shard.index, inlined: a bucket still in the dict is one the clock has not reached.
                bucket = expiry.buckets.get((ts + ttl) // expiry.width)
                if bucket is not None:
                    bucket.append(order_id)
                else:
                    expiry.add(ts + ttl, order_id)
                bucket = fallback.buckets.get((now_ms + ttl + grace_ms) // fallback.width)
                if bucket is not None:
                    bucket.append(order_id)
                else:
                    fallback.add(now_ms + ttl + grace_ms, order_id)
                opened += 1
            elif book.__class__ is bytes:
                thawed[order_id] = book
                book = books[order_id] = thaw(book, order_id)
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
        deadlines = [(shard.expiry, shard.clock_ms, lambda b: _times(b)[0] + ttl)]
        # The processing-time fallback only when this shard's event clock has stalled for longer than
        # the grace: an idle stream still expires its books, while an auditor catching up on a
        # backlog after a restart (event clock moving) keeps expiring on event time only.
        if now_ms - shard.clock_moved_ms >= grace:
            deadlines.append((shard.fallback, now_ms, lambda b: _times(b)[1] + ttl + grace))
        expired += self._expire(shard, deadlines, changed, thawed, alerts, now_ms)
        shard.version = batch_id
        # Freeze what the batch touched: the changed books' new rows (also their lines in the delta),
        # the ones it only read (duplicates) back to their rows as they were.
        for order_id, row in thawed.items():
            if order_id not in changed:
                books[order_id] = row
        frozen: list[tuple[str, bytes | None]] = []
        for order_id, book in changed.items():
            if book is None:
                frozen.append((order_id, None))
            else:
                books[order_id] = row = freeze(book)
                frozen.append((order_id, row))
        # Durable first: the delta (and maybe a snapshot) is written before any alert leaves.
        delta = _dump_lines(frozen, clock_ms=shard.clock_ms, clock_moved_ms=shard.clock_moved_ms)
        self.files.put(f"delta-{batch_id:012d}.jsonl.gz", delta)
        shard.delta_bytes += len(delta)
        if (self.config.snapshot_every and batch_id % self.config.snapshot_every == 0 and batch_id > 0
                and shard.delta_bytes >= self.config.snapshot_delta_ratio * shard.snapshot_bytes):
            self._snapshot(shard)
        return Outcome(alerts, len(shard.books), opened, expired, applied, duplicates,
                       (time.perf_counter() - t0) * 1000, self.loaded, misrouted)

    @staticmethod
    def _fire(book: Book, rule: Rule, alert: Alert | None, out: list[dict], now_ms: int) -> None:
        if alert is None or alert.kind in book.fired:
            return
        book.fired.append(alert.kind)
        out.append(render(book, alert, rule.name, now_ms))

    def _expire(self, shard: Shard, deadlines, changed: dict, thawed: dict, alerts: list[dict], now_ms: int) -> int:
        """Drop the books due on any of `deadlines` [(index, clock, deadline_of(book))], asking the rules first."""
        books = shard.books
        due: set[str] = set()
        for index, clock, deadline_of in deadlines:
            due.update(index.due(clock, lambda o: None if (b := books.get(o)) is None else deadline_of(b)))
        for order_id in sorted(due):
            book = books.pop(order_id)
            if book.__class__ is bytes:
                book = thaw(book, order_id)
            thawed.pop(order_id, None)
            for rule in self.config.rules:
                self._fire(book, rule, rule.on_expire(book), alerts, now_ms)
            changed[order_id] = None
        return len(due)

    def _snapshot(self, shard: Shard) -> None:
        # Every book is frozen between batches: the snapshot is their rows, concatenated and compressed.
        data = _dump_lines(shard.books.items(), clock_ms=shard.clock_ms, clock_moved_ms=shard.clock_moved_ms)
        self.files.put(f"snapshot-{shard.version:012d}.jsonl.gz", data)
        shard.snapshot_bytes, shard.delta_bytes = len(data), 0
        deltas, snaps = self._versions()
        kept = sorted(snaps)[-self.config.keep_snapshots:]
        if len(kept) == self.config.keep_snapshots:
            oldest = kept[0]
            for v, name in snaps.items():
                if v < oldest:
                    self.files.delete(name)
            for v, name in deltas.items():
                if v <= oldest:
                    self.files.delete(name)
