"""Snapshots in the background (aldebaran.audit.state.snapshots) on local files: the batch never waits
for one, a cold load from it is the live state, a killed child leaves a loadable shard, and no delta
is deleted before a newer snapshot is durable.

The child is a fork of the test process, so a monkeypatched `Files.put` is the child's too: the
tests hold it (until a file appears) or let it die part-way, and act from the parent meanwhile.
"""

from __future__ import annotations

import copy
import os
import signal
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from aldebaran.model import Event
from aldebaran.audit.rules import resolve
from aldebaran.audit.state import snapshots
from aldebaran.audit.state.files import Files
from aldebaran.audit.state.store import _CACHE, Config, ShardStore

TTL = 10_000_000  # nothing expires: every book written stays open
NOW = 5_000_000


@pytest.fixture(autouse=True)
def _fresh():
    _CACHE.clear()
    yield
    snapshots.wait_all()
    _CACHE.clear()


def store_at(root, every: int = 3) -> ShardStore:
    return ShardStore(Config(str(root), resolve(["overfill"]), ttl_ms=TTL, snapshot_every=every,
                             snapshot_delta_ratio=0.0), 0)


def batch(i: int) -> list[Event]:
    """Batch i: a new order (request), a purchase for it, and a purchase for order i-1 (it changes)."""
    rows = [Event("PR", f"o{i}", f"o{i}", 10, "C", "S", i * 10), Event("P", f"p{i}", f"o{i}", 4, "C", "S", i * 10 + 1)]
    if i:
        rows.append(Event("P", f"q{i}", f"o{i - 1}", 9, "C", "S", i * 10 + 2))
    return rows


def live(root) -> dict:
    shard = _CACHE[(str(root), 0)]
    return {"version": shard.version, "clock_ms": shard.clock_ms,
            "books": {o: asdict(shard.book(o)) for o in sorted(shard.books)}}


def files(root, kind: str) -> list[int]:
    return sorted(int(p.name.split("-")[1].split(".")[0]) for p in (Path(root) / "shard-0000").glob(f"{kind}-*.jsonl.gz"))


def wait_for(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def hold_snapshot_puts(monkeypatch, tmp_path, then: str) -> Path:
    """Patch Files.put so that a snapshot's write (in the child) first writes half a temporary file,
    then waits for `<tmp_path>/go` ("wait") or for its death ("die"). Deltas are written as usual."""
    real_put = Files.put
    go, started = tmp_path / "go", tmp_path / "started"

    def put(self, name: str, data: bytes) -> None:
        if name.startswith("snapshot-"):
            (Path(self.store.root, self.prefix) / f".{name}.{os.getpid()}.tmp").write_bytes(data[: len(data) // 2])
            started.write_text(str(os.getpid()))
            if then == "die":
                time.sleep(60)
            wait_for(go.exists, timeout=60)
        real_put(self, name, data)

    monkeypatch.setattr(Files, "put", put)
    return go


def test_a_background_snapshot_is_written_and_loads_cold_to_the_live_state(tmp_path):
    store = store_at(tmp_path)
    states, done = [], None
    for i in range(7):
        store.apply(i, batch(i), now_ms=NOW)
        states.append(copy.deepcopy(live(tmp_path)))
        done = store.finish_snapshot() or done  # each snapshot done before the next one is due
    assert done is not None and done.version == 6 and done.size is not None, done
    assert files(tmp_path, "snapshot") == [3, 6]
    # The snapshot rule counts on the shard's accounting: it is now built on snapshot 6.
    shard = _CACHE[(str(tmp_path), 0)]
    assert shard.snapshot_bytes == done.size == (tmp_path / "shard-0000" / "snapshot-000000000006.jsonl.gz").stat().st_size
    # Cold, from the snapshot alone (the deltas up to it are not needed): the live state of version 6.
    for v in files(tmp_path, "delta"):
        if v <= 6:
            (tmp_path / "shard-0000" / f"delta-{v:012d}.jsonl.gz").unlink(missing_ok=True)
    _CACHE.clear()
    store_at(tmp_path).load(6)
    assert live(tmp_path) == states[6]


def test_the_batch_does_not_wait_and_old_deltas_go_only_after_the_newer_snapshot_exists(tmp_path, monkeypatch):
    store = store_at(tmp_path)
    for i in range(7):  # snapshots 3 and 6 written (each waited for), deltas up to 3 deleted
        store.apply(i, batch(i), now_ms=NOW)
        store.finish_snapshot()
    assert files(tmp_path, "snapshot") == [3, 6] and files(tmp_path, "delta") == [4, 5, 6]

    go = hold_snapshot_puts(monkeypatch, tmp_path, then="wait")
    for i in range(7, 10):
        store.apply(i, batch(i), now_ms=NOW)  # batch 9 starts snapshot 9, held in the child
    wait_for((tmp_path / "started").exists)
    assert snapshots.in_flight(store.key) is not None
    for i in range(10, 13):  # the batches go on; batch 12 is due but one snapshot is in flight
        store.apply(i, batch(i), now_ms=NOW)
        assert files(tmp_path, "snapshot") == [3, 6], "snapshot 9 is not durable yet"
        assert files(tmp_path, "delta") == list(range(4, i + 1)), "no delta deleted before snapshot 9 is"
    expected = copy.deepcopy(live(tmp_path))

    go.touch()
    done = store.finish_snapshot()
    assert done.version == 9 and done.size is not None
    assert files(tmp_path, "snapshot") == [6, 9]
    assert files(tmp_path, "delta") == list(range(7, 13))
    _CACHE.clear()
    store_at(tmp_path).load(12)
    assert live(tmp_path) == expected


def test_a_snapshot_child_killed_midway_leaves_a_loadable_shard(tmp_path, monkeypatch):
    store = store_at(tmp_path)
    for i in range(4):  # snapshot 3 written
        store.apply(i, batch(i), now_ms=NOW)
        store.finish_snapshot()
    assert files(tmp_path, "snapshot") == [3]

    hold_snapshot_puts(monkeypatch, tmp_path, then="die")
    for i in range(4, 7):  # batch 6 starts snapshot 6: the child writes half of it, then is killed
        store.apply(i, batch(i), now_ms=NOW)
    wait_for((tmp_path / "started").exists)
    pid = snapshots.in_flight(store.key).pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z")  # dead, not reaped
    store.apply(7, batch(7), now_ms=NOW)  # the next batch runs, and takes in the failure
    assert snapshots.in_flight(store.key) is None
    assert files(tmp_path, "snapshot") == [3] and files(tmp_path, "delta") == [0, 1, 2, 3, 4, 5, 6, 7]
    expected = copy.deepcopy(live(tmp_path))
    _CACHE.clear()
    store_at(tmp_path).load(7)  # a new worker: snapshot 3 + deltas 4..7
    assert live(tmp_path) == expected

    # The shard's accounting was left alone, so the snapshot is taken again when next due.
    monkeypatch.undo()
    store.apply(8, batch(8), now_ms=NOW)
    store.apply(9, batch(9), now_ms=NOW)
    assert store.finish_snapshot().size is not None
    assert files(tmp_path, "snapshot") == [3, 9]
