"""Retractions end to end through the lane_supervisor DAG (dag.test(), issue 38 item 2), with a fast connection:
the supervisor starts the lane keeper with the fast channel named to it; the real-time lane raises the
challenge's OVERFILL on the fast topic; a real fast dispatcher delivers it to a real webhook receiver; the
exact lane never confirms it within the TTL, so the keeper's reconciler produces its RETRACTION to the fast
topic, which the fast dispatcher delivers as an ordinary run, once; the exact copy then arrives late, and the
REINSTATEMENT goes the same way, once. The keeper's reconciliation skips both messages when it reads them
back. Needs `make setup`'s Spark 4.3 runtime, like test_lane_supervisor.py (whose fixture and helpers this
reuses)."""

from __future__ import annotations

import json

import pytest

from aldebaran.audit.findings import alert_id
from aldebaran.delivery import fast
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.retraction import reinstatement_id, retraction_id
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.kafka import io as kio
from aldebaran.lanes import keeper, reconciler
from aldebaran.runtime import heartbeat
from aldebaran.settings import load
from aldebaran_capacity import loadgen
from aldebaran_capacity.receivers import WebhookReceiver
from tests.conftest import assert_eventually
from tests.integration.dags.test_lane_supervisor import _supervise, lane_env  # noqa: F401  (fixture)


@pytest.fixture
def receiver():
    with WebhookReceiver("fast-secret") as hook:
        yield hook


@pytest.fixture
def fast_hook(lane_env, receiver, s3_prefix, unique, monkeypatch):  # noqa: F811
    """One fast webhook channel, as Airflow would resolve it; a short confirmation TTL for the keeper."""
    env = {
        "ALDEBARAN_CHANNELS": "hook",
        "AIRFLOW_CONN_ALDEBARAN_HOOK": json.dumps({"conn_type": "http", "host": receiver.url, "password": "fast-secret",
                                                   "extra": {"endpoint": "/alerts", "timeout": 3, "fast": True}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        "ALDEBARAN_DELIVERY_GROUP": f"d-{unique}",
        "ALDEBARAN_LANES_CONFIRM_TTL_SECONDS": "8",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load(DeliverySettings)
    return lane_env, Ledger.from_settings(settings), settings


def test_the_lane_supervisors_keeper_retracts_and_reinstates_through_the_fast_dispatcher(
        airflow_db, dagbag, fast_hook, kafka_topics, receiver):
    cfg, ledger, settings = fast_hook
    dag = dagbag.dags["lane_supervisor"]
    lane_store = keeper.lane_store()
    trades = list(loadgen.records(loadgen.CHALLENGE_EXAMPLE))
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in trades])

    def deliver_fast() -> dict:
        return fast.fast_dispatcher(ledger, kafka=kafka_topics, settings=settings).run_once(idle_timeout=3.0).sent

    def counts() -> dict:
        return (heartbeat.read(lane_store, heartbeat.LANE, cfg.name).get("reconcile") or {}).get("counts") or {}

    def on_fast_topic() -> dict:
        return {m.key().decode(): json.loads(m.value())
                for m in kio.read_topic(kafka_topics, kafka_topics.fast_alerts_topic, idle=1.0)}

    # 1. The supervisor starts the keeper (the fast channel named to it) and its lane.
    first = _supervise(dag, cfg)
    assert first["action"] == "restart"
    want = alert_id("OVERFILL", "1")
    assert_eventually(lambda: want in on_fast_topic(), timeout=120, interval=2,
                      message="the lane's alert on the fast topic")
    assert deliver_fast() == {"hook": 1} and receiver.requests_per_key[want] == 1

    # 2. The exact lane stays silent past the TTL: unconfirmed, its retraction produced and then recorded.
    def unconfirmed():
        assert counts().get("unconfirmed") == 1, counts()

    assert_eventually(unconfirmed, timeout=90, interval=1, message="the alert judged unconfirmed")
    [record] = reconciler.list_records(lane_store, cfg.records_prefix, cfg.name)
    assert record["alert_id"] == want and record["retraction"] == retraction_id(want)
    topic = on_fast_topic()
    assert topic[retraction_id(want)]["kind"] == "RETRACTION" and topic[retraction_id(want)]["retracts"] == want
    assert deliver_fast() == {"hook": 1}
    body = receiver.accepted[retraction_id(want)].alert
    assert (body["kind"], body["retracts"], body["order_id"]) == ("RETRACTION", want, "1")

    # 3. The exact copy arrives late: a reinstatement through the same path, the record gone.
    exact = {k: v for k, v in topic[want].items() if k != "lane"}
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic, [(want, json.dumps(exact))])

    def confirmed_late():
        assert counts().get("confirmed_late") == 1 and counts().get("unconfirmed") == 0, counts()

    assert_eventually(confirmed_late, timeout=60, interval=1, message="the late confirmation")
    assert_eventually(lambda: reinstatement_id(want) in on_fast_topic(), timeout=30, interval=1,
                      message="the reinstatement on the fast topic")
    assert reconciler.list_records(lane_store, cfg.records_prefix, cfg.name) == []
    assert deliver_fast() == {"hook": 1}
    assert receiver.accepted[reinstatement_id(want)].alert["reinstates"] == want

    # 4. Exactly once each at the recipient; the keeper judged one fast alert, skipping its own messages.
    assert deliver_fast() == {}
    assert {k: receiver.requests_per_key[k] for k in (want, retraction_id(want), reinstatement_id(want))} == {
        want: 1, retraction_id(want): 1, reinstatement_id(want): 1}
    assert counts().get("fast") == 1, counts()
    reconcile = heartbeat.read(lane_store, heartbeat.LANE, cfg.name)["reconcile"]
    assert reconcile["own_skipped"] >= 2 and reconcile["retractions_waiting"] == 0
