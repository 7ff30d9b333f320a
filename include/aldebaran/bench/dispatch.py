"""Dispatch benchmark: deliveries/s into a local webhook receiver through the real S3 ledger in MinIO,
and alert → delivered latency (alert's detected_at → DELIVERED recorded) p50/p95.

    aldebaran bench dispatch --alerts 5000 --concurrency 32
"""

from __future__ import annotations

import json
import logging
import secrets
import statistics
import time
import uuid

log = logging.getLogger(__name__)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[k]


def run(alerts: int = 5000, concurrency: int = 32, duplicates: float = 0.1, repeats: int = 1) -> dict:
    from aldebaran import kafka_admin, kafka_io
    from aldebaran.audit.rules import alert_id
    from aldebaran.delivery.backends import S3Backend
    from aldebaran.delivery.channels import WebhookChannel, configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.delivery.receivers import WebhookReceiver
    from aldebaran.objectstore import ObjectStore
    from aldebaran.settings import KafkaSettings, load

    import os

    runs = []
    for r in range(repeats):
        tag = uuid.uuid4().hex[:8]
        kafka = load(KafkaSettings, alerts_topic=f"bench-alerts-{tag}")
        kafka_admin.ensure_topics(kafka, [kafka.alerts_topic])
        store = ObjectStore()
        prefix = f"bench/{tag}/deliveries"
        secret = secrets.token_urlsafe(24)
        with WebhookReceiver(secret) as receiver:
            os.environ["AIRFLOW_CONN_ALDEBARAN_WEBHOOK"] = json.dumps(
                {"conn_type": "http", "host": receiver.url, "password": secret, "extra": {"endpoint": "/alerts"}})
            channels = configured_channels(["webhook"])
            assert isinstance(channels[0], WebhookChannel)
            now = int(time.time() * 1000)
            payload = [{"alert_id": alert_id("OVERFILL", f"{tag}-{i}"), "kind": "OVERFILL", "order_id": f"{tag}-{i}",
                        "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2,
                        "trigger_event_id": "x", "trigger_event_ts": now, "detected_at": now, "message": "bench"}
                       for i in range(alerts)]
            stream = payload + payload[: int(alerts * duplicates)]
            ledger = Ledger(S3Backend(store), prefix=prefix)
            dispatcher = Dispatcher(ledger, channels, kafka=kafka, group=f"bench-{tag}", concurrency=concurrency)
            # Produce just before dispatching so detected_at → delivered measures the dispatch path.
            t_produce = time.time() * 1000
            for a in stream:
                a["detected_at"] = int(t_produce)
            kafka_io.produce_all(kafka_io.producer(kafka), kafka.alerts_topic,
                                 [(a["alert_id"], json.dumps(a)) for a in stream])
            t0 = time.monotonic()
            stats = dispatcher.run_once(idle_timeout=2.0)
            elapsed = time.monotonic() - t0 - 2.0  # minus the idle wait that ends the run
            delivered = stats.sent.get("webhook", 0)
            correct = (delivered == alerts and len(receiver.accepted) == alerts
                       and set(receiver.requests_per_key.values()) == {1})
            runs.append({
                "alerts": alerts, "messages": len(stream), "delivered": delivered,
                "deliveries_per_s": delivered / elapsed if elapsed > 0 else float("nan"),
                "p50_ms": percentile(stats.latencies_ms, 50), "p95_ms": percentile(stats.latencies_ms, 95),
                "correct": correct, "seconds": elapsed,
            })
            log.info("dispatch run %d/%d: %s", r + 1, repeats, runs[-1])
        store.delete_prefix(f"bench/{tag}/")
        kafka_admin.delete_topics(kafka, [kafka.alerts_topic])
    return {
        "runs": runs,
        "median_deliveries_per_s": statistics.median(r["deliveries_per_s"] for r in runs),
        "median_p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "median_p95_ms": statistics.median(r["p95_ms"] for r in runs),
        "all_correct": all(r["correct"] for r in runs),
        "concurrency": concurrency,
    }
