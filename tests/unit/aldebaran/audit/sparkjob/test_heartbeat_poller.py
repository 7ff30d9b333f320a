"""The auditor's heartbeat poller (aldebaran.audit.sparkjob.heartbeat_poller.HeartbeatPoller) on a local store, driven by a
stand-in for the py4j query (FakeQuery: the three calls the poller makes). What it publishes: `running` per
new batch with the books' figures, `idle` with the last batch's offsets only when no trigger is active (a
hung batch keeps the trigger active, so its heartbeat goes stale), and the end."""

from __future__ import annotations

import json

from aldebaran.runtime import heartbeat
from aldebaran.audit.sparkjob.heartbeat_poller import HeartbeatPoller
from aldebaran.storage.store import LocalStore


class FakeProgress:
    def __init__(self, batch: int) -> None:
        self.batch = batch

    def batchId(self) -> int:  # noqa: N802 - the py4j method's name
        return self.batch

    def json(self) -> str:
        return json.dumps({"name": "q", "batchId": self.batch, "numInputRows": 10 * self.batch,
                           "durationMs": {"triggerExecution": 100},
                           "sources": [{"description": "KafkaV2[Subscribe[trades]]",
                                        "endOffset": {"trades": {"0": self.batch}},
                                        "latestOffset": {"trades": {"0": self.batch + 5}}}]})


class FakeJsq:
    def __init__(self) -> None:
        self.progress: FakeProgress | None = None
        self.trigger_active = False
        self.first = 0  # this run's first batch

    def lastProgress(self):  # noqa: N802
        return self.progress

    def recentProgress(self):  # noqa: N802 - this run's batches up to the last (Spark keeps the last 100)
        last = self.progress.batch if self.progress else -1
        return [FakeProgress(b) for b in range(self.first, last + 1)]

    def status(self):
        active = self.trigger_active
        return type("S", (), {"json": lambda _self: json.dumps({"isTriggerActive": active})})()


class FakeQuery:
    id, runId = "qid", "rid"

    def __init__(self) -> None:
        self._jsq = FakeJsq()


def test_running_per_new_batch_idle_only_without_an_active_trigger(tmp_path, monkeypatch):
    store = LocalStore(str(tmp_path))
    books = {3: {"open_books": 7, "alerts": 1}}
    poller = HeartbeatPoller(store, "q", books.get, period_s=3600)  # polled by hand below
    query = FakeQuery()
    poller.attach(query)
    assert heartbeat.read(store, heartbeat.AUDITOR, "q")["status"] == "started"

    query._jsq.progress = FakeProgress(3)
    poller.poll()
    hb = heartbeat.read(store, heartbeat.AUDITOR, "q")
    assert (hb["status"], hb["batch_id"], hb["books"], hb["consumer_lag"]) == ("running", 3, books[3], 5)

    # No new batch, but not yet IDLE_AFTER_S: nothing new is published.
    before = hb["updated_at_ms"]
    poller.poll()
    assert heartbeat.read(store, heartbeat.AUDITOR, "q")["updated_at_ms"] == before

    # Past IDLE_AFTER_S with a trigger running (a batch that hangs): still nothing, the beat goes stale.
    clock = [poller._last_at + HeartbeatPoller.IDLE_AFTER_S + 1]
    monkeypatch.setattr("aldebaran.audit.sparkjob.heartbeat_poller.time.monotonic", lambda: clock[0])
    query._jsq.trigger_active = True
    poller.poll()
    assert heartbeat.read(store, heartbeat.AUDITOR, "q")["status"] == "running"

    # No trigger active: idle, carrying the last batch's offsets (health reads the lag from them).
    query._jsq.trigger_active = False
    poller.poll()
    hb = heartbeat.read(store, heartbeat.AUDITOR, "q")
    assert (hb["status"], hb["batch_id"], hb["kafka_end_offsets"]) == ("idle", 3, [{"trades": {"0": 3}}])

    poller.stop(error="boom")
    hb = heartbeat.read(store, heartbeat.AUDITOR, "q")
    assert (hb["status"], hb["error"]) == ("failed", "boom")


def test_batches_that_end_between_two_polls_each_count_once(tmp_path, monkeypatch):
    """Two batches within one poll period (or the poller's thread kept off the CPU): the metrics see every
    batch, from the run's recent progress, and the store gets the last one."""
    counted: list[int] = []
    monkeypatch.setattr("aldebaran.runtime.metrics_roles.auditor_batch", lambda record: counted.append(record["batch_id"]))
    store = LocalStore(str(tmp_path))
    books = {b: {"applied": b} for b in range(10, 20)}
    poller = HeartbeatPoller(store, "q", books.get, period_s=3600)  # polled by hand below
    query = FakeQuery()
    query._jsq.first = 10  # a run restarted from a checkpoint: its batch ids go on from there
    poller.attach(query)
    try:
        query._jsq.progress = FakeProgress(11)  # the run's first two batches ended before the first poll
        poller.poll()
        query._jsq.progress = FakeProgress(12)
        poller.poll()
        poller.poll()  # no new batch: nothing counted
        query._jsq.progress = FakeProgress(16)  # 13, 14 and 15 ended between two polls
        poller.poll()
        hb = heartbeat.read(store, heartbeat.AUDITOR, "q")
    finally:
        poller.stop()  # unwatches the probes (a watched auditor would be judged by later tests)
    assert counted == [10, 11, 12, 13, 14, 15, 16]
    assert (hb["batch_id"], hb["books"]) == (16, books[16])
