"""Durability and versioning of the books (aldebaran.audit.state) on local files.

A "restart" is simulated by clearing the store's ``_CACHE`` (a new Python worker has no cache and loads
the shard from its snapshot + deltas); a "second worker" by putting an older copy of the shard in the
cache. The uninterrupted run is itself checked against the reference model.
"""

from __future__ import annotations

import copy
import random
from dataclasses import asdict

import pytest

from aldebaran.audit import reference
from aldebaran.audit import parse as events
from aldebaran.audit import book as book_step
from aldebaran.audit.findings import Book
from aldebaran.audit.rules import resolve
from aldebaran.audit.state import rows as row_files
from aldebaran.audit.state import snapshots
from aldebaran.audit.state.deadlines import DeadlineIndex
from aldebaran.audit.state.files import Files
from aldebaran.audit.state.rows import freeze, thaw
from aldebaran.audit.state.store import _CACHE, Config, ShardStore
from aldebaran.exceptions import ConfigError, NotFound
from aldebaran.model import Event

TTL = 200
NOW = 5_000_000
RULES = ("overfill", "mismatch")


@pytest.fixture(autouse=True)
def _fresh_cache():
    _CACHE.clear()
    yield
    snapshots.wait_all()  # no snapshot child outlives its test's temp dir
    _CACHE.clear()


def messages(orders: int = 60, seed: int = 1) -> list[bytes]:
    """The original publisher's mix with event times 10 ms apart, plus orphans (request dropped),
    late requests, redelivered purchases and the odd mismatched stock. 0-share purchases (~2 %) are valid."""
    rng = random.Random(seed)
    out: list[dict] = []
    for o in range(orders):
        order_id = f"o{o}"
        limit = rng.randint(50, 100)
        evts = [events.request(order_id, limit, "Goldman", "AAPL")]
        for k in range(4):
            evts.append(events.purchase(f"{order_id}-p{k}", order_id, int(limit / 2 * rng.random()), "Goldman",
                                        "MSFT" if o % 11 == 5 and k == 2 else "AAPL"))
        if o % 7 == 3:
            evts = evts[1:]
        elif o % 5 == 1:
            evts = evts[1:] + evts[:1]
        if o % 4 == 0:
            evts.append(dict(evts[-1]))
        out.extend(evts)
    for i, e in enumerate(out):
        e["ts"] = i * 10
    out.append(events.request("flush", 1, ts=len(out) * 10 + 10 * TTL))  # every book is due after this
    return [events.encode(e) for e in out]


def batches(msgs: list[bytes], size: int = 13) -> list[list[Event]]:
    rows = reference.valid_events(msgs)
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def store_at(root, snapshot_every: int = 20, delta_ratio: float = 0.0) -> ShardStore:
    """delta_ratio 0: a snapshot on every `snapshot_every`-th batch (the schedule these tests count on)."""
    return ShardStore(Config(str(root), resolve(list(RULES)), ttl_ms=TTL, grace_ms=60_000,
                             snapshot_every=snapshot_every, snapshot_delta_ratio=delta_ratio), 0)


def state(root) -> dict:
    shard = _CACHE[(str(root), 0)]
    return {"version": shard.version, "clock_ms": shard.clock_ms,
            "books": {o: asdict(shard.book(o)) for o in sorted(shard.books)}}


def keys(alerts: list[dict]) -> list[tuple]:
    return sorted(reference.key(a) for a in alerts)


def run(root, bs, snapshot_every: int = 20, delta_ratio: float = 0.0) -> tuple[list[list[dict]], list[dict]]:
    """Uninterrupted: the alerts of each batch and the state after each batch."""
    store = store_at(root, snapshot_every, delta_ratio)
    alerts, states = [], []
    for i, rows in enumerate(bs):
        alerts.append(store.apply(i, rows, now_ms=NOW).alerts)
        store.finish_snapshot()  # the schedule these tests count on: each snapshot done before the next batch
        states.append(copy.deepcopy(state(root)))
    return alerts, states


@pytest.fixture(scope="module")
def msgs() -> list[bytes]:
    return messages()


def test_uninterrupted_run_matches_the_reference(tmp_path, msgs):
    alerts, _ = run(tmp_path, batches(msgs))
    got = keys([a for batch in alerts for a in batch])
    assert got == keys(reference.expected_alerts(msgs, ttl_ms=TTL, rules=RULES))
    kinds = {k[1] for k in got}
    assert kinds == {"OVERFILL", "ORPHAN", "MISMATCH"}


def test_the_end_pass_expires_every_open_book_like_the_reference_at_the_end(tmp_path, msgs):
    """A bounded run with expire-at-end: after the last batch, one version with no events in which every
    open book expires. Without the flushing request at the end, books are still open there."""
    open_at_end = msgs[:-1]
    bs = batches(open_at_end)
    store = store_at(tmp_path)
    got = [a for i, rows in enumerate(bs) for a in store.apply(i, rows, now_ms=NOW).alerts]
    end = store.apply(len(bs), iter(()), now_ms=NOW, expire_all=True)

    assert end.open_books == 0 and end.expired > 0 and end.applied == 0
    assert {a.kind for a in end.alerts} == {"ORPHAN"}
    assert keys(got + end.alerts) == keys(reference.expected_alerts(open_at_end, ttl_ms=TTL, rules=RULES,
                                                                     expire_at_end=True))
    assert keys(got) == keys(reference.expected_alerts(open_at_end, ttl_ms=TTL, rules=RULES))
    _CACHE.clear()  # the end version is durable like any other: a cold load finds no book
    assert store_at(tmp_path).load(len(bs)).books == {}


@pytest.mark.parametrize("restart_at", [1, 5, 19, 20, 21])
def test_state_survives_a_restart(tmp_path, msgs, restart_at):
    bs = batches(msgs)
    expected_alerts, expected_states = run(tmp_path / "straight", bs)
    root = tmp_path / "restarted"
    store = store_at(root)
    for i, rows in enumerate(bs):
        if i == restart_at:
            _CACHE.clear()  # a new process: nothing in memory
            store = store_at(root)
        assert keys(store.apply(i, rows, now_ms=NOW).alerts) == keys(expected_alerts[i]), f"batch {i}"
        assert state(root) == expected_states[i]


@pytest.mark.parametrize("cache", ["cleared", "ahead"])
def test_reexecuted_batch_converges(tmp_path, msgs, cache):
    bs = batches(msgs)
    expected_alerts, expected_states = run(tmp_path / "straight", bs)
    root = tmp_path / "retried"
    store = store_at(root)
    for i, rows in enumerate(bs):
        first = store.apply(i, rows, now_ms=NOW).alerts
        if i % 3 == 1:  # the batch runs again (task retry / restart before Spark committed it)
            if cache == "cleared":
                _CACHE.clear()
            again = store.apply(i, rows, now_ms=NOW).alerts
            assert keys(again) == keys(first)
        assert keys(first) == keys(expected_alerts[i]), f"batch {i}"
        assert state(root) == expected_states[i]


def test_batch_that_failed_midway_is_retried_from_its_start(tmp_path):
    """A task that dies inside the batch (e.g. a shuffle fetch failure while reading its rows) must
    not leave half-applied books in the worker's cache for the retry: the alert would be lost."""
    store = store_at(tmp_path)
    rows = [Event("PR", "1", "1", 100, "Sendence", "AAPL", 0),
            Event("P", "2", "1", 90, "Sendence", "AAPL", 1),
            Event("P", "3", "1", 30, "Sendence", "AAPL", 2),
            Event("P", "4", "1", 10, "Sendence", "AAPL", 3)]

    def failing(after: int):
        for i, row in enumerate(rows):
            if i == after:
                raise RuntimeError("fetch failed")
            yield row

    with pytest.raises(RuntimeError, match="fetch failed"):
        store.apply(0, failing(after=3), now_ms=NOW)
    retried = store.apply(0, rows, now_ms=NOW).alerts
    assert [(a.kind, a.order_id, a.purchased, a.trigger_event_id) for a in retried] == [
        ("OVERFILL", "1", 120, "3")]
    # The same after a failed batch on top of existing state.
    with pytest.raises(RuntimeError):
        store.apply(1, failing(after=0), now_ms=NOW)
    assert store.apply(1, [Event("P", "5", "1", 1, None, None, 4)], now_ms=NOW).alerts == []
    assert state(tmp_path)["books"]["1"]["purchased"] == 131


def test_snapshots_and_cleanup_reload_correctly(tmp_path, msgs):
    bs = batches(msgs, size=5)
    assert len(bs) > 40
    expected_alerts, expected_states = run(tmp_path / "straight", bs)
    root = tmp_path / "snap"
    alerts, states = run(root, bs, snapshot_every=3)
    assert [keys(a) for a in alerts] == [keys(a) for a in expected_alerts]
    assert states == expected_states

    shard_dir = root / "shard-0000"
    snaps = sorted(int(p.name[9:21]) for p in shard_dir.glob("snapshot-*.jsonl.gz"))
    deltas = sorted(int(p.name[6:18]) for p in shard_dir.glob("delta-*.jsonl.gz"))
    last = len(bs) - 1
    assert len(snaps) == 2 and snaps[-1] == last - last % 3
    assert deltas == list(range(snaps[0] + 1, last + 1))  # older deltas were cleaned up
    assert not list(shard_dir.glob(".*.tmp"))

    # Every version still reachable loads cold to the state the run had.
    for v in range(snaps[0], last + 1):
        _CACHE.clear()
        store_at(root, 3).load(v)
        assert state(root) == expected_states[v], f"version {v}"

    # Re-executing the batch that wrote the newest snapshot (cold) still works after the cleanup.
    _CACHE.clear()
    again = store_at(root, 3).apply(snaps[-1], bs[snaps[-1]], now_ms=NOW).alerts
    assert keys(again) == keys(expected_alerts[snaps[-1]])


def test_snapshots_wait_for_deltas_as_large_as_the_last_snapshot(tmp_path, msgs):
    """The default rule: a snapshot is due on the schedule only once the deltas since the last one add up to
    its size, so a large state with few changes is not rewritten every `snapshot_every` batches. Alerts and
    states are those of the run without snapshots, and every reachable version still loads cold."""
    bs = batches(msgs, size=5)
    expected_alerts, expected_states = run(tmp_path / "straight", bs, snapshot_every=0)
    root = tmp_path / "ratio"
    alerts, states = run(root, bs, snapshot_every=1, delta_ratio=1.0)
    assert [keys(a) for a in alerts] == [keys(a) for a in expected_alerts]
    assert states == expected_states

    shard_dir = root / "shard-0000"
    snaps = sorted(int(p.name[9:21]) for p in shard_dir.glob("snapshot-*.jsonl.gz"))
    deltas = {int(p.name[6:18]): p.stat().st_size for p in shard_dir.glob("delta-*.jsonl.gz")}
    assert 2 <= len(snaps) < len(bs) // 3, snaps  # on the schedule every batch was due; far fewer were taken
    # The newest snapshot came after deltas of at least the size of the one before it.
    older = (shard_dir / f"snapshot-{snaps[-2]:012d}.jsonl.gz").stat().st_size
    assert sum(size for v, size in deltas.items() if snaps[-2] < v <= snaps[-1]) >= older
    # ... and since it, less than its own size has been written (else the next batch would have taken one).
    newest = (shard_dir / f"snapshot-{snaps[-1]:012d}.jsonl.gz").stat().st_size
    assert sum(size for v, size in deltas.items() if v > snaps[-1]) < newest + max(deltas.values())

    for v in range(snaps[0], len(bs)):
        _CACHE.clear()
        store_at(root, 1, 1.0).load(v)
        assert state(root) == expected_states[v], f"version {v}"


def test_stale_worker_cache_falls_back_to_a_cold_load(tmp_path, msgs):
    """A worker whose cache is older than the oldest delta kept cannot catch up by replaying deltas."""
    bs = batches(msgs, size=5)
    expected_alerts, expected_states = run(tmp_path / "straight", bs)
    root = tmp_path / "two-workers"
    store = store_at(root, 3)
    stale = None
    for i, rows in enumerate(bs[:-1]):
        store.apply(i, rows, now_ms=NOW)
        store.finish_snapshot()
        if i == 2:
            stale = copy.deepcopy(_CACHE[(str(root), 0)])
    assert not (root / "shard-0000" / "delta-000000000003.jsonl.gz").exists()
    _CACHE[(str(root), 0)] = stale  # the next task runs on the worker that saw version 2
    last = len(bs) - 1
    assert keys(store.apply(last, bs[last], now_ms=NOW).alerts) == keys(expected_alerts[last])
    assert state(root) == expected_states[last]


def test_worker_catching_up_indexes_a_book_reopened_within_a_batch(tmp_path):
    """Order 1 expires and re-opens inside batch 1. A worker that was at version 0 replays delta 1:
    the re-opened book must still expire on time."""
    store = store_at(tmp_path)
    store.apply(0, [Event("P", "2", "1", 5, "C", "S", 0)], now_ms=NOW)
    behind = copy.deepcopy(_CACHE[(str(tmp_path), 0)])
    alerts = store.apply(1, [Event("P", "3", "1", 7, "C", "S", TTL)], now_ms=NOW).alerts
    assert [(a.kind, a.purchased, a.trigger_event_id) for a in alerts] == [("ORPHAN", 5, "2")]
    _CACHE[(str(tmp_path), 0)] = behind
    assert store.apply(2, [Event("PR", "9", "9", 1, "C", "S", TTL + 10)], now_ms=NOW).alerts == []
    alerts = store.apply(3, [Event("PR", "10", "10", 1, "C", "S", 2 * TTL)], now_ms=NOW).alerts
    assert [(a.kind, a.order_id, a.purchased, a.trigger_event_id) for a in alerts] == [
        ("ORPHAN", "1", 7, "3")]


def test_missing_delta_is_a_clear_error(tmp_path):
    store = ShardStore(Config(str(tmp_path), resolve(["overfill"]), ttl_ms=TTL, snapshot_every=0), 0)
    for i in range(5):
        store.apply(i, [Event("PR", f"o{i}", f"o{i}", 1, "C", "S", i)], now_ms=NOW)
    (tmp_path / "shard-0000" / "delta-000000000002.jsonl.gz").unlink()
    _CACHE.clear()
    with pytest.raises(FileNotFoundError, match=r"versions \[2\].*" + str(tmp_path)):
        store.apply(5, [], now_ms=NOW)


def test_loading_a_version_that_was_never_written_is_a_clear_error(tmp_path):
    store = store_at(tmp_path)
    store.apply(0, [], now_ms=NOW)
    _CACHE.clear()
    with pytest.raises(FileNotFoundError, match=r"versions \[1, 2\]"):
        store.apply(3, [], now_ms=NOW)


class MissingKeyStoreFake:
    """Failure-path fake of aldebaran.storage.store.S3Store: every key is missing."""

    def get(self, key: str):
        raise NotFound(f"s3://fake/{key} not found")


def test_state_files_report_a_missing_key_as_file_not_found():
    # The cache catch-up falls back to a cold load on FileNotFoundError, whatever the backend.
    files = Files(MissingKeyStoreFake(), "ckpt/books/shard-0000/")
    with pytest.raises(FileNotFoundError, match="delta-000000000001"):
        files.get("delta-000000000001.json.gz")


def test_keeping_a_single_snapshot_is_rejected(tmp_path):
    # With one snapshot kept, the deltas before it are gone and a re-executed snapshot batch cannot
    # reload version batch_id - 1.
    with pytest.raises(ConfigError, match="keep_snapshots"):
        Config(str(tmp_path), resolve(["overfill"]), keep_snapshots=1)


BOOK_FIELDS = dict(order_id="o1", first_ts=5, first_seen_ms=6,
                   request={"event_id": "r", "shares": 10, "client": "c", "stock": "s", "ts": 5},
                   purchased=12, purchase_count=2, first_purchase={"event_id": "p", "ts": 7, "client": "c", "stock": "s"},
                   seen=["r", "p", "q"], fired=["OVERFILL"], slots={"mismatch": [["p", "c", "s"]]},
                   coords=[0, 40, 1, [1, 7]])


def test_a_frozen_book_round_trips_field_for_field():
    """Between batches a book is its row as bytes (the id is the dict key): every field, including ones
    added later, must come back in its place, and the times read without decoding are the book's."""
    book = Book(**BOOK_FIELDS)
    row = freeze(book)
    assert row == (b'[5,6,[0,10,"c","s",0],12,2,[1,2,"c","s"],["r","p","q"],["OVERFILL"],{"mismatch":[["p","c","s"]]},'
                   b'[0,40,1,[1,7]]]')
    assert thaw(row, "o1") == book
    assert row_files.times(row) == (5, 6) == row_files.times(book)
    # An event id that is not in `seen` (not written by the engine, but kept if it happens) is stored as is.
    odd = Book(**dict(BOOK_FIELDS, request=dict(BOOK_FIELDS["request"], event_id="elsewhere")))
    assert thaw(freeze(odd), "o1") == odd
    bare = Book("o2", -3, 0)
    assert freeze(bare) == b"[-3,0,null,0,0,null,[],[],{},[]]" and thaw(freeze(bare), "o2") == bare
    assert row_files.times(freeze(bare)) == (-3, 0)


def test_a_row_frozen_before_coordinates_were_kept_still_thaws_without_them():
    """Rows of nine fields (checkpoints written before explain's trail, 2026-11-25) stay readable: the
    book comes back with its coordinates unknown (None), and the step then records none for it."""
    old = b'[5,6,[0,10,"c","s",0],12,2,[1,2,"c","s"],["r","p","q"],["OVERFILL"],{}]'
    book = thaw(old, "o1")
    assert (book.coords, book.purchased, book.seen, book.request["event_id"]) == (None, 12, ["r", "p", "q"], "r")
    assert row_files.request_known(old) and row_files.times(old) == (5, 6)
    book_step.apply(book, Event("P", "z", "o1", 1, "c", "s", 9, 0, 99), [], 0)
    assert book.coords is None and book.seen[-1] == "z"
    assert thaw(freeze(book), "o1") == book


def test_a_checkpoint_of_the_unreleased_one_document_format_is_refused_not_read_as_empty(tmp_path):
    """Deltas and snapshots were one gzip'd JSON document (*.json.gz) until 2026-11-24, before any
    release; their reader is gone. Such files are not state this version knows: loading fails naming
    the missing versions, it does not start from empty books (which would lose every open order)."""
    import gzip
    import json

    shard_dir = tmp_path / "shard-0000"
    shard_dir.mkdir()
    (shard_dir / "delta-000000000000.json.gz").write_bytes(gzip.compress(json.dumps(
        {"books": {"o1": ["o1", 1, 2, None, 5, 1, None, ["p"], [], {}]}, "clock_ms": 1}).encode()))
    with pytest.raises(FileNotFoundError, match=r"versions \[0\]"):
        store_at(tmp_path).load(0)


@pytest.mark.parametrize("n, chunk", [(0, 3), (1, 3), (3, 3), (7, 3), (7, 50)])
def test_a_file_encoded_in_chunks_reads_back_whole(monkeypatch, n, chunk):
    """Snapshots and deltas are compressed a chunk of books at a time and read back a piece at a time;
    every book, dropped ones (null) and the header come back, whatever the chunk boundaries. Ids with
    characters JSON escapes (quote, backslash, tab, newline, non-ASCII) survive the line format."""
    monkeypatch.setattr(row_files, "CHUNK", chunk)
    ids = [f"o{i}" if i % 3 else f'o{i}\t"\n\u00e9\\' for i in range(n)]
    rows = [(o, None if i == 4 else freeze(Book(o, i, 100 + i, purchased=i, seen=[f"e{i}\n"])))
            for i, o in enumerate(ids)]
    header, got = row_files.read_lines(row_files.dump_lines(rows, clock_ms=42, clock_moved_ms=7), "snapshot-000000000001.jsonl.gz")
    assert header == {"format": 2, "clock_ms": 42, "clock_moved_ms": 7}
    assert list(got) == rows


def test_a_large_file_is_read_back_across_decompression_pieces():
    """More than one 16 MiB piece of decompressed text: the line split across pieces is joined."""
    rows = [(f"order-{i:09d}", b"[%d,0,null,0,0,null,[],[],{}]" % i) for i in range(600_000)]
    header, got = row_files.read_lines(row_files.dump_lines(rows, clock_ms=1), "delta-000000000001.jsonl.gz")
    assert list(got) == rows


def test_a_file_of_an_unknown_format_is_refused():
    import gzip

    with pytest.raises(ValueError, match="format 3"):
        row_files.read_lines(gzip.compress(b'{"format":3}\n"o"\t[]\n'), "delta-000000000001.jsonl.gz")


class NaiveDeadlines:
    """The model DeadlineIndex must agree with: every (deadline, id) ever added, checked against the books."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, str]] = []

    def add(self, deadline: int, order_id: str) -> None:
        self.entries.append((deadline, order_id))

    def due(self, clock: int, deadline_of) -> set[str]:
        out = {o for d, o in self.entries if d <= clock and deadline_of(o) == d}
        self.entries = [(d, o) for d, o in self.entries if d > clock]
        return out


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("width", [1, 7, 1000])
@pytest.mark.parametrize("prunes", [False, True])
def test_deadline_index_pops_exactly_the_due_books(seed, width, prunes):
    """Random opens (deadlines out of order, re-opens with a new deadline, drops) and clock moves: the
    bucketed index returns exactly the books whose current deadline has passed, like the naive model.
    With prunes (the fallback while the event clock moves: due entries looked at, not popped), the
    books due at a prune are still returned by the next `due`."""
    rng = random.Random(seed)
    index, naive = DeadlineIndex(width), NaiveDeadlines()
    current: dict[str, int] = {}  # the books: order id → current deadline
    clock = 0
    for _ in range(400):
        action = rng.random()
        if action < 0.6:
            o, d = f"o{rng.randrange(60)}", clock + rng.randint(-50, 3000)
            current[o] = d
            index.add(d, o)
            naive.add(d, o)
        elif action < 0.7 and current:
            del current[rng.choice(sorted(current))]
        elif prunes and action < 0.85:
            clock += rng.randint(0, 400)
            index.prune(clock, current.get)  # the naive model keeps everything until its due
        else:
            clock += rng.randint(0, 400)
            if index.next_ms <= clock:
                got = set(index.due(clock, current.get))
            else:
                got = set()
            want = naive.due(clock, current.get)
            assert got == want, (clock, got ^ want)
            for o in got:
                del current[o]
        assert index.next_ms <= min(current.values(), default=float("inf"))


def held(index: DeadlineIndex) -> int:
    return sum(map(len, index.buckets.values())) + len(index.hot) + len(index.overdue)


def test_a_pruned_index_holds_the_open_books_not_every_book_opened():
    """The fallback index while the event clock moves: books open and are dropped (expired on event
    time) all along; pruning as processing time passes their entries keeps it to the open ones."""
    index = DeadlineIndex(10)
    current: dict[str, int] = {}
    for t in range(0, 200_000, 10):  # a book a tick, each open for 50 ticks, deadline 100 ticks after
        o = f"o{t}"
        current[o] = t + 1_000
        index.add(t + 1_000, o)
        current.pop(f"o{t - 500}", None)
        index.prune(t, current.get)
        assert held(index) <= 160, (t, held(index))  # 50 open, 100 not reached yet, a bucket's slack
    # Books still open past their deadline stay due: an idle stream expires them at the next due.
    current["late"] = 150_000
    index.add(150_000, "late")
    index.prune(200_000, current.get)
    assert sorted(index.due(200_000, current.get)) == sorted(o for o, d in current.items() if d <= 200_000)


def test_the_fallback_index_stays_the_size_of_the_open_books_while_the_event_clock_moves(tmp_path):
    """Orders open and expire on event time all along, processing time keeping pace: the processing-time
    fallback is never the one expiring, but its entries of expired books are dropped as processing time
    passes them (before, it kept one per book ever opened, and the first idle batch walked them all)."""
    ttl, grace = 100, 300
    store = ShardStore(Config(str(tmp_path), resolve(["overfill"]), ttl_ms=ttl, grace_ms=grace, snapshot_every=0), 0)
    for b in range(200):  # 20 orders a batch, 10 ms of event and processing time apart
        rows = [Event("PR", f"o{b}-{k}", f"o{b}-{k}", 1, "C", "S", b * 10) for k in range(20)]
        store.apply(b, rows, now_ms=NOW + b * 10)
    shard = _CACHE[(str(tmp_path), 0)]
    open_books = len(shard.books)
    assert open_books == 20 * ttl // 10  # the last ttl's worth
    # Held: the open books and those whose fallback deadline (opened + ttl + grace) is still ahead.
    assert held(shard.fallback) <= 20 * (ttl + grace) // 10 + 20, held(shard.fallback)
    # The stream idles: the fallback expires what is open, and only that.
    out = store.apply(200, [], now_ms=NOW + 199 * 10 + grace + ttl + grace)
    assert (out.expired, out.open_books) == (open_books, 0)
