"""What the exact auditor does when the trades its checkpoint resumes from are gone (issue 38 item 4; the fast
lane's case is tests/integration/test_lane_gap.py): with ``ALDEBARAN_AUDIT_FAIL_ON_DATA_LOSS=false`` (the
default) a micro-batch query does not fail, so it never crash-loops. Measured here on real Kafka and Spark
(the control venv's session, ``available-now`` runs on one checkpoint):

- topic recreated (offsets above the new topic's end): the restarted query logs the data loss and moves its
  offsets to the new topic's end *as of that restart*, so the trades written to the new topic before the
  restart are skipped; trades written after it are audited;
- retention deleted trades the query had not read (its offset below the low watermark): the reader skips to
  the earliest trade still there; what was deleted is never audited.

docs/operations.md ("When the lane's trades are gone") states both."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from aldebaran.audit import parse
from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob import job
from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.lanes import gap
from aldebaran.settings import load
from aldebaran_lab.chaos.common import topic_alerts
from tests.integration.test_lane_gap import _recreate


def _audit(spark, checkpoint: str, query: str, prefix: str) -> None:
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="available-now", query_name=query,
                    archive_prefix=f"{prefix}/archive")
    job.run(settings, spark=spark)


def _overfill(order: str) -> list[tuple[str, bytes]]:
    return [(order, parse.encode(parse.request(order, 1, "c", "S"))),
            (order, parse.encode(parse.purchase(f"{order}-p", order, 2, "c", "S")))]


def _overfilled(kafka) -> set[str]:
    return {a["order_id"] for a in topic_alerts(kafka, timeout=30) if a["kind"] == "OVERFILL"}


def test_the_exact_auditor_on_a_recreated_topic_skips_what_the_new_topic_had_before_its_restart(
        spark, kafka_topics, tmp_path, s3_prefix, store, unique):
    topic, query, cp = kafka_topics.trades_topic, f"dl-re-{unique}", str(tmp_path / "cp")
    producer = kio.producer(kafka_topics)
    try:
        kio.produce_all(producer, topic, [(f"old-{i}", parse.encode(parse.request(f"old-{i}", 10, "c", "S")))
                                               for i in range(40)])
        _audit(spark, cp, query, s3_prefix)
        before = gap.checkpoint_offsets(Checkpoint(cp).spark, topic)
        assert before and sum(before.values()) == 40

        _recreate(kafka_topics, topic)
        kio.produce_all(producer, topic, _overfill("before-restart"))
        _audit(spark, cp, query, s3_prefix)  # no exception: failOnDataLoss=false
        kio.produce_all(producer, topic, _overfill("after-restart"))
        _audit(spark, cp, query, s3_prefix)
        assert _overfilled(kafka_topics) == {"after-restart"}
    finally:
        store.delete(f"heartbeats/auditor/{query}.json")


def test_the_exact_auditor_skips_trades_retention_deleted_before_it_read_them(
        spark, kafka_topics, tmp_path, s3_prefix, store, unique):
    topic, query, cp = kafka_topics.trades_topic, f"dl-ret-{unique}", str(tmp_path / "cp")
    producer = kio.producer(kafka_topics)
    try:
        kio.produce_all(producer, topic, _overfill("read"))
        _audit(spark, cp, query, s3_prefix)
        kio.produce_all(producer, topic, _overfill("deleted"))
        # Retention, at once: every trade so far deleted (the low watermark moved to the end).
        admin = kadmin.admin(kafka_topics)
        marks = gap.watermarks(kafka_topics, topic)
        for fut in admin.delete_records([TopicPartition(topic, p, high) for p, (_, high) in marks.items()]).values():
            fut.result()
        kio.produce_all(producer, topic, _overfill("kept"))
        _audit(spark, cp, query, s3_prefix)  # no exception: failOnDataLoss=false
        assert _overfilled(kafka_topics) == {"read", "kept"}
    finally:
        store.delete(f"heartbeats/auditor/{query}.json")
