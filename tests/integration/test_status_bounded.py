"""The status commands read bounded state (issue 40 item 6), on real Kafka and MinIO. Their content, not
their time (the time is `aldebaran bench status-commands`):

- ``lanes status`` and the health lane check take the unconfirmed count, the oldest one's age and the
  shown ids from the keeper's heartbeat (the reconciler's counts), not from a listing of the records; an
  operator's resolution lowers those counts through the reconciler's inbox; ``--full`` still lists all;
- the ledger's channels come from one short listing per channel, and the run holding an offset from its
  key (one GET), whatever the history around it;
- ``explain`` and ``deliveries show`` find an alert on the alerts topic newest first within a budget,
  its first copy when it was repeated, and ``--scan`` finds one older than the budget reaches.
"""

from __future__ import annotations

import json
import time

import pytest

from aldebaran.cli.main import main
from aldebaran.runtime import heartbeat
from aldebaran.audit.findings import alert_id
from aldebaran.delivery import locate
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.runs import DELIVERED, RECORDED, Run
from aldebaran.kafka import io as kio
from aldebaran.lanes import keeper, reconciler, status
from aldebaran.lanes.settings import LaneSettings
from aldebaran.platform import health_checks
from aldebaran.settings import load
from tests.conftest import assert_eventually


def _alert(order_id: str) -> dict:
    return {"alert_id": alert_id("OVERFILL", order_id), "kind": "OVERFILL", "order_id": order_id,
            "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2,
            "trigger_event_id": "3", "trigger_event_ts": 0, "detected_at": 0}


class Counting:
    """A store that counts the requests made through it."""

    def __init__(self, store) -> None:
        self.store, self.gets, self.lists = store, 0, 0

    def get(self, key):
        self.gets += 1
        return self.store.get(key)

    def list(self, prefix, start_after=None, page_size=None):
        self.lists += 1
        return self.store.list(prefix, start_after=start_after, page_size=page_size)

    def __getattr__(self, name):
        return getattr(self.store, name)


@pytest.fixture
def lane_env(kafka_topics, store, s3_prefix, monkeypatch, unique):
    env = {"ALDEBARAN_LANES_NAME": f"lane-{unique}", "ALDEBARAN_LANES_RECORDS_PREFIX": f"{s3_prefix}/lanes",
           "ALDEBARAN_LANES_CONFIRM_TTL_SECONDS": "1", "ALDEBARAN_LANES_ENABLED": "true",
           "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = load(LaneSettings)
    yield cfg
    keeper.lane_store().delete(heartbeat.key(heartbeat.LANE, cfg.name))


def test_lanes_status_and_health_read_the_reconcilers_counts(lane_env, kafka_topics, capsys):
    cfg = lane_env
    alerts = [_alert(f"sb-{i}") for i in range(3)]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.fast_alerts_topic,
                         [(a["alert_id"], json.dumps(a)) for a in alerts])
    store = keeper.lane_store()
    rec = reconciler.Reconciler(kafka_topics, store, cfg.name, cfg.confirm_ttl_seconds, cfg.records_prefix,
                                resume_ms=int(time.time() * 1000) - 60_000)
    kp = keeper.Keeper(cfg, kafka_topics, store)
    kp.reconciler = rec

    def unconfirmed(n):
        def check():
            rec.step(timeout=0.5)
            assert rec.status()["counts"]["unconfirmed"] == n
        assert_eventually(check, timeout=30, interval=0.2)

    try:
        unconfirmed(3)
        kp.beat("running")
        # A record no reconciler reported (here: written by hand) is not counted: the count is the heartbeat's.
        stray = reconciler.record_key(cfg.records_prefix, cfg.name, "stray-record")
        store.put(stray, json.dumps({"alert_id": "stray-record", "fast_ts": 1}).encode())

        fast = status.collect()["fast"]
        assert fast["source"] == "heartbeat" and fast["unconfirmed_count"] == 3
        assert sorted(r["alert"]["order_id"] for r in fast["unconfirmed"]) == ["sb-0", "sb-1", "sb-2"]
        assert fast["oldest_unconfirmed_age_seconds"] is not None and fast["oldest_unconfirmed_age_seconds"] < 120
        full = status.collect(full=True)["fast"]
        assert full["unconfirmed_count"] == 4 and "stray-record" in [r["alert_id"] for r in full["unconfirmed"]]
        store.delete(stray)

        lane = health_checks.check_lane(time.time())
        assert not lane["ok"] and lane["unconfirmed"] == 3
        assert "3 fast-lane alert(s) the exact lane never confirmed" in lane["problem"]

        # An operator resolves one: the running reconciler takes it from its inbox and lowers its count.
        gone = alerts[1]["alert_id"]
        reconciler.resolve(store, cfg.records_prefix, cfg.name, gone, "replayed by hand", "ops")
        assert rec.take_resolutions() == 1
        assert rec.status()["counts"]["unconfirmed"] == 2 and rec.status()["resolved"] == 1
        assert list(store.list(reconciler.record_prefix(cfg.records_prefix, cfg.name, reconciler.RESOLVING))) == []
        kp.beat("running")

        assert main(["lanes", "status"]) == 0
        out = capsys.readouterr().out
        assert "unconfirmed  2 fast-lane alert(s)" in out and gone not in out
        assert alerts[0]["alert_id"] in out and alerts[2]["alert_id"] in out
    finally:
        rec.close()


def _run(channel: str, topic: str, partition: int, start: int, end: int, ids: dict | None = None) -> Run:
    entries = [[o, (ids or {}).get(o, f"x-{o}"), DELIVERED, None] for o in range(start, end + 1)]
    return Run(channel, topic, partition, start, end, 1, "test", RECORDED, time.time(), entries, time.time())


def test_ledger_channels_and_runs_are_found_without_listing_the_history(store, s3_prefix):
    ledger = Ledger(store, f"{s3_prefix}/deliveries")
    topic = "alerts"
    # Channels whose names share a beginning ("sms", "sms-eu", "sms0") and a long history on one of them.
    for channel in ("bus", "sms", "sms-eu", "sms0"):
        store.put(ledger.run_key(channel, topic, 0, 0), _run(channel, topic, 0, 0, 0).to_bytes())
    for start in range(1, 400):
        store.put(ledger.run_key("sms", topic, 0, start), _run("sms", topic, 0, start, start).to_bytes())
    store.put(ledger.run_key("sms", topic, 0, 1000), _run("sms", topic, 0, 1000, 5999).to_bytes())  # a long run
    counting = Counting(store)
    ledger.store = counting
    assert ledger.channels() == ["bus", "sms-eu", "sms", "sms0"]  # key order: "-" sorts before "/"
    assert counting.lists == 5 and counting.gets == 0  # one listing per channel and one that finds nothing

    def covering(offset):
        counting.gets = 0
        run = ledger.run_covering("sms", topic, 0, offset, max_run=100_000)
        assert counting.gets <= 1  # the covering run's key is found from the listing: one read
        return run and (run.start, run.end)

    assert covering(0) == (0, 0)
    assert covering(250) == (250, 250)
    assert covering(399) == (399, 399)
    assert covering(500) is None  # a gap: no run holds it
    assert covering(5500) == (1000, 5999)  # beyond the first windows: found in the wider one
    assert covering(7000) is None


def test_explain_and_show_find_the_alert_newest_first_within_a_budget(kafka_topics, store, s3_prefix, monkeypatch,
                                                                      capsys):
    monkeypatch.setenv("ALDEBARAN_DELIVERY_PREFIX", f"{s3_prefix}/deliveries")
    monkeypatch.setattr(locate, "WINDOW", 100)  # several windows over a small topic
    old, recent = _alert("sb-old"), _alert("sb-recent")
    meta = kio.consumer(kafka_topics, "t").list_topics(kafka_topics.alerts_topic, timeout=10)
    n = len(meta.topics[kafka_topics.alerts_topic].partitions)
    import zlib

    home = zlib.crc32(old["alert_id"].encode()) % n
    p = kio.producer(kafka_topics)
    # The old alert, 500 fillers after it in its partition, then the recent one twice (a repeat) with fillers between.
    p.produce(kafka_topics.alerts_topic, key=old["alert_id"], value=json.dumps(old), partition=home)
    for i in range(500):
        p.produce(kafka_topics.alerts_topic, key=f"filler-{i}", value=b"{}", partition=home)
    kio.produce_all(p, kafka_topics.alerts_topic, [(recent["alert_id"], json.dumps(recent))])
    for i in range(150):
        p.produce(kafka_topics.alerts_topic, key=f"filler-b-{i}", value=b"{}", partition=home)
    kio.produce_all(p, kafka_topics.alerts_topic, [(recent["alert_id"], json.dumps(recent))])

    first = locate.locate(kafka_topics, recent["alert_id"])
    assert first is not None
    again = locate.locate(kafka_topics, recent["alert_id"], scan=True)
    assert first == again  # the first copy, not the repeat
    assert locate.locate(kafka_topics, old["alert_id"], max_messages=300) is None  # older than the budget reaches
    assert locate.locate(kafka_topics, old["alert_id"], scan=True) == (home, 0)
    assert locate.locate(kafka_topics, old["alert_id"]) == (home, 0)  # within the default budget

    ledger = Ledger(store, f"{s3_prefix}/deliveries")
    part, offset = first
    run = _run("log", kafka_topics.alerts_topic, part, max(0, offset - 5), offset + 5, {offset: recent["alert_id"]})
    store.put(ledger.run_key("log", kafka_topics.alerts_topic, part, run.start), run.to_bytes())

    assert main(["explain", recent["alert_id"], "--json"]) == 0
    ex = json.loads(capsys.readouterr().out)
    assert ex["position"] == [part, offset] and ex["alert"]["order_id"] == "sb-recent"
    assert [(d["channel"], d["state"], d["run"]["start"]) for d in ex["deliveries"]] == [("log", "DELIVERED", run.start)]

    assert main(["deliveries", "show", recent["alert_id"]]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["position"] == [part, offset] and shown["channels"][0]["state"] == "DELIVERED"
