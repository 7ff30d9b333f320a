"""The thin end-to-end slice on real Kafka, Spark and MinIO: the challenge's example → exactly one
OVERFILL for order 1 on `alerts` → exactly one delivery record for the `log` channel."""

from __future__ import annotations

import json

from aldebaran.audit import reference
from aldebaran.audit import parse
from aldebaran.runtime import heartbeat
from aldebaran.audit.findings import alert_id as alert_id_of
from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob import job
from aldebaran.delivery.channels import LogChannel
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.kafka import io as kio
from aldebaran.settings import load
from aldebaran_capacity import loadgen


def _run_auditor(spark, checkpoint, **extra):
    extra.setdefault("query_name", "slice")
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="available-now",
                    archive_prefix=extra.pop("archive_prefix", "tests/archive"), **extra)
    return job.run(settings, spark=spark)


def test_challenge_example_end_to_end(spark, kafka_topics, store, s3_prefix, checkpoint, tmp_path, unique):
    recs = list(loadgen.records(iter(loadgen.CHALLENGE_EXAMPLE)))
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                         [(r.key, r.value) for r in recs[:3]])
    _run_auditor(spark, checkpoint, archive_prefix=f"{s3_prefix}/archive", query_name=f"slice-{unique}")

    alerts = [json.loads(m.value()) for m in kio.read_topic(kafka_topics, kafka_topics.alerts_topic)]
    assert [(a["kind"], a["order_id"], a["requested"], a["purchased"], a["trigger_event_id"]) for a in alerts] == [
        ("OVERFILL", "1", 100, 120, "3")
    ]
    assert alerts[0]["alert_id"] == alert_id_of("OVERFILL", "1")

    # The third purchase of 10 arrives later: the auditor resumes from its checkpoint, no new alert.
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(recs[3].key, recs[3].value)])
    _run_auditor(spark, checkpoint, archive_prefix=f"{s3_prefix}/archive", query_name=f"slice-{unique}")
    assert len(kio.read_topic(kafka_topics, kafka_topics.alerts_topic)) == 1

    # The heartbeat tells the supervisor what happened; then it was stopped cleanly.
    beat = heartbeat.read(store, heartbeat.AUDITOR, f"slice-{unique}")
    assert beat["status"] == "stopped" and beat["query"] == f"slice-{unique}"
    store.delete(heartbeat.key(heartbeat.AUDITOR, f"slice-{unique}"))

    # The archive holds the same alert.
    archived = [json.loads(o) for o in _archive_lines(store, f"{s3_prefix}/archive/slice-{unique}/")]
    assert [a["alert_id"] for a in archived] == [alerts[0]["alert_id"]]

    # Dispatch to the log channel: one delivery record in MinIO, DELIVERED, one line in the log.
    log_file = tmp_path / "alerts.jsonl"
    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")
    dispatcher = Dispatcher(ledger, [LogChannel("log", log_file)], kafka=kafka_topics, group=f"g-{unique}")
    stats = dispatcher.run_once(idle_timeout=2.0)
    assert stats.sent == {"log": 1}
    assert ledger.states("log") == {alerts[0]["alert_id"]: "DELIVERED"}
    assert len(log_file.read_text().splitlines()) == 1

    # The same alert again on the topic (at-least-once) is not delivered twice.
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(alerts[0]["alert_id"], json.dumps(alerts[0]))])
    again = Dispatcher(ledger, [LogChannel("log", log_file)], kafka=kafka_topics, group=f"g2-{unique}").run_once(idle_timeout=2.0)
    assert again.sent == {} and again.already == {"log": 2}  # the original and its repeat: both suppressed
    assert len(log_file.read_text().splitlines()) == 1


def test_malformed_input_goes_to_the_dlq_with_reason_and_offset(spark, kafka_topics, checkpoint, s3_prefix):
    good = parse.encode(parse.request("9", 10))
    bad = [b"{not json", b'{"id": "p1", "initial_order_id": "9", "#shares": -1}', b"\xff\xfe"]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                         [(b"k", v) for v in [good, *bad]])
    last = _run_auditor(spark, checkpoint, archive_prefix=f"{s3_prefix}/archive")
    assert last["dlq"] == 3 and last["applied"] == 1

    dlq = kio.read_topic(kafka_topics, kafka_topics.dlq_topic)
    by_value = {m.value(): dict(m.headers()) for m in dlq}
    assert set(by_value) == set(bad)  # the original bytes, unchanged
    assert by_value[bad[0]]["aldebaran.reason_code"] == b"invalid_json"
    assert by_value[bad[1]]["aldebaran.reason_code"] == b"shares_out_of_range"
    assert by_value[bad[2]]["aldebaran.reason_code"] == b"invalid_utf8"
    for headers in by_value.values():
        assert headers["aldebaran.source.topic"] == kafka_topics.trades_topic.encode()
    # One key: all four landed in one partition, at offsets 0..3; the three rejects keep their key,
    # their own offsets, and their source order on the DLQ.
    assert len({by_value[b]["aldebaran.source.partition"] for b in bad}) == 1
    assert [int(by_value[b]["aldebaran.source.offset"]) for b in bad] == [1, 2, 3]
    assert [m.value() for m in dlq] == bad and all(m.key() == b"k" for m in dlq)


def test_zero_share_events_are_audited_on_both_parse_paths(spark, kafka_topics, checkpoint, s3_prefix, unique):
    """BRIEF §2 (turn 2): `#shares` 0 is valid. Through the real auditor, on the JVM fast path (the
    publisher's shape) and the general path (other key order, -0): applied, counted 0, never on the DLQ;
    equal is not over, a purchase before its request counts, a redelivered one counts once."""
    fast = lambda e: parse.encode(e)  # noqa: E731  (the publisher's field order: the fast path)
    reordered = lambda e: json.dumps(dict(reversed(list(e.items())))).encode()  # noqa: E731  (general path)
    msgs = [
        # z1: 10 requested; 0 + 0 + 10 = 10 is not over (a redelivered 0 counts once); 1 more is.
        ("z1", fast(parse.request("z1", 10))), ("z1", fast(parse.purchase("z1-a", "z1", 0))),
        ("z1", reordered(parse.purchase("z1-b", "z1", 0))), ("z1", fast(parse.purchase("z1-c", "z1", 10))),
        ("z1", fast(parse.purchase("z1-a", "z1", 0))), ("z1", fast(parse.purchase("z1-d", "z1", 1))),
        # z2: 0-share purchases (one spelled -0) before a 0-share request: equal, no alert; then 1 is over.
        ("z2", fast(parse.purchase("z2-a", "z2", 0))),
        ("z2", b'{"id": "z2-b", "initial_order_id": "z2", "#shares": -0, "client": "Sendence", "stock": "AAPL"}'),
        ("z2", reordered(parse.request("z2", 0))), ("z2", fast(parse.purchase("z2-c", "z2", 1))),
        # z3: 0 requested, 0 bought: equal, never an alert.
        ("z3", fast(parse.request("z3", 0))), ("z3", reordered(parse.purchase("z3-a", "z3", 0))),
    ]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                         [(k.encode(), v) for k, v in msgs])
    last = _run_auditor(spark, checkpoint, archive_prefix=f"{s3_prefix}/archive", query_name=f"zero-{unique}")
    assert kio.read_topic(kafka_topics, kafka_topics.dlq_topic) == []
    assert last["dlq"] == 0 and last["applied"] == 11 and last["duplicates"] == 1
    alerts = [json.loads(m.value()) for m in kio.read_topic(kafka_topics, kafka_topics.alerts_topic)]
    assert sorted((a["kind"], a["order_id"], a["requested"], a["purchased"], a["purchase_count"],
                   a["trigger_event_id"]) for a in alerts) == [
        ("OVERFILL", "z1", 10, 11, 4, "z1-d"), ("OVERFILL", "z2", 0, 1, 3, "z2-c")]
    assert sorted(reference.key(a) for a in alerts) == sorted(
        reference.key(a) for a in reference.expected_alerts([v for _, v in msgs]))


def _archive_lines(store, prefix):
    out = []
    for obj in store.list(prefix):
        out += [l for l in store.get(obj["Key"]).body.decode().splitlines() if l]
    return out
