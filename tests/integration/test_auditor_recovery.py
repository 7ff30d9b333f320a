"""The auditor under crashes, on real Kafka, MinIO and Spark: an s3a:// checkpoint on MinIO, SIGKILL of the
running auditor process (driver and Spark JVM) mid-stream and restart from that checkpoint, a replay on
a fresh checkpoint, and the `mismatch` rule switched on and off by configuration.

The expected alerts come from aldebaran.audit.reference (independent model) or are stated by hand; the
campaign code is aldebaran_lab.chaos.kill_auditor, here with small data (`make chaos` runs it at full size).
"""

from __future__ import annotations

import json
import logging

import pytest

from aldebaran.audit import reference
from aldebaran.audit import parse
from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob import job
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.settings import load
from aldebaran_lab.chaos import kill_auditor
from aldebaran_lab.chaos.common import Workspace, topic_alerts, topic_env

log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def killed_run(services_up):
    """10k events in the original mix; the auditor SIGKILLed once mid-stream and restarted from its
    s3a:// checkpoint; then the alerts dispatched to a counting webhook receiver."""
    ws = Workspace.create("recovery", s3a=True)
    result = kill_auditor.run(events=10_000, kills=1, seed=11, mode="short", workspace=ws)
    log.info("kill-auditor (short): %s", json.dumps(result.details, default=str))
    yield ws, result
    ws.cleanup()


def test_sigkill_mid_stream_and_restart_from_an_s3a_checkpoint_loses_and_duplicates_nothing(killed_run):
    ws, result = killed_run
    assert result.details["failures"] == []
    assert result.faults == 1 and result.runs == 2  # one SIGKILL landed mid-stream, one restart
    assert ws.checkpoint.startswith("s3a://")
    # The checkpoint (Spark's offsets/commits and the books) really is in MinIO.
    assert list(ws.store.list(f"{ws.prefix}/checkpoint/spark/commits/"))
    assert list(ws.store.list(f"{ws.prefix}/checkpoint/books/"))
    assert result.details["batches_committed"] >= 3  # the backlog took several batches: the kill was mid-stream

    topic = result.details["alerts_topic"]
    assert topic["expected"] > 100  # the mix overfills about half of its orders
    assert (topic["missing"], topic["extra"], topic["changed"]) == (0, 0, 0)
    # Raw repeats on the at-least-once topic are allowed (the dispatcher dedupes by id); reported here.
    log.info("raw duplicates on the alerts topic after the kill: %d", topic["duplicates_raw"])
    assert topic["received_raw"] == topic["unique"] + topic["duplicates_raw"]

    # Delivered once each to the webhook, nothing missing, nothing extra.
    hook = result.details["webhook"]
    assert (hook["missing"], hook["extra"], hook["sent_more_than_once"]) == (0, 0, 0)
    assert hook["receiver_accepted"] == topic["expected"]
    assert (result.lost, result.duplicated) == (0, 0)


def test_no_configured_secret_in_the_auditor_logs(killed_run):
    from tests.integration.test_security import configured_secrets

    ws, _ = killed_run
    text = (ws.logs / "auditor.log").read_text(errors="replace")
    assert "s3a://" in text  # the log is the real one: it names its checkpoint
    leaked = [name for name, value in configured_secrets().items() if value in text]
    assert leaked == []


def test_replay_on_a_fresh_checkpoint_gives_the_same_alert_ids(killed_run, spark, checkpoint):
    ws, _ = killed_run
    first = topic_alerts(ws.kafka)
    replay = ws.kafka.model_copy(update={"alerts_topic": ws.kafka.alerts_topic + "-replay",
                                         "dlq_topic": ws.kafka.dlq_topic + "-replay"})
    kadmin.ensure_topics(replay, [replay.alerts_topic, replay.dlq_topic])
    try:
        with topic_env(replay):
            settings = load(AuditorSettings, checkpoint=checkpoint, trigger="available-now",
                            ttl_seconds=kill_auditor.TTL_SECONDS, query_name=f"{ws.name}-replay",
                            archive_prefix=f"{ws.prefix}/archive-replay", max_offsets_per_trigger=5_000)
            job.run(settings, spark=spark)
        second = topic_alerts(replay)
    finally:
        kadmin.delete_topics(replay, [replay.alerts_topic, replay.dlq_topic])
        ws.store.delete(f"heartbeats/auditor/{ws.name}-replay.json")
    assert len(second) == len({a["alert_id"] for a in second})  # no crash: no repeats either
    assert {a["alert_id"] for a in second} == {a["alert_id"] for a in first}
    assert sorted(reference.key(a) for a in second) == sorted({reference.key(a) for a in first})


# --- the mismatch rule, selected by configuration ---------------------------------------------------
def _mismatch_input() -> list[bytes]:
    e = parse.encode
    return [
        # A: request, then a purchase of another stock → MISMATCH (with the rule on); no overfill.
        e(parse.request("A", 100, "Sendence", "AAPL")), e(parse.purchase("A1", "A", 10, "Sendence", "MSFT")),
        # B: the purchase by another client comes first; the request arrives later → MISMATCH then.
        e(parse.purchase("B1", "B", 5, "Other", "AAPL")), e(parse.request("B", 50, "Sendence", "AAPL")),
        # C: same client and stock, overfilled → OVERFILL only.
        e(parse.request("C", 10, "Sendence", "AAPL")), e(parse.purchase("C1", "C", 11, "Sendence", "AAPL")),
        # D: overfilled by a purchase of another stock → both.
        e(parse.request("D", 10, "Sendence", "AAPL")), e(parse.purchase("D1", "D", 20, "Sendence", "IBM")),
        # E: nothing wrong.
        e(parse.request("E", 10, "Sendence", "AAPL")), e(parse.purchase("E1", "E", 10, "Sendence", "AAPL")),
    ]


def _audit(spark, kafka, checkpoint: str, query: str, prefix: str) -> list[dict]:
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="available-now", query_name=query,
                    archive_prefix=f"{prefix}/archive")  # rules: from ALDEBARAN_AUDIT_RULES
    job.run(settings, spark=spark)
    return topic_alerts(kafka)


def test_mismatch_rule_on_and_off_through_configuration(spark, kafka_topics, tmp_path, s3_prefix, store, unique,
                                                        monkeypatch):
    messages = _mismatch_input()
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                         [(b"k", m) for m in messages])  # one key: one partition, the order above
    store_keys = []

    monkeypatch.setenv("ALDEBARAN_AUDIT_RULES", "overfill")
    off = _audit(spark, kafka_topics, str(tmp_path / "cp-off"), f"mm-off-{unique}", s3_prefix)
    store_keys.append(f"heartbeats/auditor/mm-off-{unique}.json")

    on_topics = kafka_topics.model_copy(update={"alerts_topic": kafka_topics.alerts_topic + "-on"})
    kadmin.ensure_topics(on_topics, [on_topics.alerts_topic])
    monkeypatch.setenv("ALDEBARAN_KAFKA_ALERTS_TOPIC", on_topics.alerts_topic)
    monkeypatch.setenv("ALDEBARAN_AUDIT_RULES", "overfill,mismatch")
    try:
        on = _audit(spark, on_topics, str(tmp_path / "cp-on"), f"mm-on-{unique}", s3_prefix)
        store_keys.append(f"heartbeats/auditor/mm-on-{unique}.json")
    finally:
        kadmin.delete_topics(on_topics, [on_topics.alerts_topic])
        for key in store_keys:
            store.delete(key)

    assert sorted((a["kind"], a["order_id"]) for a in off) == [("OVERFILL", "C"), ("OVERFILL", "D")]
    assert sorted((a["kind"], a["order_id"]) for a in on) == [
        ("MISMATCH", "A"), ("MISMATCH", "B"), ("MISMATCH", "D"), ("OVERFILL", "C"), ("OVERFILL", "D")]
    mismatch_b = next(a for a in on if a["kind"] == "MISMATCH" and a["order_id"] == "B")
    assert mismatch_b["trigger_event_id"] == "B"  # fired when the request arrived
    # And field for field what the independent reference model says.
    assert sorted(map(reference.key, off)) == sorted(map(reference.key, reference.expected_alerts(messages)))
    assert sorted(map(reference.key, on)) == sorted(
        map(reference.key, reference.expected_alerts(messages, rules=("overfill", "mismatch"))))
