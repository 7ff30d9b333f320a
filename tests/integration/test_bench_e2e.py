"""`aldebaran bench e2e` for real, tiny: one rate (500 trades/s for 5 s, custom mix) through the
auditor, three streaming dispatcher processes and the recipients (webhook and SMS receiver processes,
a Kafka bus topic). Asserts the result's structure and that every recipient got each expected alert
exactly once — never a figure (figures belong to `make bench`)."""

from __future__ import annotations

from aldebaran_capacity.bench import e2e
from tests.conftest import assert_eventually


def test_every_recipient_gets_each_expected_alert_exactly_once(services_up, spark):
    from aldebaran.runtime.heartbeat import DISPATCHER, prefix
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.kafka import admin as kadmin
    from aldebaran.settings import KafkaSettings, load
    from aldebaran.storage.store import open_store

    out = e2e.run(spark, [500], seconds=5.0, mix=e2e.custom_mix(0.5), warmup=(200, 2.0), final_drain_s=90.0)

    assert out["auditor"]["correct"], out["auditor"]
    assert out["auditor"]["expected"] > 100  # ~1 alert per 10 trades, warm-up included
    assert set(out["channels"]) == {"webhook", "bus", "sms"}
    for name, c in out["channels"].items():
        k = c["counts"]
        assert k["expected"] == out["auditor"]["expected"], name
        assert k["received_once"] == k["received"] == k["expected"], (name, k)
        assert (k["duplicates"], k["missing"], k["lost"], k["unexpected"]) == (0, 0, 0, 0), (name, k)
        assert c["duplicates"] == 0 and c["lost"] == 0
    assert out["correct"] is True
    warmup, seg = out["segments"]
    assert warmup["warmup"] and not seg["warmup"] and seg["rate"] == 500
    assert seg["trades"] >= 2_400 and seg["alerts"] > 0
    for name in ("webhook", "bus", "sms"):
        ch = seg["channels"][name]
        assert ch["received"] == seg["alerts"], (name, ch)
        assert ch["timed"] == seg["alerts"] and ch["p50_ms"] <= ch["p99_ms"]
    assert seg["alerts_topic"]["emitted"] == seg["alerts"]
    assert out["backlog"] and {"t", "webhook", "bus", "sms"} <= set().union(*out["backlog"])
    # Clean: the run's topics, ledger, archive and dispatcher heartbeats are gone.
    kafka = load(KafkaSettings)
    store = open_store(load(DeliverySettings).store)

    def cleaned() -> None:
        topics = kadmin.admin(kafka).list_topics(timeout=10).topics
        assert not [t for t in topics if t.startswith(f"bench-{out['tag']}-")]

    assert_eventually(cleaned, timeout=30, message="the run's topics deleted")
    assert not list(store.list(f"bench/{out['tag']}/"))
    assert not [o for o in store.list(prefix(DISPATCHER)) if out["tag"] in o["Key"]]
