"""Expire at end (ALDEBARAN_AUDIT_EXPIRE_AT_END) on real Kafka and Spark: a bounded run reports the ORPHANs of
the books still open when its input ends, like the reference model's end pass, and its checkpoint is
then finished: a later auditor on it refuses to start."""

from __future__ import annotations

import json

import pytest

from aldebaran.audit import reference
from aldebaran.audit import parse
from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob import job
from aldebaran.exceptions import AuditorError
from aldebaran.kafka import io as kio
from aldebaran.settings import load
from aldebaran_capacity import loadgen

TRADES = [
    parse.purchase("a-1", "A", 30),  # order A: purchases, never a request → ORPHAN, but only at expiry
    parse.request("B", 100), parse.purchase("b-1", "B", 40),  # order B: open, under its request → quiet
    parse.request("C", 10), parse.purchase("c-1", "C", 20),  # order C: OVERFILL at once
]


@pytest.mark.parametrize("plan", ["copartitioned", "shuffle"])
def test_a_bounded_run_expires_its_open_books_at_the_end_and_finishes_its_checkpoint(
        spark, kafka_topics, checkpoint, s3_prefix, unique, plan):
    recs = list(loadgen.records(iter(TRADES)))  # keyed by order id (the producer contract)
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in recs])

    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="available-now", expire_at_end=True, plan=plan,
                    archive_prefix=f"{s3_prefix}/archive", query_name=f"end-{unique}")
    last = job.run(settings, spark=spark)

    alerts = [json.loads(m.value()) for m in kio.read_topic(kafka_topics, kafka_topics.alerts_topic)]
    expected = reference.expected_alerts([r.value for r in recs], expire_at_end=True)
    assert sorted(map(reference.key, alerts)) == sorted(map(reference.key, expected))
    assert sorted((a["kind"], a["order_id"]) for a in alerts) == [("ORPHAN", "A"), ("OVERFILL", "C")]
    (orphan,) = [a for a in alerts if a["kind"] == "ORPHAN"]
    assert orphan["purchased"] == 30 and orphan["requested"] is None and orphan["trigger_event_id"] == "a-1"
    # The run's last figures are the end pass's: every book expired, the ORPHAN among its alerts.
    assert last["alert_kinds"] == {"ORPHAN": 1} and last["open_books"] == 0 and last["expired"] == 3
    assert last["steps_ms"]["expire_all"] > 0

    with pytest.raises(AuditorError, match="finished by a bounded run with expire-at-end"):
        job.run(load(AuditorSettings, checkpoint=checkpoint, trigger="available-now", plan=plan,
                     archive_prefix=f"{s3_prefix}/archive", query_name=f"end-{unique}"), spark=spark)
