"""/metrics of the real long-running processes (issue 27, item 4), scraped over HTTP while they run:

- a streaming dispatcher (``aldebaran dispatch --follow``, a subprocess on real Kafka and MinIO) names its
  metrics address in its heartbeat and its file_sd target; its delivery counter grows by exactly the alerts
  produced, its lag falls back to 0, and its target file is gone after a clean stop;
- the streaming auditor (the shared Spark session, a processing-time query) counts its batches, input rows,
  applied events and alerts as trades arrive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from aldebaran.runtime import heartbeat, metrics, paths
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.kafka import io as kio
from aldebaran.settings import load
from tests.conftest import assert_eventually
from tests.integration.test_dispatch_failures import make_alert, publish

pytestmark = pytest.mark.integration


def scrape(address: str) -> dict[str, float]:
    """``name{k=v,...}`` → value, from a real GET (OpenMetrics asked for, as Prometheus does)."""
    req = urllib.request.Request(f"http://{address}/metrics",
                                 headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"] = s.value
    return out


@pytest.fixture
def dispatcher_env(kafka_topics, s3_prefix, monkeypatch, unique, tmp_path):
    env = {
        "ALDEBARAN_CHANNELS": "log",
        "AIRFLOW_CONN_ALDEBARAN_LOG": json.dumps({"conn_type": "log", "extra": {"path": str(tmp_path / "log.jsonl")}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        "ALDEBARAN_DELIVERY_GROUP": f"m-{unique}",
        "ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS": "0.5",
        "ALDEBARAN_METRICS_TARGETS_DIR": str(tmp_path / "targets"),
        "ALDEBARAN_METRICS_LEDGER_REFRESH_SECONDS": "1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Ledger.from_settings(load(DeliverySettings)), tmp_path / "targets"


def test_a_streaming_dispatcher_serves_its_deliveries_and_lag(dispatcher_env, kafka_topics, tmp_path, unique):
    ledger, targets = dispatcher_env
    name = f"metrics-{unique}"
    with open(tmp_path / "dispatcher.log", "ab") as out:
        proc = subprocess.Popen([str(paths.venv_bin("aldebaran")), "dispatch", "--follow", "--name", name],
                                env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    sent = f'aldebaran_dispatcher_deliveries_total{{channel=log,dispatcher={name},outcome=sent}}'
    try:
        def running() -> str:
            beat = heartbeat.read(ledger.store, heartbeat.DISPATCHER, name) or {}
            assert beat.get("status") == "running" and beat.get("metrics"), beat
            return beat["metrics"]

        address = assert_eventually(running, timeout=60, message="the dispatcher runs and names its metrics")
        assert address.startswith("127.0.0.1:")
        [target] = targets.glob("*.json")
        assert json.loads(target.read_text())[0]["targets"] == [address]
        assert_eventually(lambda: scrape(address).get(sent) == 0, timeout=30, message="the counter starts at 0")

        publish(kafka_topics, [make_alert(f"m-{i}") for i in range(30)])

        def delivered():
            samples = scrape(address)
            assert samples.get(sent) == 30, samples.get(sent)
            lags = {k: v for k, v in samples.items() if k.startswith("aldebaran_dispatcher_lag{")}
            assert lags and set(lags.values()) == {0}, lags  # every partition settled up to its high watermark
            assert samples.get(f"aldebaran_dispatcher_in_flight{{channel=log,dispatcher={name}}}") == 0
            assert samples.get(f"aldebaran_dispatcher_ledger_records{{channel=log,dispatcher={name},state=dead}}") == 0
            assert samples.get(f"aldebaran_dispatcher_alerts_read_total{{dispatcher={name}}}") == 30
            return samples

        samples = assert_eventually(delivered, timeout=45, interval=0.5, message="30 deliveries on /metrics")
        assert samples[f"aldebaran_dispatcher_ledger_writes_total{{dispatcher={name}}}"] >= 1
        assert samples["process_resident_memory_bytes{}"] > 0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(30)
        ledger.store.delete(heartbeat.key(heartbeat.DISPATCHER, name))
    assert code == 0
    assert list(targets.glob("*.json")) == []  # removed at exit


def test_the_auditor_counts_batches_rows_and_alerts_as_trades_arrive(spark, kafka_topics, checkpoint, s3_prefix,
                                                                    unique, monkeypatch, tmp_path):
    from aldebaran.audit import parse
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.audit.sparkjob import job
    from aldebaran.storage.store import open_store

    monkeypatch.setenv("ALDEBARAN_METRICS_TARGETS_DIR", str(tmp_path / "targets"))
    query = f"metrics-{unique}"
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="processing-time", trigger_interval="1 second",
                    query_name=query, archive_prefix=f"{s3_prefix}/archive", timeout_seconds=90)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            job.run(settings, spark=spark)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failed.append(exc)

    thread = threading.Thread(target=run, name="auditor")
    thread.start()
    q = f"query={query}"
    try:
        def first_batch() -> dict:
            assert not failed, failed
            address = metrics.address()
            assert address, "not serving yet"
            samples = scrape(address)
            assert samples.get(f"aldebaran_auditor_batches_total{{{q}}}", 0) >= 1
            return samples

        before = assert_eventually(first_batch, timeout=60, interval=0.5, message="the auditor's first batch")
        beat = heartbeat.read(open_store(), heartbeat.AUDITOR, query)
        assert beat["metrics"] == metrics.address()

        e = parse.encode
        trades = [e(parse.request("1", 100, "Sendence", "AAPL")), e(parse.purchase("2", "1", 90, "Sendence", "AAPL")),
                  e(parse.purchase("3", "1", 30, "Sendence", "AAPL")), e(parse.request("4", 10, "Sendence", "IBM"))]
        kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                             [(b"1", t) for t in trades[:3]] + [(b"4", trades[3])])

        def audited() -> dict:
            assert not failed, failed
            samples = scrape(metrics.address())
            assert samples.get(f"aldebaran_auditor_events_total{{outcome=applied,{q}}}", 0) >= 4
            assert samples.get(f"aldebaran_auditor_alerts_total{{kind=OVERFILL,{q}}}") == 1
            # Batch and row counts come from the query's progress event, which Spark posts to the listener
            # after the batch's own counters (events, alerts) are set: wait for them too, not only the first.
            assert samples[f"aldebaran_auditor_batches_total{{{q}}}"] > before[f"aldebaran_auditor_batches_total{{{q}}}"]
            rows = f"aldebaran_auditor_input_rows_total{{{q}}}"
            assert samples.get(rows, 0) >= before.get(rows, 0) + 4
            return samples

        after = assert_eventually(audited, timeout=45, interval=0.5, message="the trades on /metrics")
        assert after[f"aldebaran_auditor_open_books{{{q}}}"] >= 2
        assert after[f"aldebaran_auditor_batch_duration_seconds_count{{{q}}}"] >= 2
        assert after[f"aldebaran_auditor_consumer_lag{{{q}}}"] >= 0
        assert after[f"aldebaran_auditor_dlq_total{{{q}}}"] == 0
    finally:
        for active in spark.streams.active:
            if active.name == query:
                active.stop()
        thread.join(60)
        open_store().delete(heartbeat.key(heartbeat.AUDITOR, query))
    assert not failed, failed


def test_one_setting_each_starts_the_spark_ui_and_its_prometheus_servlet_under_spark_submit(tmp_path):
    """ALDEBARAN_SPARK_UI reaches a session built under a real spark-submit (the auditor's way), and
    ALDEBARAN_METRICS_SPARK_SERVLET adds Spark's PrometheusServlet with the streaming query's metrics."""
    from aldebaran.runtime import spark as sparkmod

    out = tmp_path / "ui.json"
    env = {**sparkmod.spark_env(), "ALDEBARAN_SPARK_UI": "true", "ALDEBARAN_METRICS_SPARK_SERVLET": "true",
           "PYTHONPATH": str(paths.ROOT / "include")}
    proc = subprocess.run([sparkmod.spark_submit(), "--master", "local[1]",
                           str(paths.ROOT / "tests" / "integration" / "metrics_ui_app.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["ui_enabled"] == "true" and found["ui"].startswith("http://127.0.0.1:")
    # The driver's metrics, named by the application (spark.metrics.namespace), with the query's rates.
    assert "metrics_aldebaran_metrics_ui_driver_spark_streaming_metricsui_inputRate_total" in found["/metrics/prometheus"]
    assert 'application_name="aldebaran-metrics-ui"' in found["/metrics/executors/prometheus"]
