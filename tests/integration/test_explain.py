"""`aldebaran explain` on real Kafka, Spark and MinIO: the challenge's example (request 1 for 100 shares;
purchases of 90, 30 and 10) among other orders' trades, through the auditor and a dispatch to the log
channel. The explanation of order 1's OVERFILL must list exactly the request and the two purchases the
alert counts, at the partition and offset Kafka holds them, name the purchase of 30 as the trigger, and
show the delivery with its history — from the CLI and from the deliveries plugin's page alike.

A second order has more events than a book keeps coordinates for (aldebaran.audit.provenance.KEPT), so
its middle trades are found by the scan between the kept offsets; a redelivered purchase and an invalid
message with its key sit in that range and must not be listed."""

from __future__ import annotations

import json

import pytest

from aldebaran.audit import parse
from aldebaran.cli.main import main
from aldebaran.cli import explain as ex
from aldebaran.audit import provenance
from aldebaran.audit.findings import alert_id as alert_id_of
from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob import job
from aldebaran.delivery.channels import LogChannel
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.kafka import io as kio
from aldebaran.settings import load
from aldebaran_capacity import loadgen
from tests.integration.test_plugin import Tables
from tests.unit.plugins.test_plugin_unit import FakeUser, plugin  # noqa: F401  (fixture: the plugin module)


def _trades():
    """(key, value) in production order: order 1 is the challenge's example, interleaved with others;
    order "m" has 1 request + 8 purchases (more than KEPT + 1 events), a repeat and an invalid message."""
    r1, p90, p30, p10 = [(r.key, r.value) for r in loadgen.records(iter(loadgen.CHALLENGE_EXAMPLE))]
    other = lambda n: (f"x{n}".encode(), parse.encode(parse.request(f"x{n}", 5)))  # noqa: E731
    m = [(b"m", parse.encode(parse.request("m", 10)))]
    m += [(b"m", parse.encode(parse.purchase(f"m-{i}", "m", 1))) for i in range(7)]
    m.insert(4, (b"m", parse.encode(parse.purchase("m-1", "m", 1))))  # a redelivery: counted once
    m.insert(6, (b"m", b'{"id": "m-bad", "initial_order_id": "m", "#shares": -1}'))  # to the DLQ
    m.append((b"m", parse.encode(parse.purchase("m-7", "m", 10))))  # 7 + 10 > 10: OVERFILL here
    return [r1, other(1), other(2), p90, other(3), *m, p30, other(4), p10]


def _positions(kafka, topic):
    """(event id or None, partition, offset, shares) of every trades message, as Kafka holds it."""
    out = []
    for msg in kio.read_topic(kafka, topic):
        v = parse.validate(msg.value())
        out.append((None if isinstance(v, parse.Invalid) else v.event_id, msg.partition(), msg.offset(),
                    None if isinstance(v, parse.Invalid) else v.shares))
    return out


@pytest.mark.parametrize("plan", ["copartitioned", "shuffle"])
def test_explain_tells_the_story_of_the_challenge_alert(spark, kafka_topics, store, s3_prefix, checkpoint,
                                                        tmp_path, unique, plan, capsys, plugin):
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, _trades())
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="available-now", plan=plan,
                    archive_prefix=f"{s3_prefix}/archive", query_name=f"explain-{unique}")
    job.run(settings, spark=spark)

    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")
    stats = Dispatcher(ledger, [LogChannel("log", tmp_path / "alerts.jsonl")], kafka=kafka_topics,
                       group=f"g-{unique}").run_once(idle_timeout=2.0)
    assert stats.sent == {"log": 2}

    held = _positions(kafka_topics, kafka_topics.trades_topic)
    at = {(e, s): (p, o) for e, p, o, s in reversed(held)}  # an event's first message wins, as in the book

    # Order 1: exactly the request and the purchases of 90 and 30, where Kafka holds them; the 10 came later.
    story = ex.explain(alert_id_of("OVERFILL", "1"), ledger, kafka=kafka_topics)
    assert (story.alert["kind"], story.alert["purchased"], story.topic, story.events) == (
        "OVERFILL", 120, kafka_topics.trades_topic, 3)
    assert [(t.event_id, t.kind, t.shares, t.partition, t.offset) for t in story.trades] == [
        ("1", "request", 100, *at[("1", 100)]), ("2", "purchase", 90, *at[("2", 90)]),
        ("3", "purchase", 30, *at[("3", 30)])]
    assert [t.event_id for t in story.trades if t.trigger] == ["3"] and story.not_found == 0
    [log_view] = story.deliveries
    # The log channel commits runs like every channel: the alert is found in its run, with the run's history.
    assert (log_view["channel"], log_view["source"], log_view["state"]) == ("log", "run", "DELIVERED")
    assert [h["note"] for h in log_view["run"]["history"]] == ["claimed", "recorded"]

    # Order m: 9 events, 5 kept; the 4 in between found by the scan, the repeat and the invalid one not.
    big = ex.explain(alert_id_of("OVERFILL", "m"), ledger, kafka=kafka_topics)
    expected = [("m", 10)] + [(f"m-{i}", 1) for i in range(7)] + [("m-7", 10)]
    assert [(t.event_id, t.shares, t.partition, t.offset) for t in big.trades] == [
        (e, s, *at[(e, s)]) for e, s in expected]
    assert [t.found for t in big.trades] == ["kept"] * provenance.KEPT + ["scanned"] * 4 + ["kept"]
    assert [t.event_id for t in big.trades if t.trigger] == ["m-7"] and big.not_found == 0

    # The CLI prints the same story; an unknown id is a clear error with exit code 1.
    assert main(["explain", alert_id_of("OVERFILL", "1"), "--prefix", f"{s3_prefix}/deliveries"]) == 0
    text = capsys.readouterr().out
    p, o = at[("3", 30)]
    assert f"{p:>9} {o:>10}  3 " in text and "<- trigger" in text and "log: DELIVERED" in text
    assert main(["explain", alert_id_of("OVERFILL", "1"), "--json", "--prefix", f"{s3_prefix}/deliveries"]) == 0
    assert json.loads(capsys.readouterr().out)["trades"][2]["offset"] == o
    assert main(["explain", "0000not0an0alert", "--prefix", f"{s3_prefix}/deliveries"]) == 1

    # The plugin's page, through the plugin's own app (tests/unit/plugins/test_plugin_unit.py's HTTP path), shows it.
    from fastapi.testclient import TestClient

    app = plugin.create_app()
    app.dependency_overrides[plugin.ledger_backend] = lambda: store
    app.dependency_overrides[plugin.authorization()] = FakeUser
    page = TestClient(app).get("/deliveries/explain", params={"alert_id": alert_id_of("OVERFILL", "1"),
                                                              "ledger": f"{s3_prefix}/deliveries"})
    assert page.status_code == 200, page.text
    tables = Tables(page.text).tables
    assert [row[:5] for row in tables["trades"][1:]] == [
        [str(at[(e, s)][0]), str(at[(e, s)][1]), e, k, str(s)]
        for e, k, s in [("1", "request", 100), ("2", "purchase", 90), ("3", "purchase", 30)]]
    assert [row[6] for row in tables["trades"][1:]] == ["", "", "trigger"]
    assert tables["deliveries"][1][:2] == ["log", "DELIVERED"]
    assert [row[2] for row in tables["history-0"][1:]] == ["claimed", "recorded"]
