"""alert_dispatch run for real with dag.test(): real Kafka alerts (duplicated on the topic), a real
S3 ledger in MinIO, the log channel → each alert delivered once; a second run delivers nothing new."""

from __future__ import annotations

import json

from aldebaran.audit.findings import alert_id
from aldebaran.delivery.ledger import Ledger
from aldebaran.kafka import io as kio


def _alert(order_id: str) -> dict:
    return {"alert_id": alert_id("OVERFILL", order_id), "kind": "OVERFILL", "order_id": order_id,
            "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2,
            "trigger_event_id": "3", "trigger_event_ts": 0, "detected_at": 0, "message": "dag test"}


def test_alert_dispatch_dag_delivers_each_alert_once(airflow_db, dagbag, kafka_topics, store, s3_prefix,
                                                      tmp_path, monkeypatch, unique):
    alerts = [_alert(f"dag-{i}") for i in range(6)]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(a["alert_id"], json.dumps(a)) for a in alerts + alerts[:3]])
    log_file = tmp_path / "alerts.jsonl"
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_LOG", json.dumps({"conn_type": "log", "extra": {"path": str(log_file)}}))
    monkeypatch.setenv("ALDEBARAN_DELIVERY_PREFIX", f"{s3_prefix}/deliveries")
    monkeypatch.setenv("ALDEBARAN_DELIVERY_IDLE_SECONDS", "2")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_topics.bootstrap_servers, "group.id": f"g-{unique}"}}))

    dag = dagbag.dags["alert_dispatch"]
    run = dag.test()
    assert run.state == "success", run.state
    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")
    states = ledger.states("log")
    assert sorted(states) == sorted(a["alert_id"] for a in alerts)
    assert set(states.values()) == {"DELIVERED"}
    assert len(log_file.read_text().splitlines()) == 6

    again = dag.test()
    assert again.state == "success"
    assert len(log_file.read_text().splitlines()) == 6  # nothing delivered twice
