"""Dispatch benchmark: deliveries/s into a local webhook receiver through the real S3 ledger in MinIO,
and alert → delivered latency (alert's detected_at → DELIVERED recorded) p50/p95.

    aldebaran bench dispatch --alerts 5000 --concurrency 32

Three measurements, side by side in one run:

- backlog drain: all alerts (+10 % duplicates) are on the topic before dispatch starts; deliveries/s
  is the throughput, and latency there is mostly queueing (the last alert waits for all others);
- ledger ceiling: the same ledger writes a delivery costs (conditional create of the CLAIMED record,
  If-Match replace with DELIVERED) with the same client and concurrency, and no channel, Kafka or
  bookkeeping: what the object store allows; dispatch / ceiling is the efficiency of everything else;
- steady rate: alerts produced at a fixed rate below capacity while the dispatcher runs, so
  alert → delivered latency measures the dispatch path, not the queue.
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


def ledger_ceiling(pairs: int = 2000, concurrency: int = 32) -> dict:
    """Claim + record pairs per second straight into the ledger's backend (no channel, no Kafka)."""
    from concurrent.futures import ThreadPoolExecutor

    from aldebaran.delivery.backends import S3Backend
    from aldebaran.objectstore import ObjectStore

    store = ObjectStore()
    backend = S3Backend(store)
    tag = uuid.uuid4().hex[:8]
    body = json.dumps({"state": "CLAIMED", "attempt": 1, "pad": "x" * 300}).encode()

    def pair(i: int) -> None:
        key = f"bench/{tag}/ceiling/{i}.json"
        etag = backend.create(key, body)
        backend.replace(key, body.replace(b"CLAIMED", b"DELIVERED"), etag)

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(pair, range(pairs)))
    elapsed = time.monotonic() - t0
    store.delete_prefix(f"bench/{tag}/")
    result = {"pairs": pairs, "concurrency": concurrency, "seconds": elapsed,
              "deliveries_per_s": pairs / elapsed, "conditional_puts_per_s": 2 * pairs / elapsed,
              "client": "s3lite" if backend.fast else "boto3"}
    log.info("ledger ceiling: %s", result)
    return result


def steady_rate(rate: float, seconds: float = 20.0, concurrency: int = 32) -> dict:
    """Alerts produced at `rate`/s for `seconds` while one dispatcher delivers them to a webhook."""
    import os
    import threading

    from aldebaran import kafka_admin, kafka_io
    from aldebaran.audit.rules import alert_id
    from aldebaran.delivery.backends import S3Backend
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher
    from aldebaran.delivery.ledger import Ledger
    from aldebaran_lab.receivers import WebhookReceiver
    from aldebaran.objectstore import ObjectStore
    from aldebaran.settings import KafkaSettings, load

    tag = uuid.uuid4().hex[:8]
    kafka = load(KafkaSettings, alerts_topic=f"bench-alerts-{tag}")
    kafka_admin.ensure_topics(kafka, [kafka.alerts_topic])
    store = ObjectStore()
    secret = secrets.token_urlsafe(24)
    total = int(rate * seconds)
    with WebhookReceiver(secret) as receiver:
        os.environ["AIRFLOW_CONN_ALDEBARAN_WEBHOOK"] = json.dumps(
            {"conn_type": "http", "host": receiver.url, "password": secret, "extra": {"endpoint": "/alerts"}})
        dispatcher = Dispatcher(Ledger(S3Backend(store), prefix=f"bench/{tag}/deliveries"),
                                configured_channels(["webhook"]), kafka=kafka, group=f"bench-{tag}",
                                concurrency=concurrency)
        producer = kafka_io.producer(kafka)

        def produce() -> None:
            start = time.monotonic()
            for i in range(total):
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                now = int(time.time() * 1000)
                a = {"alert_id": alert_id("OVERFILL", f"{tag}-{i}"), "kind": "OVERFILL", "order_id": f"{tag}-{i}",
                     "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120,
                     "purchase_count": 2, "trigger_event_id": "x", "trigger_event_ts": now, "detected_at": now}
                producer.produce(kafka.alerts_topic, key=a["alert_id"], value=json.dumps(a))
                producer.poll(0)
            producer.flush(30)

        feeder = threading.Thread(target=produce, name="bench-steady-producer", daemon=True)
        feeder.start()
        stats = dispatcher.run_once(idle_timeout=3.0, max_alerts=total)
        feeder.join()
        delivered = stats.sent.get("webhook", 0)
        correct = delivered == total and set(receiver.requests_per_key.values()) == {1}
    store.delete_prefix(f"bench/{tag}/")
    kafka_admin.delete_topics(kafka, [kafka.alerts_topic])
    result = {"rate": rate, "alerts": total, "delivered": delivered, "correct": correct,
              "p50_ms": percentile(stats.latencies_ms, 50), "p95_ms": percentile(stats.latencies_ms, 95),
              "p99_ms": percentile(stats.latencies_ms, 99), "max_ms": max(stats.latencies_ms, default=float("nan"))}
    log.info("steady %.0f alerts/s: %s", rate, result)
    return result


def run(alerts: int = 5000, concurrency: int = 32, duplicates: float = 0.1, repeats: int = 1,
        steady_rates: tuple[float, ...] = (50.0,), steady_seconds: float = 20.0) -> dict:
    from aldebaran import kafka_admin, kafka_io
    from aldebaran.audit.rules import alert_id
    from aldebaran.delivery.backends import S3Backend
    from aldebaran.delivery.channels import WebhookChannel, configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher
    from aldebaran.delivery.ledger import Ledger
    from aldebaran_lab.receivers import WebhookReceiver
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
    ceiling = ledger_ceiling(pairs=min(alerts, 2000), concurrency=concurrency)
    steady = [steady_rate(rate, seconds=steady_seconds, concurrency=concurrency) for rate in steady_rates]
    median_rate = statistics.median(r["deliveries_per_s"] for r in runs)
    return {
        "ledger_ceiling": ceiling,
        "ratio_to_ceiling": median_rate / ceiling["deliveries_per_s"],
        "steady": steady,
        "runs": runs,
        "median_deliveries_per_s": statistics.median(r["deliveries_per_s"] for r in runs),
        "median_p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "median_p95_ms": statistics.median(r["p95_ms"] for r in runs),
        "all_correct": all(r["correct"] for r in runs),
        "concurrency": concurrency,
    }
