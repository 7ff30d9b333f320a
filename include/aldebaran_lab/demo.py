"""`make demo`: the platform end to end on the running local services.

1. fresh demo topics (demo-trades, demo-alerts, demo-trades.dlq) and a fresh demo prefix in MinIO;
2. the challenge's example (request 1 for 100 shares; purchases 90, 30, then 10) and a few hundred
   orders in the original publisher's mix (~2 % of its purchases are for 0 shares: valid input, audited
   and counting 0), plus a couple of malformed messages, produced to Kafka;
3. the auditor submitted with spark-submit (spark_apps/auditor.py), draining the topic
   (Trigger.AvailableNow) with its checkpoint in MinIO (s3a://);
4. the dispatcher delivering every alert to the `log` channel through delivery records in MinIO;
5. alerts, DLQ reasons and delivery records printed, checked against the reference model.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter

from aldebaran import events, kafka_admin, kafka_io, paths
from aldebaran.settings import KafkaSettings, ObjectStoreSettings, load
from aldebaran_capacity import loadgen

log = logging.getLogger(__name__)

DEMO_TOPICS = {"trades_topic": "demo-trades", "alerts_topic": "demo-alerts", "dlq_topic": "demo-trades.dlq"}
MALFORMED = [b"this is not json", b'{"id": "x1", "#shares": "100", "client": "Sendence", "stock": "AAPL"}']


def spark_submit_command(extra_args: list[str], master: str = "local[2]", s3a: bool = True) -> list[str]:
    from aldebaran import spark as sparkmod

    submit = os.path.join(sparkmod.spark_home(), "bin", "spark-submit")
    return [
        submit, "--master", master,
        "--jars", ",".join(sparkmod.connector_jars(s3a=s3a)),
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.host=127.0.0.1",
        str(paths.ROOT / "spark_apps" / "auditor.py"),
        *extra_args,
    ]


def main(args: argparse.Namespace) -> int:
    from aldebaran import reference
    from aldebaran.delivery.channels import LogChannel
    from aldebaran.delivery.dispatcher import Dispatcher
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.storage import ObjectStore

    t_start = time.monotonic()
    for field, topic in DEMO_TOPICS.items():
        os.environ[f"ALDEBARAN_KAFKA_{field.upper()}"] = topic
    kafka = load(KafkaSettings)
    store = ObjectStore(load(ObjectStoreSettings))

    print("== 1. fresh demo topics and object-store prefix")
    kafka_admin.delete_topics(kafka, kafka.topics())
    time.sleep(1.0)
    kafka_admin.ensure_topics(kafka)
    removed = store.delete_prefix("demo/")
    print(f"   topics {', '.join(kafka.topics())} ({kafka.partitions} partitions); removed {removed} old demo objects")

    print(f"== 2. producing the challenge example + {args.orders} orders (original publisher's mix, seed {args.seed})")
    evts = list(loadgen.CHALLENGE_EXAMPLE) + list(loadgen.original_mix(args.orders, args.seed))
    recs = list(loadgen.records(iter(evts))) + [loadgen.Record(b"malformed", m) for m in MALFORMED]
    loadgen.produce(recs, kafka.trades_topic, progress_every=0)
    zero_share = [events.encode(e) for e in evts if "initial_order_id" in e and e["#shares"] == 0]
    print(f"   {len(recs)} messages to {kafka.trades_topic} ({len(MALFORMED)} malformed; "
          f"{len(zero_share)} purchases of 0 shares, which are valid)")

    print("== 3. auditor (spark-submit spark_apps/auditor.py, Trigger.AvailableNow, checkpoint in MinIO)")
    checkpoint = f"s3a://{store.bucket}/demo/checkpoint"
    cmd = spark_submit_command([
        "--checkpoint", checkpoint, "--trigger", "available-now", "--query-name", "demo",
        "--archive-prefix", "demo/archive", "--rules", "overfill",
    ])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env={**os.environ, **_spark_env()}, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-5000:], file=sys.stderr)
        print(f"auditor failed with exit code {proc.returncode}", file=sys.stderr)
        return 1
    batch_lines = [l for l in proc.stderr.splitlines() if "aldebaran.audit.sparkjob.batch: batch" in l]
    for line in batch_lines:
        print("   " + line.split("aldebaran.audit.sparkjob.batch: ", 1)[1][:200])
    print(f"   auditor finished in {time.monotonic() - t0:.1f}s")

    alerts = [json.loads(m.value()) for m in kafka_io.read_topic(kafka, kafka.alerts_topic)]
    dlq = kafka_io.read_topic(kafka, kafka.dlq_topic)

    print("== 4. dispatch to the log channel (delivery records in MinIO under demo/deliveries/)")
    log_path = paths.run_dir() / "demo" / "alerts.log.jsonl"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.unlink(missing_ok=True)
    ledger = Ledger(store, prefix="demo/deliveries")
    dispatcher = Dispatcher(ledger, [LogChannel("log", log_path)], kafka=kafka, group="aldebaran-demo-dispatcher")
    stats = dispatcher.run_once(idle_timeout=3.0)
    print(f"   {stats.summary()}")

    print("== 5. results")
    print(f"   alerts on {kafka.alerts_topic}: {len(alerts)} ({dict(Counter(a['kind'] for a in alerts))})")
    print(f"   {'kind':<9} {'order_id':<38} {'requested':>9} {'purchased':>9} {'n':>2}  trigger")
    shown = sorted(alerts, key=lambda a: (a["order_id"] != "1", a["order_id"]))
    for a in shown[:12]:
        print(f"   {a['kind']:<9} {a['order_id']:<38} {a['requested']!s:>9} {a['purchased']:>9} "
              f"{a['purchase_count']:>2}  {a['trigger_event_id']}")
    if len(shown) > 12:
        print(f"   ... {len(shown) - 12} more")
    reasons = Counter(dict(m.headers() or []).get("aldebaran.reason_code", b"?").decode() for m in dlq)
    print(f"   DLQ {kafka.dlq_topic}: {len(dlq)} messages {dict(reasons)}")
    # The log channel cannot deduplicate, so each alert has its own record (no group-commit runs).
    by_alert = ledger.states("log")
    states = Counter(by_alert.values())
    print(f"   delivery records (log channel): {len(by_alert)} {dict(states)}")
    for alert_id in sorted(by_alert)[:3]:
        print(f"     {ledger.key('log', alert_id)}  {by_alert[alert_id]}")
    delivered_lines = log_path.read_text().splitlines() if log_path.exists() else []
    from aldebaran.delivery.tools import STAT_COLUMNS, format_table, with_backlog

    print("   `aldebaran deliveries stats --prefix demo/deliveries`:")
    table = format_table([with_backlog(ledger.stats("log"), group="aldebaran-demo-dispatcher")], STAT_COLUMNS)
    print("\n".join("     " + line for line in table.splitlines()))

    expected = reference.expected_alerts([events.encode(e) for e in evts] + MALFORMED)
    got_keys = sorted((a["kind"], a["order_id"]) for a in alerts)
    exp_keys = sorted((a["kind"], a["order_id"]) for a in expected)
    order1 = [a for a in alerts if a["order_id"] == "1"]
    checks = {
        "exactly one OVERFILL for order 1": [a["kind"] for a in order1] == ["OVERFILL"],
        "alerts equal the reference model": got_keys == exp_keys,
        "one delivery record per alert, all DELIVERED": len(by_alert) == len({a["alert_id"] for a in alerts})
        and states == Counter({"DELIVERED": len(by_alert)}),
        "log channel received each alert once": len(delivered_lines) == len(alerts),
        # (as a set: the DLQ is at-least-once, a re-run batch may write a record twice)
        "malformed input on the DLQ, nothing else": {m.value() for m in dlq} == set(MALFORMED),
        "0-share purchases audited, not on the DLQ": not set(zero_share) & {m.value() for m in dlq},
    }
    print("== summary")
    for name, ok in checks.items():
        print(f"   [{'ok' if ok else 'FAIL'}] {name}")
    print(f"   demo took {time.monotonic() - t_start:.0f}s; log channel file: {log_path}")
    print("   `make down` stops the services.")
    return 0 if all(checks.values()) else 1


def _spark_env() -> dict[str, str]:
    from aldebaran.spark import spark_env

    return spark_env()
