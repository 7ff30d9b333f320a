"""The heartbeat writer (aldebaran.heartbeat) and the dispatcher's heartbeat body (aldebaran.delivery.service):
beats come from a thread whatever the work loop does, the final word is never overwritten, and the body
carries each channel's progress (settled offsets, pending work, when it last moved). No services: a local
directory store and fake workers (named as such)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

from aldebaran.delivery.dispatcher import DispatchStats
from aldebaran.delivery.service import Heartbeat, heartbeat_key
from aldebaran.exceptions import ObjectStoreError
from aldebaran.heartbeat import Beater, Progress, publish
from aldebaran.storage import open_store


def read(store, key):
    return json.loads(store.get(key).body)


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

    beater = Beater(store, "hb.json", body, period=0.05, what="test").start()
    busy = threading.Event()
    busy.wait(0.4)  # the "work loop" never calls anything
    beater.finish({"status": "stopped"})
    assert n["beats"] >= 4
    assert read(store, "hb.json") == {"status": "stopped"}


def test_the_final_body_is_not_overwritten_by_a_late_periodic_beat(tmp_path):
    store = open_store(str(tmp_path))
    beater = Beater(store, "hb.json", lambda: {"status": "running"}, period=0.01, what="test").start()
    beater.finish({"status": "failed"})
    time.sleep(0.05)
    assert read(store, "hb.json")["status"] == "failed"


class FailingStoreFake:
    """Failure injection: every write fails as an unreachable object store does."""

    def put(self, key, body, content_type="application/json"):
        raise ObjectStoreError("connection refused")

    def uri(self, key):
        return f"fake://{key}"


def test_a_failed_write_is_logged_not_raised(caplog):
    assert publish(FailingStoreFake(), "hb.json", {"status": "running"}, "test") is False
    assert "heartbeat not written to fake://hb.json" in caplog.text


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
    assert read(store, heartbeat_key("log"))["status"] == "running"
    hb.finish("stopped")
    assert read(store, heartbeat_key("log"))["status"] == "stopped"
