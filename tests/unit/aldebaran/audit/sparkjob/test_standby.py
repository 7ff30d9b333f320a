"""The warm standby's prefetch (aldebaran.audit.sparkjob.shardhost._warm) and its settings, without Spark."""

from __future__ import annotations

import pytest

from aldebaran.audit import reference
from aldebaran.audit import parse as events
from aldebaran.audit.sparkjob.rows import BatchContext, store_for
from aldebaran.audit.sparkjob.shardhost import _warm
from aldebaran.audit.state.store import _CACHE
from aldebaran.exceptions import ConfigError


@pytest.fixture(autouse=True)
def _fresh_cache():
    _CACHE.clear()
    yield
    _CACHE.clear()


def rows(orders: range):
    msgs = [events.encode(e) for o in orders for e in (events.request(f"o{o}", 10, ts=o), events.purchase(
        f"p{o}", f"o{o}", 5, ts=o))]
    return reference.valid_events(msgs)


def test_warm_loads_the_latest_version_so_that_the_next_batch_finds_it_in_memory(tmp_path):
    ctx = BatchContext(state_root=str(tmp_path), rule_names=("overfill",), ttl_ms=600_000, grace_ms=60_000,
                       snapshot_every=20)
    assert _warm(ctx, 0) == {"shard": 0, "version": None, "books": 0, "loaded": "none"}  # no books yet
    active = store_for(ctx, 0)
    for batch in range(3):
        active.apply(batch, iter(rows(range(batch * 10, batch * 10 + 10))))
    _CACHE.clear()  # the standby is another process: nothing of the active's in its memory

    assert _warm(ctx, 0) == {"shard": 0, "version": 2, "books": 30, "loaded": "cold"}
    successor = store_for(ctx, 0)
    out = successor.apply(3, iter(rows(range(30, 35))))
    assert successor.loaded == "cache" and out.open_books == 35


def test_a_standby_without_the_lease_is_refused_naming_the_settings(monkeypatch):
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.settings import load

    monkeypatch.setenv("ALDEBARAN_AUDIT_STANDBY", "true")
    monkeypatch.setenv("ALDEBARAN_AUDIT_LEASE_SECONDS", "0")
    with pytest.raises(ConfigError, match="ALDEBARAN_AUDIT_STANDBY waits on the checkpoint lease: "
                                          "ALDEBARAN_AUDIT_LEASE_SECONDS must not be 0"):
        load(AuditorSettings)


def test_the_last_committed_batch_is_read_from_the_spark_commit_log(tmp_path):
    from aldebaran.audit.sparkjob.standby import last_committed

    assert last_committed(str(tmp_path)) is None
    commits = tmp_path / "spark" / "commits"
    commits.mkdir(parents=True)
    for name in ("0", "1", "12", ".12.crc", "9"):
        (commits / name).write_text("v1\n")
    assert last_committed(str(tmp_path)) == 12
