"""The lane keeper rotates the lane's checkpoint generation (its state is bounded that way: the lane never
expires a book): `aldebaran lanes run` on real Kafka and the Spark 4.3 runtime, rotated by SIGUSR1 (what
ALDEBARAN_LANES_ROTATE_SECONDS does on age: tests/unit/aldebaran/lanes/test_lane_keeper.py; here once, at a known moment, as a
loaded machine takes a minute to start a lane). The first generation runs, then the keeper starts a second one
from the latest trades, and stops the first and removes its checkpoint only once the second reads (make before
break). An overfilled order sent every second from before the rotation until after the first generation has
stopped alerts on the fast topic, every one: no gap. SIGTERM stops keeper and lane."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from aldebaran.audit import parse
from aldebaran.runtime import heartbeat, paths
from aldebaran.audit.findings import alert_id
from aldebaran.kafka import io as kio
from aldebaran.lanes import keeper
from aldebaran.lanes.settings import LaneSettings
from aldebaran.settings import load
from aldebaran_capacity import loadgen
from tests.conftest import assert_eventually


def test_the_keeper_rotates_the_lane_onto_a_fresh_checkpoint(kafka_topics, s3_prefix, tmp_path, monkeypatch, unique):
    env = {
        "ALDEBARAN_LANES_NAME": f"rot-{unique}",
        "ALDEBARAN_LANES_CHECKPOINT": str(tmp_path / "checkpoint"),
        "ALDEBARAN_LANES_CHECKPOINT_INTERVAL": "10 seconds",
        "ALDEBARAN_LANES_ROTATE_SECONDS": "0",
        "ALDEBARAN_LANES_ROTATION_OVERLAP_SECONDS": "5",
        "ALDEBARAN_LANES_HEARTBEAT_SECONDS": "1",
        "ALDEBARAN_LANES_START_TIMEOUT_SECONDS": "420",  # a loaded 2-core box took over 180 s once
        "ALDEBARAN_LANES_RECORDS_PREFIX": f"{s3_prefix}/lanes",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = load(LaneSettings)
    store = keeper.lane_store()
    with open(tmp_path / "keeper.log", "wb") as out:
        proc = subprocess.Popen([str(paths.venv_bin("aldebaran")), "lanes", "run"], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def generation(rotated: bool) -> dict:
            assert proc.poll() is None, (tmp_path / "keeper.log").read_text()[-3000:]
            hb = heartbeat.read(store, heartbeat.LANE, cfg.name) or {}
            gen = (hb.get("lane") or {}).get("generation") or {}
            assert hb.get("status") == "running" and gen, hb.get("status")
            assert (first is not None and gen["name"] != first["name"]) == rotated, gen
            return gen

        first = None
        first = assert_eventually(lambda: generation(False), timeout=450, interval=1, message="the first generation")
        producer = kio.producer(kafka_topics)
        probes: list[str] = []

        def fast_alert_ids() -> set[str]:
            return {json.loads(m.value())["alert_id"]
                    for m in kio.read_topic(kafka_topics, kafka_topics.fast_alerts_topic, idle=1.0)}

        def send_probe() -> None:
            order = f"probe-{len(probes)}"
            probes.append(order)
            kio.produce_all(producer, kafka_topics.trades_topic, [
                (order, parse.encode(parse.request(order, 1, "probe", "P"))),
                (order, parse.encode(parse.purchase(f"{order}-p", order, 2, "probe", "P")))])

        def probe_alerted():
            send_probe()
            assert {alert_id("OVERFILL", o) for o in probes} & fast_alert_ids()

        # The first generation reads from the latest offsets as its query resolves them: probe until one alerts.
        assert_eventually(probe_alerted, timeout=180, interval=3, message="a probe's alert before the rotation")
        across = len(probes)  # from here on, one probe a second through the rotation: each must alert
        stop = threading.Event()

        def keep_probing() -> None:
            while not stop.wait(1.0):
                send_probe()

        prober = threading.Thread(target=keep_probing, daemon=True)
        prober.start()
        try:
            os.kill(proc.pid, signal.SIGUSR1)
            second = assert_eventually(lambda: generation(True), timeout=450, interval=1,
                                       message="the second generation running")
            assert Path(second["checkpoint"]).parent == tmp_path / "checkpoint"
            assert_eventually(lambda: not Path(first["checkpoint"]).exists(), timeout=120, interval=1,
                              message="the first generation stopped and its checkpoint removed")
            time.sleep(5)  # probes after the first generation stopped: only the second can alert on them
        finally:
            stop.set()
            prober.join(10)
        sent = probes[across:]
        assert len(sent) >= 10, sent

        def every_probe_alerted():
            missing = {alert_id("OVERFILL", o) for o in sent} - fast_alert_ids()
            assert not missing, f"{len(missing)} of {len(sent)} probes sent across the rotation never alerted"

        assert_eventually(every_probe_alerted, timeout=120, interval=3, message="every probe across the rotation")
        recs = list(loadgen.records(loadgen.CHALLENGE_EXAMPLE))
        kio.produce_all(producer, kafka_topics.trades_topic, [(r.key, r.value) for r in recs])
        assert_eventually(lambda: alert_id("OVERFILL", "1") in fast_alert_ids(), timeout=120, interval=2,
                          message="the challenge's alert after the rotation")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(60)
        store.delete(heartbeat.key(heartbeat.LANE, cfg.name))
    assert rc == 0, (tmp_path / "keeper.log").read_text()[-3000:]
    hb_log = (tmp_path / "keeper.log").read_text()
    assert "rotating: generation" in hb_log and "reads since" in hb_log
