"""The lane's checkpoint gap (issue 38 item 4): the trades its checkpoint resumes from are gone, because the topic
was recreated or retention deleted them. The decision is pure (checkpoint offsets + watermarks → gap and
where a fresh checkpoint starts); the checkpoint is read from Spark's offsets/commits logs and moved aside,
and the keeper restarts on a fresh generation instead of crash-looping."""

from __future__ import annotations

import json

import pytest

from aldebaran.lanes import gap
from aldebaran.lanes.keeper import Keeper
from aldebaran.lanes.settings import LaneSettings
from aldebaran.lanes.status import render

T = "trades"


def test_offsets_still_there_are_no_gap():
    # low ≤ offset ≤ high: at the low watermark, inside, and at the end of the log (nothing new yet).
    assert gap.decide(T, {0: 10, 1: 50, 2: 80}, {0: (10, 90), 1: (0, 90), 2: (0, 80)}) is None


def test_the_incident_a_recreated_topic_restarts_every_partition_from_its_earliest_trade():
    found = gap.decide(T, {0: 420_743, 1: 420_760}, {0: (0, 0), 1: (0, 0)})
    assert found.recreated
    assert found.starting == {0: gap.EARLIEST, 1: gap.EARLIEST}
    assert json.loads(found.starting_offsets) == {T: {"0": -2, "1": -2}}
    assert found.skipped == 0  # the old topic's unread trades are unknown; nothing of the new one is skipped
    assert "topic recreated: checkpoint at 420743, topic high watermark 0" in found.describe()


def test_a_recreated_topic_that_already_has_more_trades_on_one_partition_is_still_recreated():
    # Partition 1's offset is inside the new topic, but it names a trade of the old one: all restart.
    found = gap.decide(T, {0: 5_000, 1: 30}, {0: (0, 120), 1: (0, 100)}, "latest")
    assert found.recreated and found.starting == {0: gap.LATEST, 1: gap.LATEST}
    assert [(p.partition, p.skipped) for p in found.partitions] == [(0, 120), (1, 100)]
    assert found.skipped == 220


def test_a_partition_the_topic_no_longer_has_means_it_was_recreated():
    found = gap.decide(T, {0: 3, 1: 4}, {0: (0, 10)})
    assert found.recreated and found.starting == {0: gap.EARLIEST}
    assert "partition 1: checkpoint at 4, the topic has no such partition now" in found.describe()


def test_retention_skips_to_the_earliest_trade_left_and_resumes_the_other_partitions():
    found = gap.decide(T, {0: 100, 1: 700}, {0: (250, 900), 1: (200, 800)})
    assert not found.recreated
    assert found.starting == {0: gap.EARLIEST, 1: 700}
    (p0,) = found.partitions
    assert (p0.partition, p0.checkpoint, p0.low, p0.high, p0.skipped) == (0, 100, 250, 900, 150)
    assert "partition 0: checkpoint at 100, earliest trade still there 250: 150 trade(s) skipped" in found.describe()


def test_retention_with_latest_skips_everything_up_to_the_end():
    found = gap.decide(T, {0: 100, 1: 700}, {0: (250, 900), 1: (200, 800)}, "latest")
    assert found.starting == {0: gap.LATEST, 1: 700}
    assert found.skipped == 800


def test_a_new_partition_starts_from_its_first_trade_as_spark_would():
    found = gap.decide(T, {0: 1}, {0: (5, 9), 1: (0, 4)})
    assert found.starting == {0: gap.EARLIEST, 1: gap.EARLIEST}


def test_only_earliest_or_latest():
    with pytest.raises(ValueError):
        gap.decide(T, {0: 1}, {0: (5, 9)}, "committed")


def test_the_setting_defaults_to_earliest_and_refuses_anything_else(monkeypatch):
    assert LaneSettings().gap_starting_offsets == "earliest"
    monkeypatch.setenv("ALDEBARAN_LANES_GAP_STARTING_OFFSETS", "latest")
    assert LaneSettings().gap_starting_offsets == "latest"
    monkeypatch.setenv("ALDEBARAN_LANES_GAP_STARTING_OFFSETS", "none")
    with pytest.raises(ValueError):
        LaneSettings()


def write_log(checkpoint, name: str, batch: int, offsets: dict | None = None) -> None:
    """One entry of a Spark checkpoint log as Spark writes it ("v1", metadata, one line per source)."""
    folder = checkpoint / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})]
    if offsets is not None:
        lines.append(json.dumps({T: {str(p): o for p, o in offsets.items()}}))
    (folder / str(batch)).write_text("\n".join(lines))
    (folder / f".{batch}.crc").write_bytes(b"crc")


def test_checkpoint_offsets_take_the_lower_of_the_latest_entry_and_the_last_committed_one(tmp_path):
    ck = tmp_path / "gen-1"
    assert gap.checkpoint_offsets(str(ck), T) is None  # no checkpoint yet
    write_log(ck, "offsets", 0, {0: 10, 1: 10})
    write_log(ck, "offsets", 1, {0: 40, 1: 20})
    write_log(ck, "offsets", 2, {0: 30, 1: 90})  # not committed: re-run from its start
    write_log(ck, "commits", 0)
    write_log(ck, "commits", 1)
    assert gap.checkpoint_offsets(str(ck), T) == {0: 30, 1: 20}
    assert gap.checkpoint_offsets(str(ck), "other") is None


def test_abandon_moves_the_checkpoint_under_a_dated_prefix(tmp_path):
    ck = tmp_path / "root" / "gen-1"
    write_log(ck, "offsets", 0, {0: 1})
    moved = gap.abandon(str(ck), now=1_800_000_000.0)
    assert moved == f"{tmp_path}/root/abandoned/20270115T080000Z-gen-1"
    assert not ck.exists()
    assert (tmp_path / "root" / "abandoned" / "20270115T080000Z-gen-1" / "offsets" / "0").exists()


def keeper_on(tmp_path, monkeypatch, marks, **settings) -> Keeper:
    monkeypatch.setattr(gap, "watermarks", lambda kafka, topic: marks)
    cfg = LaneSettings(**{"checkpoint": str(tmp_path / "ck"), "name": "gaptest", **settings})
    k = Keeper(cfg, kafka=type("Kafka", (), {"trades_topic": T})(), store=None)
    k.generation = {"name": "gen-1", "started_at": 1.0, "checkpoint": str(tmp_path / "ck" / "gen-1")}
    return k


def test_the_keeper_moves_a_gapped_checkpoint_aside_and_takes_a_fresh_generation(tmp_path, monkeypatch):
    k = keeper_on(tmp_path, monkeypatch, {0: (0, 3), 1: (0, 0)})
    write_log(tmp_path / "ck" / "gen-1", "offsets", 7, {0: 420_743, 1: 420_760})
    write_log(tmp_path / "ck" / "gen-1", "commits", 7)
    starting = k.after_gap()
    assert json.loads(starting) == {T: {"0": -2, "1": -2}}
    assert k.generation["name"] != "gen-1" and k.generation["fresh"]
    assert k.generation["checkpoint"].startswith(str(tmp_path / "ck") + "/gen-")
    assert not (tmp_path / "ck" / "gen-1").exists()
    assert k.gaps["count"] == 1 and k.gaps["last"]["generation"] == "gen-1"
    assert k.gaps["last"]["abandoned"].startswith(str(tmp_path / "ck" / "abandoned") + "/")
    assert (tmp_path / "ck" / "abandoned").is_dir()
    # `aldebaran lanes status` shows it.
    state = {"exact": {"heartbeat": False, "query": "q", "topic": "alerts"},
             "fast": {"lane": "gaptest", "topic": "alerts.fast", "heartbeat": True, "status": "running",
                      "age_seconds": 1, "pid": 1, "host": "h", "process": {}, "gaps": k.gaps, "unconfirmed": []}}
    assert "gaps         1 checkpoint gap(s)" in render(state)
    assert "topic recreated: checkpoint at 420743, topic high watermark 3" in render(state)


def test_the_keeper_resumes_a_checkpoint_without_a_gap(tmp_path, monkeypatch):
    k = keeper_on(tmp_path, monkeypatch, {0: (0, 500)})
    write_log(tmp_path / "ck" / "gen-1", "offsets", 0, {0: 400})
    assert k.after_gap() is None
    assert k.generation["name"] == "gen-1" and (tmp_path / "ck" / "gen-1").exists()
    assert k.gaps["count"] == 0


def test_a_lane_that_failed_out_of_range_before_it_logged_offsets_starts_fresh(tmp_path, monkeypatch):
    k = keeper_on(tmp_path, monkeypatch, {0: (40, 60)}, gap_starting_offsets="latest")
    (tmp_path / "ck" / "gen-1").mkdir(parents=True)
    assert k.after_gap("the lane's query stopped: java.lang.RuntimeException: boom") is None
    error = "the lane's query stopped: org.apache.kafka.clients.consumer.OffsetOutOfRangeException: Fetch position"
    assert json.loads(k.after_gap(error)) == {T: {"0": -1}}
    assert k.gaps["count"] == 1


def test_the_gaps_are_counted_in_the_keepers_metrics():
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from aldebaran.runtime.metrics_roles import lane_families

    class Collector:
        def __init__(self, fn):
            self.collect = fn

    keeper = SimpleNamespace(name="fast", launches=2, last_body={
        "status": "starting", "at": 5.0, "gaps": {"count": 2, "skipped": 150, "last": {}}})
    reg = CollectorRegistry()
    reg.register(Collector(lambda: lane_families(keeper, now=6.0)))
    assert reg.get_sample_value("aldebaran_lane_checkpoint_gaps_total", {"lane": "fast"}) == 2
    assert reg.get_sample_value("aldebaran_lane_gap_skipped_trades_total", {"lane": "fast"}) == 150
