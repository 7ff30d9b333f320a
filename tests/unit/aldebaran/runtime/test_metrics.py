"""aldebaran.runtime.metrics and aldebaran.runtime.metrics_roles: the settings, the /metrics server of a process (a real HTTP
server on 127.0.0.1), its file_sd target, and what each role exports, checked against hand-written values."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from aldebaran.runtime import metrics, paths
from aldebaran.audit.sparkjob.heartbeat_poller import consumer_lag
from aldebaran.delivery.stats import DispatchStats
from aldebaran.delivery.service import Heartbeat
from aldebaran.exceptions import ConfigError
from aldebaran.runtime.metrics import MetricsSettings, family, prune_targets
from aldebaran.runtime.metrics_roles import AuditorMetrics, LedgerCounts, dispatcher_families, lane_families
from aldebaran.settings import load


@pytest.fixture
def served(tmp_path, monkeypatch):
    """This process's server, stopped afterwards (it is process-global: no other test may hold it)."""
    metrics.stop()
    monkeypatch.setenv("ALDEBARAN_METRICS_TARGETS_DIR", str(tmp_path / "targets"))
    yield tmp_path / "targets"
    metrics.stop()


class Collector:
    """A registry's view of a function returning metric families."""

    def __init__(self, collect) -> None:
        self.collect = collect


def scrape(address: str) -> dict[str, float]:
    """sample name{labels} → value, parsed from a real GET /metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


# --- settings ------------------------------------------------------------------------------------------
def test_settings_defaults_and_ports_per_role(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_METRICS_AUDITOR_PORT", "9464")
    s = load(MetricsSettings)
    assert (s.enabled, s.bind, s.port("auditor"), s.port("dispatcher"), s.port("lane")) == (True, "127.0.0.1", 9464, 0, 0)
    assert metrics.spark_conf(s) == {}


def test_an_invalid_port_fails_naming_its_variable(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_METRICS_DISPATCHER_PORT", "70000")
    with pytest.raises(ConfigError, match="ALDEBARAN_METRICS_DISPATCHER_PORT"):
        load(MetricsSettings)


def test_spark_servlet_conf(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_METRICS_SPARK_SERVLET", "true")
    conf = metrics.spark_conf()
    assert conf["spark.metrics.conf.*.sink.prometheusServlet.class"] == "org.apache.spark.metrics.sink.PrometheusServlet"
    assert conf["spark.metrics.conf.*.sink.prometheusServlet.path"] == "/metrics/prometheus"
    assert conf["spark.sql.streaming.metricsEnabled"] == "true"


# --- the server ----------------------------------------------------------------------------------------
def test_serve_on_an_ephemeral_port_publishes_its_address_and_target(served):
    address = metrics.serve("dispatcher", "log/x")
    host, port = address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert metrics.serve("auditor", "other") == address  # once per process
    from aldebaran.runtime.heartbeat import identity

    assert identity()["metrics"] == address
    samples = scrape(address)
    assert samples["process_resident_memory_bytes{}"] > 0
    [target] = list(served.glob("*.json"))
    assert target.name == f"dispatcher-log_x-{socket.gethostname()}-{os.getpid()}.json"
    assert json.loads(target.read_text()) == [{"targets": [address], "labels": {
        "role": "dispatcher", "name": "log/x", "host": socket.gethostname(), "pid": str(os.getpid())}}]
    metrics.stop()
    assert list(served.glob("*.json")) == [] and metrics.address() is None


def test_a_taken_fixed_port_falls_back_to_an_ephemeral_one(served, monkeypatch, caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("ALDEBARAN_METRICS_LANE_PORT", str(port))
        with caplog.at_level(logging.WARNING, logger="aldebaran.runtime.metrics"):
            address = metrics.serve("lane", "fast")
    assert int(address.rsplit(":", 1)[1]) not in (0, port)
    assert f"metrics port 127.0.0.1:{port} not available" in caplog.text


def test_disabled_serves_nothing(served, monkeypatch):
    monkeypatch.setenv("ALDEBARAN_METRICS_ENABLED", "false")
    assert metrics.serve("auditor", "a") is None
    assert list(served.glob("*")) == []


def test_sources_are_read_at_scrape_time_and_same_name_families_merge(served):
    calls = []

    def source(name):
        def read():
            calls.append(name)
            return [family("gauge", "aldebaran_test_level", "doc", ["who"], [((name,), 3.5), ((name + "-x",), None)])]
        return read

    metrics.add_source("a", source("a"))
    metrics.add_source("b", source("b"))
    try:
        samples = scrape(metrics.serve("dispatcher", "t"))
    finally:
        metrics.remove_source("a")
        metrics.remove_source("b")
    assert samples["aldebaran_test_level{who=a}"] == 3.5 and samples["aldebaran_test_level{who=b}"] == 3.5
    assert "aldebaran_test_level{who=a-x}" not in samples  # None: left out, not 0
    assert sorted(calls) == ["a", "b"]


def test_prune_removes_only_dead_processes_targets_of_this_host(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    here = socket.gethostname()

    def target(name, host, pid):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([{"targets": ["127.0.0.1:1"], "labels": {"host": host, "pid": str(pid)}}]))
        return path

    gone = target("gone", here, int(dead.stdout))
    alive = target("alive", here, os.getpid())
    elsewhere = target("elsewhere", "another-host", int(dead.stdout))
    (tmp_path / "junk.json").write_text("not json")
    assert prune_targets(tmp_path, here) == [gone]
    assert alive.exists() and elsewhere.exists() and (tmp_path / "junk.json").exists()


# --- the auditor ---------------------------------------------------------------------------------------
def test_consumer_lag_sums_latest_minus_end_over_kafka_partitions():
    sources = [
        {"description": "KafkaV2[Subscribe[t]]", "endOffset": {"t": {"0": 10, "1": 5}},
         "latestOffset": {"t": {"0": 15, "1": 5}}},
        {"description": "KafkaV2[Subscribe[u]]", "endOffset": '{"u": {"0": 1}}', "latestOffset": '{"u": {"0": 4}}'},
        {"description": "RateStreamV2[rowsPerSecond=1]", "endOffset": 100, "latestOffset": 200},
    ]
    assert consumer_lag(sources) == 8
    assert consumer_lag([{"description": "RateStreamV2", "endOffset": 1}]) is None


def test_auditor_metrics_from_two_batches():
    reg = CollectorRegistry()
    m = AuditorMetrics(reg)
    books = {"open_books": 7, "alert_kinds": {"OVERFILL": 2, "ORPHAN": 1}, "dlq": 1, "applied": 20, "duplicates": 2,
             "misrouted": 3, "opened": 8, "expired": 1, "misrouted_share_recent": 0.12}
    m.batch({"query": "q", "batch_id": 4, "input_rows": 26, "input_rows_per_second": 100.0,
             "processed_rows_per_second": 250.0, "batch_duration_ms": 300, "consumer_lag": 40, "books": books})
    m.batch({"query": "q", "batch_id": 5, "input_rows": 1, "batch_duration_ms": 1500, "consumer_lag": 0,
             "books": {**books, "open_books": 6, "alert_kinds": {"OVERFILL": 1}}})
    m.batch({"query": "q", "batch_id": 6, "input_rows": 3, "batch_duration_ms": None, "books": {}})

    def value(name, **labels):
        return reg.get_sample_value(name, {"query": "q", **labels})

    assert value("aldebaran_auditor_batches_total") == 3
    assert value("aldebaran_auditor_input_rows_total") == 30
    assert value("aldebaran_auditor_batch_duration_seconds_count") == 2
    assert value("aldebaran_auditor_batch_duration_seconds_sum") == pytest.approx(1.8)
    assert value("aldebaran_auditor_batch_duration_seconds_bucket", le="0.5") == 1
    assert value("aldebaran_auditor_consumer_lag") == 0
    assert value("aldebaran_auditor_batch_id") == 6
    assert value("aldebaran_auditor_open_books") == 6
    assert value("aldebaran_auditor_alerts_total", kind="OVERFILL") == 3
    assert value("aldebaran_auditor_alerts_total", kind="ORPHAN") == 1
    assert value("aldebaran_auditor_dlq_total") == 2
    assert value("aldebaran_auditor_events_total", outcome="applied") == 40
    assert value("aldebaran_auditor_events_total", outcome="misrouted") == 6
    assert value("aldebaran_auditor_books_opened_total") == 16
    assert value("aldebaran_auditor_misrouted_share") == 0.12
    assert value("aldebaran_auditor_input_rows_per_second") == 100.0  # the last batch that reported one


# --- a dispatcher --------------------------------------------------------------------------------------
class FakeIndexLedger:
    """A ledger's index listing, counted (a fake: the real one is in tests/integration/test_metrics.py)."""

    def __init__(self) -> None:
        self.writes, self.listings = 12, 0
        self.entries = {("dead", "log"): ["a1"], ("in_doubt", "sms"): ["b1", "b2"]}

    def indexed(self, kind, channel):
        self.listings += 1
        return self.entries.get((kind, channel), [])


def test_dispatcher_families_from_stats_and_the_last_heartbeat():
    stats = DispatchStats(alerts=50, runs=4, malformed=1)
    stats.bump("sent", "log", 40)
    stats.bump("already", "log", 2)
    stats.bump("in_doubt", "sms", 3)
    stats.bump("retried", "sms", 5)
    ledger = FakeIndexLedger()
    hb = Heartbeat(None, "log-sms", ["log", "sms"], "me", stats, 5.0, ledger)
    hb.last = {"at": 1000.0, "partitions": {
        "log": {0: {"settled": 10, "position": 14, "high": 20, "buffered": 4, "broken": None},
                1: {"settled": None, "position": None, "high": 3, "buffered": 0, "broken": "fenced"}},
        "sms": {}},
        "progress": {"log": {"pending": True, "progress_at": 990.0}, "sms": {"pending": False, "progress_at": None}}}
    clock = [0.0]
    counts = LedgerCounts(ledger, ["log", "sms"], refresh=30, clock=lambda: clock[0])
    reg = CollectorRegistry()
    reg.register(Collector(lambda: dispatcher_families(hb, counts, now=1004.0)))

    def value(name, **labels):
        return reg.get_sample_value(name, {"dispatcher": "log-sms", **labels})

    assert value("aldebaran_dispatcher_deliveries_total", channel="log", outcome="sent") == 40
    assert value("aldebaran_dispatcher_deliveries_total", channel="log", outcome="already_recorded") == 2
    assert value("aldebaran_dispatcher_deliveries_total", channel="sms", outcome="in_doubt") == 3
    assert value("aldebaran_dispatcher_deliveries_total", channel="sms", outcome="sent") == 0
    assert value("aldebaran_dispatcher_retries_total", channel="sms") == 5
    assert value("aldebaran_dispatcher_alerts_read_total") == 50
    assert value("aldebaran_dispatcher_ledger_writes_total") == 12
    assert value("aldebaran_dispatcher_lag", channel="log", partition="0") == 10
    assert value("aldebaran_dispatcher_lag", channel="log", partition="1") is None  # nothing settled yet
    assert value("aldebaran_dispatcher_in_flight", channel="log") == 4
    assert value("aldebaran_dispatcher_partitions", channel="log") == 2
    assert value("aldebaran_dispatcher_broken_partitions", channel="log") == 1
    assert value("aldebaran_dispatcher_pending", channel="log") == 1
    assert value("aldebaran_dispatcher_progress_age_seconds", channel="log") == 14
    assert value("aldebaran_dispatcher_progress_age_seconds", channel="sms") is None
    assert value("aldebaran_dispatcher_ledger_records", channel="log", state="dead") == 1
    assert value("aldebaran_dispatcher_ledger_records", channel="sms", state="in_doubt") == 2
    assert value("aldebaran_dispatcher_ledger_records", channel="sms", state="retry") == 0
    listed = ledger.listings
    reg.get_sample_value("aldebaran_dispatcher_lag", {})  # another scrape within the refresh period
    assert ledger.listings == listed
    clock[0] = 31.0
    reg.get_sample_value("aldebaran_dispatcher_lag", {})
    assert ledger.listings == listed + 6  # 2 channels × retry, dead, in_doubt


def test_dispatcher_counters_are_read_safely_while_channels_bump_them():
    stats = DispatchStats()
    hb = Heartbeat(None, "many", [f"c{i}" for i in range(50)], "me", stats, 5.0)
    stop = threading.Event()

    def bump():
        i = 0
        while not stop.is_set():
            stats.bump("sent", f"c{i % 50}")
            i += 1

    t = threading.Thread(target=bump)
    t.start()
    try:
        for _ in range(200):
            dispatcher_families(hb)
    finally:
        stop.set()
        t.join()


# --- the lane keeper -----------------------------------------------------------------------------------
def test_lane_families_from_the_keepers_last_heartbeat():
    keeper = SimpleNamespace(name="fast", launches=3, last_body={
        "status": "running", "at": 500.0,
        "lane": {"query": {"active": True, "at": 498.0, "batch_id": 12},
                 "generation": {"started_at": 400.0}},
        "reconcile": {"counts": {"fast": 10, "exact": 9, "confirmed": 8, "confirmed_late": 1, "unconfirmed": 1,
                                 "missed": 2, "repeats": 4},
                      "pending_fast": 2, "pending_exact": 0, "oldest_pending_fast_ms": 495_000}})
    reg = CollectorRegistry()
    reg.register(Collector(lambda: lane_families(keeper, now=500.0)))

    def value(name, **labels):
        return reg.get_sample_value(name, {"lane": "fast", **labels})

    assert value("aldebaran_lane_status", status="running") == 1 and value("aldebaran_lane_status", status="failed") == 0
    assert value("aldebaran_lane_query_active") == 1
    assert value("aldebaran_lane_driver_report_age_seconds") == 2
    assert value("aldebaran_lane_batch_id") == 12
    assert value("aldebaran_lane_generation_age_seconds") == 100
    assert value("aldebaran_lane_launches_total") == 3
    assert value("aldebaran_lane_alerts_total", source="exact") == 9
    assert value("aldebaran_lane_reconciled_total", verdict="missed") == 2
    assert value("aldebaran_lane_unconfirmed") == 1
    assert value("aldebaran_lane_pending", source="fast") == 2
    assert value("aldebaran_lane_oldest_pending_fast_age_seconds") == 5
    keeper.last_body = None  # before the first beat: only what is known
    assert reg.get_sample_value("aldebaran_lane_launches_total", {"lane": "fast"}) == 3
    assert reg.get_sample_value("aldebaran_lane_query_active", {"lane": "fast"}) is None


# --- the dashboard -------------------------------------------------------------------------------------
def exported_sample_names() -> set[str]:
    """Every sample name the three roles export (a histogram's _bucket/_sum/_count, a counter's _total)."""
    reg = CollectorRegistry()
    AuditorMetrics(reg).batch({"query": "q", "batch_id": 1, "input_rows": 1, "input_rows_per_second": 1.0,
                               "processed_rows_per_second": 1.0, "batch_duration_ms": 1, "consumer_lag": 0,
                               "books": {"open_books": 1, "alert_kinds": {"OVERFILL": 1}, "dlq": 0, "applied": 1,
                                         "duplicates": 0, "misrouted": 0, "opened": 1, "expired": 0,
                                         "misrouted_share_recent": 0.0}})
    hb = Heartbeat(None, "d", ["log"], "me", DispatchStats(), 5.0, FakeIndexLedger())
    hb.last = {"at": 1.0, "partitions": {"log": {0: {"settled": 1, "position": 1, "high": 1, "buffered": 0}}},
               "progress": {"log": {"pending": False, "progress_at": 1.0}}}
    keeper = SimpleNamespace(name="fast", launches=1, last_body={
        "status": "running", "at": 1.0, "lane": {"query": {"active": True, "at": 1.0, "batch_id": 1},
                                                 "generation": {"started_at": 1.0}},
        "reconcile": {"counts": dict.fromkeys(("fast", "exact", "confirmed", "confirmed_late", "unconfirmed", "missed",
                                                "repeats"), 0), "pending_fast": 0, "pending_exact": 0, "oldest_pending_fast_ms": 1}})
    reg.register(Collector(lambda: dispatcher_families(hb, LedgerCounts(hb.ledger, ["log"], 30)) + lane_families(keeper)))
    return {s.name for fam in reg.collect() for s in fam.samples}


def test_the_dashboard_queries_only_metrics_that_exist():
    import re

    root = paths.ROOT
    dashboard = json.loads((root / "docs" / "grafana" / "aldebaran.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {n for e in exprs for n in re.findall(r"\baldebaran_[a-z_]+", e)}
    assert used and used - exported_sample_names() == set()
    variables = [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert {re.search(r"\((aldebaran_[a-z_]+),", v).group(1) for v in variables} <= exported_sample_names()
