"""The low-latency lane's pieces without real-time mode: the crossing rule on hand-made book updates (one per
event, as the lane's aggregation emits them), the alert record and its id, the 4.3 runtime's paths and the
lane's spark-submit command. The lane itself, in real-time mode on Kafka: tests/integration/test_realtime_lane.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from aldebaran.audit import parse as events
from aldebaran.runtime import paths
from aldebaran.runtime import spark as sparkmod
from aldebaran.audit.findings import alert_id
from aldebaran.exceptions import SetupError
from aldebaran.lanes import launch, realtime

PR, P = events.REQUEST, events.PURCHASE
SCHEMA = ("order_id string, requested long, request_client string, request_stock string, purchased long, "
          "purchase_count long, first_purchase struct<seq: long, client: string, stock: string>, "
          "last struct<seq: long, event_id: string, event_ts: long, kind: string, shares: long>")


def _update(order, requested, purchased, count, last, first=None):
    """One book update: the book after `last` = (seq, event_id, kind, shares) was applied."""
    seq, event_id, kind, shares = last
    client = "Sendence" if requested is not None else None
    return (order, requested, client, "AAPL" if client else None, purchased, count,
            None if first is None else (first, "Acme", "MSFT"), (seq, event_id, 1_000 + seq, kind, shares))


# Every update of each order's book, in order, as the aggregation emits them one per event.
UPDATES = [
    # The challenge: request 1 for 100; purchases 90, 30, 10 → over at the 30, and only there.
    _update("1", 100, 0, 0, (0, "1", PR, 100)),
    _update("1", 100, 90, 1, (1, "2", P, 90), first=1),
    _update("1", 100, 120, 2, (2, "3", P, 30), first=1),
    _update("1", 100, 130, 3, (3, "4", P, 10), first=1),
    # Purchases first: over when the request arrives (the trigger is the request).
    _update("7", None, 40, 1, (0, "71", P, 40), first=0),
    _update("7", None, 70, 2, (1, "72", P, 30), first=0),
    _update("7", 60, 70, 2, (2, "7", PR, 60), first=0),
    _update("7", 60, 75, 3, (3, "73", P, 5), first=0),
    # Equal is not over; zero shares never push a book over.
    _update("8", 50, 50, 1, (1, "81", P, 50), first=1),
    _update("9", 0, 0, 1, (1, "91", P, 0), first=1),
]


def test_an_order_crosses_once_at_the_event_that_puts_it_over(spark):
    rows = realtime.crossings(spark.createDataFrame(UPDATES, SCHEMA)).collect()
    assert sorted((r.order_id, r["last"]["event_id"]) for r in rows) == [("1", "3"), ("7", "7")]


def test_the_alert_record_has_the_exact_lanes_id_and_the_contract_fields(spark):
    records = realtime.alert_records(realtime.crossings(spark.createDataFrame(UPDATES, SCHEMA))).collect()
    alerts = {r.key: json.loads(r.value) for r in records}
    assert set(alerts) == {alert_id("OVERFILL", "1"), alert_id("OVERFILL", "7")}
    one = alerts[alert_id("OVERFILL", "1")]
    assert {k: one[k] for k in ("alert_id", "kind", "order_id", "client", "stock", "requested", "purchased",
                                "purchase_count", "trigger_event_id", "trigger_event_ts", "lane")} == {
        "alert_id": alert_id("OVERFILL", "1"), "kind": "OVERFILL", "order_id": "1", "client": "Sendence",
        "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2, "trigger_event_id": "3",
        "trigger_event_ts": 1_002, "lane": "realtime"}
    assert one["message"] == "purchased 120 shares of 100 requested in 2 purchases"
    assert int(one["detected_at"]) > 1_700_000_000_000  # the wall clock per record, not the batch's start


def test_the_runtime_venv_is_found_by_the_key_setup_gives_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CACHE", str(tmp_path))
    pins = paths.ROOT / "setup" / "runtimes" / "spark-4.3.txt"
    # scripts/setup.sh: short_hash "$req" <("$PYTHON" -V)
    version = subprocess.run(["python3", "-V"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(pins.read_bytes() + version.encode()).hexdigest()[:12]
    venv = tmp_path / "runtimes" / f"spark-4.3-{key}"
    with pytest.raises(SetupError, match="make setup"):
        paths.spark_runtime("4.3")
    (venv / "lib" / "python3.11" / "site-packages" / "pyspark" / "bin").mkdir(parents=True)
    (venv / ".complete").touch()
    assert paths.spark_runtime("4.3") == venv
    with pytest.raises(SetupError, match="no Spark runtime"):
        paths.spark_runtime("3.5")

    env = sparkmod.spark_env("4.3")
    assert env["SPARK_HOME"] == str(venv / "lib" / "python3.11" / "site-packages" / "pyspark")
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == str(venv / "bin" / "python")
    assert env["PYTHONPATH"].split(":")[0] == str(paths.ROOT / "include")

    monkeypatch.setattr(sparkmod, "connector_jars", lambda s3a=False: ["/jars/spark-sql-kafka-0-10_2.13-4.2.0.jar"])
    argv = launch.Lane(checkpoint="/tmp/ck", trades_topic="t", alerts_topic="a").argv()
    assert Path(argv[0]) == venv / "lib" / "python3.11" / "site-packages" / "pyspark" / "bin" / "spark-submit"
    assert argv[argv.index("--master") + 1] == launch.MASTER
    assert "spark.shuffle.streaming.networkBufferMaxWaitTimeMs=1" in argv
    assert argv[argv.index("--jars") + 1].count("spark-sql-kafka") == 1
    assert str(launch.APP) in argv and "--micro-batch" not in argv
    # The provider's operator finds the runtime's spark-submit first on the PATH it is given.
    op_env = launch.operator_env()
    assert op_env["PATH"].split(":")[0] == str(Path(argv[0]).parent)
    assert op_env["SPARK_HOME"] == env["SPARK_HOME"]
