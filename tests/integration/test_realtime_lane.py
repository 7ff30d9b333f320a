"""The low-latency lane (issue 19) on real Kafka, run as in production: spark-submit of the Spark 4.3 runtime
in real-time mode. Needs `make setup` (the runtime) and the services: neither is skipped when missing, the
fixtures fail (services_up) and so does the launcher (SetupError naming the runtime's path)."""

from __future__ import annotations

import json
import subprocess

import pytest

from aldebaran.audit import reference
from aldebaran.audit import parse
from aldebaran.audit.findings import alert_id as alert_id_of
from aldebaran.kafka import io as kio
from aldebaran.lanes.launch import Lane
from aldebaran.lanes.launch import stop as stop_lane
from aldebaran_capacity import loadgen
from tests.conftest import assert_eventually


@pytest.fixture
def lane(kafka_topics, tmp_path):
    """The lane over this test's topics, from the earliest offset; stopped (its process group) at the end."""
    spec = Lane(checkpoint=str(tmp_path / "lane"), trades_topic=kafka_topics.trades_topic,
                alerts_topic=kafka_topics.alerts_topic, starting_offsets="earliest", checkpoint_interval="10 seconds")
    log_path = tmp_path / "lane.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(spec.argv(), env=spec.env(), stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
    proc.log_path = log_path
    yield proc
    stop_lane(proc)


def _alerts(settings) -> list[dict]:
    return [json.loads(m.value()) for m in kio.read_topic(settings, settings.alerts_topic, idle=1.0)]


def _key(alert: dict) -> tuple:
    return tuple(alert[f] for f in reference.KEY_FIELDS)


def _running(proc) -> None:
    if proc.poll() is not None:
        tail = proc.log_path.read_text(errors="replace").splitlines()[-40:]
        raise AssertionError(f"the lane exited with {proc.returncode}:\n" + "\n".join(tail))


def test_lane_alerts_once_like_the_exact_lane(kafka_topics, lane):
    trades = [
        *loadgen.CHALLENGE_EXAMPLE[:3],  # request 1 for 100; purchases 90, 30 → over
        parse.purchase(3, 1, 30, "Sendence", "AAPL"),  # purchase 3 redelivered: counts once
        # Order 7: purchases before their request; the alert fires when the request arrives.
        parse.purchase(71, 7, 40, "Acme", "MSFT"),
        parse.purchase(72, 7, 30, "Acme", "MSFT"),
        parse.request(7, 60, "Acme", "MSFT"),
        parse.request(7, 500, "Acme", "MSFT"),  # a second request for 7: a duplicate, the first wins
        # Order 8: equal is not over; a duplicate purchase does not push it over.
        parse.request(8, 50, "Globex", "IBM"),
        parse.purchase(81, 8, 50, "Globex", "IBM"),
        parse.purchase(81, 8, 50, "Globex", "IBM"),
        # Order 9: purchases only — an ORPHAN at expiry, which this lane leaves to the exact lane.
        parse.purchase(91, 9, 5, "Initech", "TSLA"),
    ]
    recs = list(loadgen.records(trades))
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in recs])
    stamps = [0] * len(recs)  # KEY_FIELDS hold no time
    expected = reference.expected_alerts(list(zip((r.value for r in recs), stamps)))
    assert {a["order_id"] for a in expected} == {"1", "7"}

    def both_alerts():
        _running(lane)
        got = _alerts(kafka_topics)
        assert len(got) >= 2, got
        return got

    got = assert_eventually(both_alerts, timeout=180, interval=2, message="the lane's two alerts")
    assert sorted(_key(a) for a in got) == sorted(_key(a) for a in expected)
    by_order = {a["order_id"]: a for a in got}
    # The challenge's alert, with the exact lane's id (the ledger collapses both lanes' copies).
    assert (by_order["1"]["kind"], by_order["1"]["requested"], by_order["1"]["purchased"],
            by_order["1"]["trigger_event_id"]) == ("OVERFILL", 100, 120, "3")
    assert by_order["1"]["alert_id"] == alert_id_of("OVERFILL", "1")
    assert by_order["7"]["trigger_event_id"] == "7" and by_order["7"]["requested"] == 60
    assert {a["lane"] for a in got} == {"realtime"}

    # The challenge's last purchase of 10 arrives later: the book is still over, but it alerts once.
    late = list(loadgen.records(loadgen.CHALLENGE_EXAMPLE[3:]))
    # A marker order, overfilled, keyed like order 1 so that it shares its partition and is read after it.
    marker = [parse.request(10, 1, "Acme", "IBM"), parse.purchase(101, 10, 2, "Acme", "IBM")]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                         [(r.key, r.value) for r in late] + [(late[0].key, parse.encode(e)) for e in marker])

    def marker_alert():
        _running(lane)
        got = _alerts(kafka_topics)
        assert "10" in {a["order_id"] for a in got}, got
        return got

    # Once the marker's alert is there, order 1's late purchase has been through the lane too.
    got = assert_eventually(marker_alert, timeout=60, interval=1, message="the marker order's alert")
    assert sorted(a["order_id"] for a in got) == ["1", "10", "7"]
