"""Reconciliation of the low-latency lane on real Kafka and MinIO (issue 19, item 3): a fast-lane alert the
exact lane never raises is reported unconfirmed (a record, the keeper's heartbeat counts, a failing
platform_health lane check) and never delivered by the dispatchers, which read only the exact lane's
topic; its late confirmation clears it; a confirmed alert is delivered once. The alerts on both topics are
produced by the test (the lanes themselves are run in tests/integration/dags/test_lane_supervisor.py and
test_realtime_lane.py)."""

from __future__ import annotations

import json
import time

import pytest

from aldebaran.runtime import heartbeat
from aldebaran.audit.findings import alert_id
from aldebaran.delivery import dispatcher
from aldebaran.kafka import io as kio
from aldebaran.lanes import keeper, reconciler
from aldebaran.lanes.settings import LaneSettings
from aldebaran.platform import health_checks
from aldebaran.settings import load
from tests.conftest import assert_eventually


def _alert(order_id: str, lane: str | None = None) -> dict:
    out = {"alert_id": alert_id("OVERFILL", order_id), "kind": "OVERFILL", "order_id": order_id,
           "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2,
           "trigger_event_id": "3", "trigger_event_ts": 0, "detected_at": 0}
    return {**out, "lane": lane} if lane else out


def _produce(kafka, topic: str, alerts: list[dict]) -> None:
    kio.produce_all(kio.producer(kafka), topic, [(a["alert_id"], json.dumps(a)) for a in alerts])


def _step_until(rec, count: str, value: int) -> dict:
    """Step the reconciler until its `count` reaches `value`; its counts then."""
    def reached():
        rec.step(timeout=0.5)
        counts = rec.status()["counts"]
        assert counts[count] == value, counts
        return counts

    return assert_eventually(reached, timeout=30, interval=0.2, message=f"{count} = {value}")


@pytest.fixture
def lane_env(kafka_topics, store, s3_prefix, tmp_path, monkeypatch, unique):
    log_file = tmp_path / "delivered.jsonl"
    env = {
        "ALDEBARAN_LANES_NAME": f"lane-{unique}",
        "ALDEBARAN_LANES_RECORDS_PREFIX": f"{s3_prefix}/lanes",
        "ALDEBARAN_LANES_CONFIRM_TTL_SECONDS": "2",
        "ALDEBARAN_LANES_ENABLED": "true",
        "ALDEBARAN_CHANNELS": "log",
        "AIRFLOW_CONN_ALDEBARAN_LOG": json.dumps({"conn_type": "log", "extra": {"path": str(log_file)}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        "ALDEBARAN_DELIVERY_GROUP": f"d-{unique}",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = load(LaneSettings)
    yield cfg, log_file
    keeper.lane_store().delete(heartbeat.key(heartbeat.LANE, cfg.name))


def test_an_alert_the_exact_lane_never_raises_is_reported_and_not_delivered(lane_env, kafka_topics):
    cfg, log_file = lane_env
    confirmed, lonely = _alert("rc-1"), _alert("rc-2")
    _produce(kafka_topics, kafka_topics.alerts_topic, [confirmed])  # the exact lane raised order rc-1 only
    _produce(kafka_topics, kafka_topics.fast_alerts_topic, [_alert("rc-1", "realtime"), _alert("rc-2", "realtime")])

    store = keeper.lane_store()
    rec = reconciler.Reconciler(kafka_topics, store, cfg.name, cfg.confirm_ttl_seconds, cfg.records_prefix,
                                resume_ms=int(time.time() * 1000) - 60_000)
    # The keeper's heartbeat carries the reconciliation (what `lanes status` and platform_health read).
    kp = keeper.Keeper(cfg, kafka_topics, store)
    kp.reconciler = rec
    try:
        counts = _step_until(rec, "unconfirmed", 1)
        assert (counts["fast"], counts["exact"], counts["confirmed"], counts["missed"]) == (2, 1, 1, 0)
        records = reconciler.list_records(store, cfg.records_prefix, cfg.name)
        assert [r["alert_id"] for r in records] == [lonely["alert_id"]]
        assert records[0]["alert"]["order_id"] == "rc-2" and "not delivered" in records[0]["why"]
        kp.beat("running")

        lane_check = health_checks.check_lane(time.time())
        assert not lane_check["ok"]
        assert "1 fast-lane alert(s) the exact lane never confirmed" in lane_check["problem"]
        assert lonely["alert_id"] in lane_check["problem"]

        # The hold: the dispatchers read the exact lane's topic only, so rc-2 is not delivered; rc-1 is, once.
        stats = dispatcher.run_once(channels=["log"], idle_timeout=3.0)
        assert stats.sent == {"log": 1}
        delivered = [json.loads(line)["alert"]["alert_id"] for line in log_file.read_text().splitlines()]
        assert delivered == [confirmed["alert_id"]]

        # The exact lane raises rc-2 late: confirmed late, the record goes, the lane is healthy again.
        _produce(kafka_topics, kafka_topics.alerts_topic, [_alert("rc-2")])

        counts = _step_until(rec, "confirmed_late", 1)
        assert (counts["unconfirmed"], counts["confirmed"]) == (0, 2)
        assert reconciler.list_records(store, cfg.records_prefix, cfg.name) == []
        kp.beat("running")
        assert health_checks.check_lane(time.time())["ok"]
    finally:
        rec.close()


def test_an_operator_resolves_an_unconfirmed_alert(lane_env, kafka_topics):
    cfg, _ = lane_env
    _produce(kafka_topics, kafka_topics.fast_alerts_topic, [_alert("rv-1", "realtime")])
    store = keeper.lane_store()
    rec = reconciler.Reconciler(kafka_topics, store, cfg.name, cfg.confirm_ttl_seconds, cfg.records_prefix,
                                resume_ms=int(time.time() * 1000) - 60_000)
    try:
        _step_until(rec, "unconfirmed", 1)
    finally:
        rec.close()
    aid = alert_id("OVERFILL", "rv-1")
    done = reconciler.resolve(store, cfg.records_prefix, cfg.name, aid, "exact lane was paused for a replay", "ops")
    assert done["resolution"] == "exact lane was paused for a replay" and done["resolved_by"] == "ops"
    assert reconciler.list_records(store, cfg.records_prefix, cfg.name) == []
    assert [r["alert_id"] for r in reconciler.list_records(store, cfg.records_prefix, cfg.name, "resolved")] == [aid]
    # A restarted reconciler picks up what is still open from the records, so a late copy would clear it:
    # here nothing is open any more.
    again = reconciler.Reconciler(kafka_topics, store, cfg.name, cfg.confirm_ttl_seconds, cfg.records_prefix)
    assert again.state.unconfirmed == {}
