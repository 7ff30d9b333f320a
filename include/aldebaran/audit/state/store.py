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

Steps 2-4 up to the delta (the batch's walk over the books) are in batchstep.py, a base of ShardStore;
this module loads the version (cache, replay, cold), keeps the worker's cache and schedules snapshots.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from aldebaran.audit.rules import Rule
from aldebaran.audit.state import snapshots
from aldebaran.audit.state.batchstep import BatchStep, Outcome
from aldebaran.audit.state.files import files_for, versions
from aldebaran.audit.state.rows import read_lines, times
from aldebaran.audit.state.shard import Shard
from aldebaran.model import Event

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


_CACHE: dict[tuple[str, int], Shard] = {}


class ShardStore(BatchStep):
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
