"""The heartbeat writer (aldebaran.runtime.heartbeat) and the dispatcher's heartbeat body (aldebaran.delivery.service):
beats come from a thread whatever the work loop does, the final word is never overwritten, and the body
carries each channel's progress (settled offsets, pending work, when it last moved). No services: a local
directory store and fake workers (named as such)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from aldebaran.delivery.stats import DispatchStats
import pytest

from aldebaran.runtime import heartbeat
from aldebaran.delivery.service import Heartbeat
from aldebaran.exceptions import ObjectStoreError
from aldebaran.runtime.heartbeat import DISPATCHER, LANE, Beater, Progress, publish
from aldebaran.storage.store import open_store


# --- where heartbeats live ---------------------------------------------------------------------------
def test_every_role_beats_at_heartbeats_role_name_and_reads_back(tmp_path):
    store = open_store(str(tmp_path))
    assert [heartbeat.key(role, "a-1") for role in heartbeat.ROLES] == [
        "heartbeats/auditor/a-1.json", "heartbeats/dispatcher/a-1.json", "heartbeats/lane/a-1.json"]
    assert heartbeat.read(store, LANE, "a-1") is None
    assert publish(store, LANE, "a-1", {"status": "running"}) is True
    assert heartbeat.read(store, LANE, "a-1") == {"status": "running"}
    assert heartbeat.read_all(store, LANE) == [{"status": "running"}]
    assert heartbeat.read_all(store, DISPATCHER) == []


def test_an_unknown_role_or_an_unsafe_name_is_refused():
    with pytest.raises(ValueError, match="unknown heartbeat role"):
        heartbeat.key("auditors", "q")
    with pytest.raises(ValueError, match="unsafe dispatcher name"):
        heartbeat.key(DISPATCHER, "../ledger/x")


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# --- Beater ------------------------------------------------------------------------------------------
def test_a_busy_loop_still_beats(tmp_path):
    store = open_store(str(tmp_path))
    n = {"beats": 0}

    def body():
        n["beats"] += 1
        return {"status": "running", "n": n["beats"]}

    beater = Beater(store, DISPATCHER, "t", body, period=0.05).start()
    busy = threading.Event()
    busy.wait(0.4)  # the "work loop" never calls anything
    beater.finish({"status": "stopped"})
    assert n["beats"] >= 4
    assert heartbeat.read(store, DISPATCHER, "t") == {"status": "stopped"}


def test_the_final_body_is_not_overwritten_by_a_late_periodic_beat(tmp_path):
    store = open_store(str(tmp_path))
    beater = Beater(store, DISPATCHER, "t", lambda: {"status": "running"}, period=0.01).start()
    beater.finish({"status": "failed"})
    time.sleep(0.05)
    assert heartbeat.read(store, DISPATCHER, "t")["status"] == "failed"


class FailingStoreFake:
    """Failure injection: every write fails as an unreachable object store does."""

    def put(self, key, body, content_type="application/json"):
        raise ObjectStoreError("connection refused")

    def uri(self, key):
        return f"fake://{key}"


def test_a_failed_write_is_logged_not_raised(caplog):
    assert publish(FailingStoreFake(), DISPATCHER, "t", {"status": "running"}) is False
    assert "dispatcher t: heartbeat not written to fake://heartbeats/dispatcher/t.json" in caplog.text


# --- Progress --------------------------------------------------------------------------------------------
def test_progress_moves_only_when_the_marks_change():
    clock = FakeClock()
    p = Progress(clock)
    p.observe(((0, 10),), pending=True)  # the first look is a baseline
    assert p.snapshot()["progress_at"] == 1000.0
    clock.t = 1050.0
    p.observe(((0, 10),), pending=True)
    assert p.snapshot()["progress_at"] == 1000.0
    clock.t = 1060.0
    p.observe(((0, 12),), pending=False)
    p.turned()
    assert p.snapshot() == {"loop_at": 1060.0, "progress_at": 1060.0, "pending": False}


# --- the dispatcher's body -------------------------------------------------------------------------------
@dataclass
class PartitionFake:
    number: int
    epoch: int = 1
    buffer: list = field(default_factory=list)
    broken: str | None = None


class ChannelFake:
    name = "log"


class WorkerFake:
    """Stands in for a ChannelDispatcher: what the heartbeat reads of it."""

    def __init__(self, partitions) -> None:
        self.channel = ChannelFake()
        self.partitions = {p.number: p for p in partitions}


class TopicPartitionFake:
    def __init__(self, partition, offset) -> None:
        self.partition, self.offset = partition, offset


class ConsumerFake:
    """Stands in for a confluent-kafka consumer: its assignment, positions and cached high watermarks."""

    def __init__(self, positions: dict[int, int], highs: dict[int, int] | None = None) -> None:
        self.positions = positions
        self.highs = highs or {}

    def assignment(self):
        return [TopicPartitionFake(p, -1001) for p in self.positions]

    def position(self, tps):
        return [TopicPartitionFake(tp.partition, self.positions[tp.partition]) for tp in tps]

    def get_watermark_offsets(self, tp, cached=False):
        return (0, self.highs.get(tp.partition, -1001))  # -1001: librdkafka has not fetched it yet


def test_the_body_reports_settled_offsets_pending_work_and_progress(tmp_path):
    clock = FakeClock()
    stats = DispatchStats()
    hb = Heartbeat(open_store(str(tmp_path)), "log", ["log"], "h:1", stats, 5.0, clock=clock)
    worker = WorkerFake([PartitionFake(0), PartitionFake(1, buffer=[(7, b"", None, None)])])
    settled = {0: 20}
    hb.progress(worker, ConsumerFake({0: 20, 1: 8}, highs={0: 25}), settled)
    body = hb.body()
    assert body["partitions"]["log"][0] == {"epoch": 1, "broken": None, "settled": 20, "position": 20,
                                            "high": 25, "buffered": 0, "advanced_at": 1000.0}
    assert body["partitions"]["log"][1]["high"] is None
    assert body["partitions"]["log"][1]["buffered"] == 1
    assert body["progress"]["log"] == {"loop_at": 1000.0, "progress_at": 1000.0, "pending": True, "outcomes": 0}

    # Deliveries settle inside one long turn of the loop (no progress() call): the beat sees them.
    clock.t = 1100.0
    stats.bump("sent", "log", 3)
    body = hb.body()
    assert body["progress"]["log"]["progress_at"] == 1100.0
    assert body["progress"]["log"]["loop_at"] == 1000.0
    assert body["progress"]["log"]["outcomes"] == 3

    # Settled offsets move: progress, and that partition's advanced_at.
    clock.t = 1200.0
    settled[1] = 8
    worker.partitions[1].buffer.clear()
    hb.progress(worker, None, settled)
    body = hb.body()
    assert body["partitions"]["log"][1]["advanced_at"] == 1200.0
    assert body["progress"]["log"]["progress_at"] == 1200.0
    assert body["progress"]["log"]["pending"] is False


def test_a_broken_partition_is_not_pending_work(tmp_path):
    hb = Heartbeat(open_store(str(tmp_path)), "log", ["log"], "h:1", DispatchStats(), 5.0, clock=FakeClock())
    worker = WorkerFake([PartitionFake(0, broken="fenced by epoch 5")])
    hb.progress(worker, ConsumerFake({0: 50}), {0: 10})
    assert hb.body()["progress"]["log"]["pending"] is False


def test_a_channel_whose_loop_never_turned_is_reported(tmp_path):
    hb = Heartbeat(open_store(str(tmp_path)), "sms-webhook", ["sms", "webhook"], "h:1", DispatchStats(), 5.0,
                   clock=FakeClock())
    assert hb.body()["progress"]["sms"]["loop_at"] is None


def test_start_and_finish_write_running_then_stopped(tmp_path):
    store = open_store(str(tmp_path))
    hb = Heartbeat(store, "log", ["log"], "h:1", DispatchStats(), 0.05)
    hb.start()
    assert heartbeat.read(store, DISPATCHER, "log")["status"] == "running"
    hb.finish("stopped")
    assert heartbeat.read(store, DISPATCHER, "log")["status"] == "stopped"
