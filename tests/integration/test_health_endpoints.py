"""/healthz and /readyz of the real long-running processes, on the port of their /metrics (aldebaran.runtime.probes):

- a streaming dispatcher (``aldebaran dispatch --follow`` as a subprocess on real Kafka and MinIO, through
  tests/integration/fault_stall.py, whose channel sends hang while a file exists): alive and ready once
  consuming; not ready, still alive, when a send hangs with alerts in hand for the progress limit; ready
  again once the send goes through;
- the streaming auditor (the shared Spark session): ready once a batch completed; not ready when a batch
  hangs (HangingBatchFaultInjection) for ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS; ready again after;
  not ready once its query stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from aldebaran.runtime import heartbeat, metrics, paths
from aldebaran.kafka import io as kio
from tests.conftest import assert_eventually
from tests.integration.test_dispatch_failures import make_alert, publish
from tests.integration.test_metrics import dispatcher_env  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration


def probe(address: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_streaming_dispatcher_is_ready_while_it_progresses_and_alive_while_a_send_hangs(
        dispatcher_env, kafka_topics, monkeypatch, tmp_path, unique):  # noqa: F811
    ledger, _ = dispatcher_env
    monkeypatch.setenv("ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS", "3")
    name, stall = f"health-{unique}", tmp_path / "stall"
    with open(tmp_path / "dispatcher.log", "ab") as out:
        proc = subprocess.Popen([sys.executable, str(paths.ROOT / "tests" / "integration" / "fault_stall.py"),
                                 str(stall), name], env={**os.environ, "PYTHONPATH": str(paths.ROOT / "include")},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def running() -> str:
            beat = heartbeat.read(ledger.store, heartbeat.DISPATCHER, name) or {}
            assert beat.get("status") == "running" and beat.get("metrics"), beat
            return beat["metrics"]

        address = assert_eventually(running, timeout=40, message="the dispatcher runs and names its address")
        assert probe(address, "/healthz") == (200, {"status": "ok", "reason": f"dispatcher {name}: main loop running"})
        assert_eventually(lambda: probe(address, "/readyz") == (
            200, {"status": "ok", "reason": f"dispatcher {name}: 1 channel(s) consuming"}), timeout=20,
            message="ready once its channel loop polls")

        stall.touch()
        publish(kafka_topics, [make_alert(f"h-{i}") for i in range(5)])

        def stalled() -> dict:
            code, got = probe(address, "/readyz")
            assert (code, got["status"]) == (503, "stalled"), got
            return got

        got = assert_eventually(stalled, timeout=30, interval=0.5, message="not ready while the send hangs")
        assert "log: " in got["reason"] and "ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS" in got["reason"]
        assert probe(address, "/healthz")[0] == 200  # stuck in a call, not dead: a restart is the supervisor's call

        stall.unlink()
        assert_eventually(lambda: probe(address, "/readyz")[0] == 200, timeout=20, interval=0.5,
                          message="ready again once the send went through")
        assert "aldebaran_dispatcher_deliveries_total" in urllib.request.urlopen(
            f"http://{address}/metrics", timeout=5).read().decode()  # /metrics goes on, on the same port
    finally:
        stall.unlink(missing_ok=True)
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(30)
        ledger.store.delete(heartbeat.key(heartbeat.DISPATCHER, name))
    assert code == 0, (tmp_path / "dispatcher.log").read_text()[-3000:]


class HangingBatchFaultInjection:
    """The auditor's ``on_batch``: once armed, the next batch hangs (trigger active, no progress) until released."""

    def __init__(self) -> None:
        self.armed, self.released, self.hung = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, _figures: dict) -> None:
        if self.armed.is_set() and not self.released.is_set():
            self.hung.set()
            self.released.wait(60)


def test_the_auditor_is_ready_while_its_batches_progress_and_not_when_one_hangs(
        spark, kafka_topics, checkpoint, s3_prefix, unique, monkeypatch, tmp_path):
    from aldebaran.audit import parse
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.audit.sparkjob import job
    from aldebaran.settings import load
    from aldebaran.storage.store import open_store

    # Above the idle record's period (HeartbeatPoller.IDLE_AFTER_S): an idle auditor stays ready.
    monkeypatch.setenv("ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS", "12")
    monkeypatch.setenv("ALDEBARAN_METRICS_TARGETS_DIR", str(tmp_path / "targets"))
    query = f"health-{unique}"
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="processing-time", trigger_interval="1 second",
                    query_name=query, archive_prefix=f"{s3_prefix}/archive", timeout_seconds=90)
    fault, failed = HangingBatchFaultInjection(), []

    def run() -> None:
        try:
            job.run(settings, spark=spark, on_batch=fault)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failed.append(exc)

    thread = threading.Thread(target=run, name="auditor")
    thread.start()
    try:
        def ready() -> str:
            assert not failed, failed
            address = metrics.address()
            assert address, "not serving yet"
            code, got = probe(address, "/readyz")
            assert code == 200 and got["status"] == "ok", got
            return address

        # The first batch of a fresh query is the slow one (tens of seconds on a loaded two-core box).
        address = assert_eventually(ready, timeout=90, interval=0.25, message="ready after the first batch")
        assert probe(address, "/healthz") == (200, {"status": "ok", "reason": f"auditor {query}: main loop running"})

        fault.armed.set()
        trade = parse.encode(parse.request("1", 100, "Sendence", "AAPL"))
        kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(b"1", trade)])
        assert fault.hung.wait(20), "no batch reached the fault"

        def stalled() -> dict:
            code, got = probe(address, "/readyz")
            assert (code, got["status"]) == (503, "stalled"), got
            return got

        got = assert_eventually(stalled, timeout=20, interval=0.5, message="not ready while the batch hangs")
        assert "no progress for" in got["reason"] and "ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS" in got["reason"]
        assert probe(address, "/healthz")[0] == 200

        fault.released.set()
        assert_eventually(lambda: probe(address, "/readyz")[0] == 200, timeout=20, interval=0.25,
                          message="ready again once the batch completed")
    finally:
        fault.released.set()
        for active in spark.streams.active:
            if active.name == query:
                active.stop()
        thread.join(60)
        open_store().delete(heartbeat.key(heartbeat.AUDITOR, query))
    assert not failed, failed
    assert probe(address, "/readyz")[0] == 503  # the query stopped: nothing consumes
