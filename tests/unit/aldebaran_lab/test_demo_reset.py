"""The demo's reset clears every piece of platform state (issue 38 item 4): the low-latency lane's topic
(`alerts.fast`, recreated like the others), its checkpoint generations, its keeper's heartbeat (which names
the generation to resume and where the reconciler resumes), its supervisor's state and the reconciler's
records. Kafka and the object store are replaced by fakes here (tests/integration/test_demo.py runs the real one)."""

from __future__ import annotations

from aldebaran.lanes import keeper
from aldebaran.settings import KafkaSettings
from aldebaran.storage.store import LocalStore
from aldebaran_lab import demo_platform


def test_the_reset_clears_the_lanes_checkpoint_heartbeat_supervisor_state_and_records(tmp_path, monkeypatch):
    monkeypatch.setenv("ALDEBARAN_LANES_NAME", "fastlane")
    monkeypatch.setenv("ALDEBARAN_LANES_CHECKPOINT", str(tmp_path / "ck"))
    store = LocalStore(tmp_path / "store")
    monkeypatch.setattr(keeper, "lane_store", lambda: store)
    for key in ("heartbeats/lane/fastlane.json", "supervisor/lane/fastlane.json",
                "lanes/fastlane/unconfirmed/a1.json", "lanes/fastlane/resolved/a0.json",
                # Not the lane's: kept.
                "heartbeats/lane/other.json", "lanes/other/unconfirmed/b1.json"):
        store.put(key, b"{}")
    for path in ("gen-1/offsets/3", "abandoned/20261128T000000Z-gen-0/offsets/1"):
        (tmp_path / "ck" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ck" / path).write_text("v1")

    assert demo_platform._reset_lane() == 4
    assert sorted(i["Key"] for i in store.list("")) == ["heartbeats/lane/other.json",
                                                         "lanes/other/unconfirmed/b1.json"]
    assert not (tmp_path / "ck").exists()


def test_the_reset_recreates_the_fast_alerts_topic_with_the_others(monkeypatch):
    kafka = KafkaSettings(trades_topic="trades", alerts_topic="alerts", dlq_topic="trades.dlq",
                          fast_alerts_topic="alerts.fast")
    calls = []
    monkeypatch.setattr(demo_platform.kadmin, "delete_topics", lambda k, topics: calls.append(("delete", topics)))
    monkeypatch.setattr(demo_platform.kadmin, "ensure_topics", lambda k, topics=None: calls.append(("create", topics)))
    monkeypatch.setattr(demo_platform, "_delete_groups", lambda k, groups: None)
    monkeypatch.setattr(demo_platform, "_wait_gone", lambda k, topics: calls.append(("gone", topics)))
    monkeypatch.setattr(demo_platform, "_reset_lane", lambda: 2)

    class Store:
        def delete_prefix(self, prefix):
            return 1

    monkeypatch.setattr("aldebaran.storage.store.open_store", lambda: Store())
    platform = demo_platform.Platform(kafka=kafka, bucket="b", checkpoint="s3a://b/ck", query="q",
                                      archive_prefix="archive", ledger_prefix="deliveries", channels=["log"],
                                      group_prefix="g")
    monkeypatch.setattr(demo_platform.Platform, "require_local", lambda self: None)
    monkeypatch.setattr(demo_platform.Platform, "state_prefixes", lambda self: ["a/", "b/"])
    out = demo_platform.reset(platform)
    topics = ["trades", "alerts", "trades.dlq", "alerts.fast"]
    assert calls == [("delete", topics), ("gone", topics), ("create", topics)]
    assert out["topics"] == topics and out["objects_removed"] == 4
