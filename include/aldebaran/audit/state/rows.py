"""How a shard holds and stores its books: one frozen row of bytes per book, and the line files
(deltas and snapshots) made of those rows.

A book between batches is one compact JSON array as bytes, without its order id (the dict key):
  [first_ts, first_seen_ms, request, purchased, purchase_count, first_purchase, seen, fired, slots, coords]
  request        null | [event id, shares, client, stock, ts - first_ts]
  first_purchase null | [event id, ts - first_ts, client, stock]
  coords         [partition, offset, offset deltas...]: the bounded trail of aldebaran.audit.provenance
where an event id found in `seen` is stored as its index there. A row of nine fields (written by a
version before books kept coords) still thaws, with `coords` None: its book's coordinates are unknown. A
version older than that cannot read a row of ten. ~150 bytes instead of ~1.1 KiB of
Python objects (a slotted Book, two dicts, two lists, boxed integers); and the same bytes are the book's
line in the delta that changed it and in every snapshot after, so writing a snapshot is a
concatenation and loading one a split: no book is decoded until a batch touches it. The measurements
are in docs/design.md §8.

A file is a header line `{"format":2,"clock_ms":..,"clock_moved_ms":..}` then one line per book,
`<order id as a JSON string>\\t<frozen row or null>` (null: the book was dropped; deltas only),
gzip-compressed.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import zlib
from sys import intern
from typing import Iterable

from aldebaran.audit.findings import Book

_encode_key = json.encoder.encode_basestring_ascii  # C: the order id as a JSON string


def _no_default(o):
    raise TypeError(f"a book holds {type(o).__name__}, which JSON cannot store: {o!r}")


def _row_encoder():
    """Compact JSON, ASCII only (a row never holds a raw tab or newline: the line format relies on it).
    json's C encoder made once, not per call as json.dumps does (docs/design.md §8)."""
    c_make = getattr(json.encoder, "c_make_encoder", None)
    if c_make is None:  # a Python without the _json accelerator
        return json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
    encode = c_make(None, _no_default, _encode_key, None, ":", ",", False, False, True)
    join = "".join
    return lambda obj: join(encode(obj, 0))


_encode = _row_encoder()

_BOOK_FIELDS = ("order_id", "first_ts", "first_seen_ms", "request", "purchased", "purchase_count",
                "first_purchase", "seen", "fired", "slots", "coords")
if tuple(f.name for f in dataclasses.fields(Book)) != _BOOK_FIELDS:  # a field added to Book: extend freeze/thaw
    raise ImportError(f"aldebaran.audit.state.rows: freeze/thaw know Book fields {_BOOK_FIELDS}, not "
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
        seen, book.fired, book.slots, book.coords,
    )).encode()


def thaw(row: bytes, order_id: str) -> Book:
    """The live book of a frozen row. Client and stock names are interned, event ids shared with `seen`."""
    ft, first_seen, r, purchased, count, f, seen, fired, slots, *coords = json.loads(row)
    if r is not None:
        e, client, stock = r[0], r[2], r[3]
        r = {"event_id": seen[e] if e.__class__ is int else e, "shares": r[1],
             "client": client and intern(client), "stock": stock and intern(stock), "ts": r[4] + ft}
    if f is not None:
        e, client, stock = f[0], f[2], f[3]
        f = {"event_id": seen[e] if e.__class__ is int else e, "ts": f[1] + ft,
             "client": client and intern(client), "stock": stock and intern(stock)}
    return Book(order_id, ft, first_seen, r, purchased, count, f, seen, fired, slots, coords[0] if coords else None)


def request_known(row: bytes) -> bool:
    """Whether a frozen row holds a request, without decoding it: its third field is `null` or not."""
    return not row.split(b",", 2)[2].startswith(b"null")


def times(book: Book | bytes) -> tuple[int, int]:
    """(first_ts, first_seen_ms) of a live or a frozen book, without decoding the frozen one."""
    if book.__class__ is bytes:
        first_ts, first_seen, _ = book.split(b",", 2)
        return int(first_ts[1:]), int(first_seen)
    return book.first_ts, book.first_seen_ms


# --- line files ----------------------------------------------------------------------------------
FORMAT = 2
CHUNK = 50_000  # books encoded and compressed at a time: bounds the peak memory of a snapshot


def dump_lines(items: Iterable[tuple[str, bytes | None]], **header) -> bytes:
    z = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip container, read by gzip.decompress
    out = [z.compress(json.dumps({"format": FORMAT, **header}, separators=(",", ":")).encode() + b"\n")]
    items = iter(items)
    while True:
        part = list(itertools.islice(items, CHUNK))
        if not part:
            break
        out.append(z.compress(b"".join(
            b"%s\t%s\n" % (_encode_key(o).encode(), b"null" if row is None else row) for o, row in part)))
    out.append(z.flush())
    return b"".join(out)


def read_lines(data: bytes, name: str) -> tuple[dict, Iterable[tuple[str, bytes | None]]]:
    """(header, (order id, frozen row or None) ...) of a file written by dump_lines. Decompressed a
    piece at a time."""
    z = zlib.decompressobj(31)
    first, _, rest = z.decompress(data, 1 << 16).partition(b"\n")
    while not _ and z.unconsumed_tail:  # a header longer than the first piece (not written by us)
        more = z.decompress(z.unconsumed_tail, 1 << 16)
        first, _, rest = (first + more).partition(b"\n")
    header = json.loads(first)
    if header.get("format") != FORMAT:
        raise ValueError(f"books file {name}: format {header.get('format')!r}, this version reads {FORMAT}")

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
