"""A lane that always comes back (issue 38 item 4): `aldebaran lanes run` on real Kafka and the Spark 4.3 runtime
runs on a topic with trades, is stopped, and the topic is deleted and recreated with fewer trades (what the
demo's reset did). Restarted, the keeper finds the checkpoint's offsets above the new topic's high
watermarks, moves the checkpoint under abandoned/, reports the gap (heartbeat, `aldebaran lanes status`) and
starts a fresh generation from the earliest trade still there: the new topic's overfilled order alerts on the
fast topic. Without it the query dies on OffsetOutOfRangeException at every restart (failOnDataLoss does not
apply in real-time mode: aldebaran.lanes.gap)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from aldebaran.audit import parse
from aldebaran.runtime import heartbeat, paths
from aldebaran.audit.findings import alert_id
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.lanes import gap, keeper, status
from aldebaran.lanes.settings import LaneSettings
from aldebaran.settings import load
from tests.conftest import assert_eventually


def _start(tmp_path: Path, run: int) -> tuple[subprocess.Popen, Path]:
    log_path = tmp_path / f"keeper-{run}.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([str(paths.venv_bin("aldebaran")), "lanes", "run"], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log_path


def _stop(proc: subprocess.Popen, log_path: Path) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(90) == 0, log_path.read_text()[-3000:]


def _recreate(kafka, topic: str) -> None:
    kadmin.delete_topics(kafka, [topic])
    client = kadmin.admin(kafka)
    deadline = time.monotonic() + 60
    while topic in client.list_topics(timeout=10).topics:  # a deleted topic stays listed for a moment
        assert time.monotonic() < deadline, f"{topic} still listed a minute after its deletion"
        time.sleep(0.5)
    assert kadmin.ensure_topics(kafka, [topic]) == [topic]


def test_a_lane_whose_topic_was_recreated_restarts_fresh_and_reports_the_gap(kafka_topics, s3_prefix, tmp_path,
                                                                              monkeypatch, unique):
    env = {
        "ALDEBARAN_LANES_NAME": f"gap-{unique}",
        "ALDEBARAN_LANES_CHECKPOINT": str(tmp_path / "checkpoint"),
        "ALDEBARAN_LANES_CHECKPOINT_INTERVAL": "10 seconds",
        "ALDEBARAN_LANES_STARTING_OFFSETS": "latest",
        "ALDEBARAN_LANES_ROTATE_SECONDS": "0",
        "ALDEBARAN_LANES_HEARTBEAT_SECONDS": "1",
        "ALDEBARAN_LANES_START_TIMEOUT_SECONDS": "420",  # a loaded 2-core box took over 180 s once
        "ALDEBARAN_LANES_RECORDS_PREFIX": f"{s3_prefix}/lanes",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = load(LaneSettings)
    store = keeper.lane_store()
    topic = kafka_topics.trades_topic
    producer = kio.producer(kafka_topics)
    # 60 orders' requests, on both partitions: the lane's first checkpoint starts at their end ("latest").
    kio.produce_all(producer, topic, [(f"old-{i}", parse.encode(parse.request(f"old-{i}", 10, "c", "S")))
                                           for i in range(60)])

    def beat() -> dict:
        return heartbeat.read(store, heartbeat.LANE, cfg.name) or {}

    def running(proc, log_path) -> dict:
        assert proc.poll() is None, log_path.read_text()[-3000:]
        hb = beat()
        assert hb.get("status") == "running", hb.get("status")
        return hb

    proc, log1 = _start(tmp_path, 1)
    try:
        first = assert_eventually(lambda: running(proc, log1), timeout=450, interval=1,
                                  message="the first run")["lane"]["generation"]

        def logged() -> dict:
            found = gap.checkpoint_offsets(first["checkpoint"], topic)
            assert found and all(o > 0 for o in found.values()), found
            return found

        old_offsets = assert_eventually(logged, timeout=120, interval=1, message="the checkpoint's offsets")
    finally:
        _stop(proc, log1)

    # The demo's reset, as it was: the topic recreated, the lane's checkpoint and heartbeat left alone. The new
    # topic has one overfilled order (2 trades, one partition): fewer than the checkpoint's offsets.
    _recreate(kafka_topics, topic)
    kio.produce_all(producer, topic, [
        ("new-1", parse.encode(parse.request("new-1", 1, "c", "S"))),
        ("new-1", parse.encode(parse.purchase("new-1-p", "new-1", 2, "c", "S")))])

    proc, log2 = _start(tmp_path, 2)
    try:
        hb = assert_eventually(lambda: running(proc, log2), timeout=450, interval=1, message="the restarted lane")
        generation = hb["lane"]["generation"]
        assert generation["name"] != first["name"]
        gaps = hb["gaps"]
        assert gaps["count"] == 1 and gaps["last"]["recreated"] and gaps["last"]["generation"] == first["name"]
        assert {p["partition"]: p["checkpoint"] for p in gaps["last"]["partitions"]} == old_offsets
        assert "topic recreated: checkpoint at" in gaps["last"]["describe"]
        assert not Path(first["checkpoint"]).exists()
        assert Path(gaps["last"]["abandoned"]).parent == tmp_path / "checkpoint" / "abandoned"
        assert (Path(gaps["last"]["abandoned"]) / "offsets").is_dir()  # kept, not deleted

        def fast_alert() -> None:
            assert proc.poll() is None, log2.read_text()[-3000:]
            got = {json.loads(m.value())["alert_id"]
                   for m in kio.read_topic(kafka_topics, kafka_topics.fast_alerts_topic, idle=1.0)}
            assert alert_id("OVERFILL", "new-1") in got, got

        # From the earliest trade of the new topic: its order alerts, though it was written before the restart.
        assert_eventually(fast_alert, timeout=180, interval=3, message="the new topic's alert")
        shown = status.render(status.collect(lanes=cfg, exact=("q", None)))
        assert "gaps         1 checkpoint gap(s)" in shown, shown
        assert "checkpoint gap" in log2.read_text()
    finally:
        _stop(proc, log2)
        store.delete(heartbeat.key(heartbeat.LANE, cfg.name))
