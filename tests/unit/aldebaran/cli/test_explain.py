"""`aldebaran explain`, the parts without services: the bounded trail a book keeps (the pure step), its
header, and how explain puts the trades back together. Against real Kafka, Spark and MinIO:
tests/integration/test_explain.py."""

from __future__ import annotations

import json

import pytest

from aldebaran.audit import parse as events
from aldebaran.cli import main as cli
from aldebaran.cli import story
from aldebaran.audit import book as step
from aldebaran.audit import provenance
from aldebaran.audit.findings import Book
from aldebaran.audit.rules import resolve
from aldebaran.audit.sparkjob.rows import alert_records
from aldebaran.audit.state.rows import freeze, thaw
from aldebaran.audit.state.store import Config, ShardStore
from aldebaran.model import Event

RULES = resolve(["overfill"])
CONTRACT = {"alert_id", "kind", "rule", "order_id", "client", "stock", "requested", "purchased", "purchase_count",
            "trigger_event_id", "trigger_event_ts", "detected_at", "message"}


def req(order: str, shares: int, partition: int, offset: int, ts: int = 1) -> Event:
    return Event(events.REQUEST, order, order, shares, "Sendence", "AAPL", ts, partition, offset)


def buy(event_id: str, order: str, shares: int, partition: int, offset: int, ts: int = 2) -> Event:
    return Event(events.PURCHASE, event_id, order, shares, "Sendence", "AAPL", ts, partition, offset)


def test_the_challenge_example_alert_carries_its_three_trades_and_not_the_later_one():
    book, trails = Book("1", 1, 0), []
    alerts = []
    for ev in [req("1", 100, 1, 40), buy("2", "1", 90, 1, 41), buy("3", "1", 30, 1, 57), buy("4", "1", 10, 1, 60)]:
        step.step(book, ev, RULES, 0, alerts, trails)
    assert [a.trigger_event_id for a in alerts] == ["3"]
    assert trails == [(3, [(1, 40), (1, 41), (1, 57)])]  # as of the purchase of 30, not the later 10


def test_a_book_keeps_its_first_events_and_its_latest_at_most():
    book = Book("o", 1, 0)
    offsets = [100, 103, 107, 110, 111, 150, 170, 171]
    for i, off in enumerate(offsets):
        step.apply(book, buy(f"p{i}", "o", 1, 0, off), [], 0)
    step.apply(book, buy("p3", "o", 1, 0, 999), [], 0)  # a duplicate records nothing
    assert len(book.coords) == provenance.KEPT + 2 == 6
    assert book.coords == [0, 100, 3, 7, 10, 71]
    events_applied, at = provenance.trail(book)
    assert (events_applied, at) == (8, [(0, 100), (0, 103), (0, 107), (0, 110), (0, 171)])
    sources = provenance.decode(provenance.encode("trades", (events_applied, at)))
    assert sources == provenance.Sources("trades", 8, ((0, 100), (0, 103), (0, 107), (0, 110), (0, 171)))
    assert not sources.complete and sources.missing == 3 and sources.gap() == (0, 110, 171)
    assert thaw(freeze(book), "o").coords == book.coords


def test_an_event_from_another_partition_is_kept_whole_and_an_unbounded_gap_is_not_searched():
    book = Book("o", 1, 0)
    for i, (p, off) in enumerate([(0, 10), (1, 5), (0, 12), (0, 13), (0, 20), (1, 9)]):
        step.apply(book, buy(f"p{i}", "o", 1, p, off), [], 0)
    assert book.coords == [0, 10, [1, 5], 2, 3, [1, 9]]
    applied, at = provenance.trail(book)
    sources = provenance.Sources("t", applied, tuple(at))
    assert sources.at[-1] == (1, 9) and sources.gap() == (1, 5, 9)
    assert provenance.Sources("t", 7, ((0, 1), (0, 2), (0, 3), (0, 4), (1, 9))).gap() is None


def test_the_header_is_apart_from_the_alert_contract_and_garbage_is_an_error():
    store = ShardStore(Config("/nonexistent", RULES, snapshot_every=0), 0)
    store.files = _NullFiles()
    out = store.apply(0, [req("1", 100, 0, 7), buy("2", "1", 120, 0, 9)], now_ms=5)
    [record] = alert_records(out, 0, "trades")
    assert set(json.loads(record["alert_json"])) == CONTRACT  # no field added to the alert
    assert json.loads(record["sources"]) == {"topic": "trades", "events": 2, "at": [[0, 7], [0, 9]]}
    with pytest.raises(ValueError, match="aldebaran.sources"):
        provenance.decode(b'{"topic": "t"}')
    assert provenance.from_headers([("other", b"x")]) is None


def test_an_orphan_at_expiry_gets_the_trail_of_its_book():
    store = ShardStore(Config("/nonexistent", RULES, ttl_ms=10, snapshot_every=0), 0)
    store.files = _NullFiles()
    store.apply(0, [buy("p1", "o", 5, 1, 3), buy("p2", "o", 6, 1, 4)], now_ms=5)
    out = store.apply(1, [req("other", 1, 1, 30, ts=100)], now_ms=6)
    assert [a.kind for a in out.alerts] == ["ORPHAN"]
    assert out.trails == [(2, [(1, 3), (1, 4)])]


def msg(offset: int, value: dict | bytes, partition: int = 0) -> tuple:
    raw = value if isinstance(value, bytes) else events.encode(value)
    return partition, offset, raw, 1000 + offset


def test_the_scan_keeps_this_orders_valid_trades_once_each_up_to_the_missing_count():
    messages = [
        msg(11, events.purchase("x1", "other", 5)),
        msg(12, b"{not json"),
        msg(13, events.purchase("p5", "o", 7)),
        msg(14, events.purchase("p1", "o", 9)),  # a repeat of a kept event: the book counted it once
        msg(15, events.purchase("p5", "o", 7)),  # a repeat of one found here
        msg(16, events.purchase("p6", "o", 8)),
        msg(17, events.purchase("p7", "o", 1)),  # more than the book had: not read
    ]
    found = story.pick(iter(messages), "o", {"p1"}, 2)
    assert [(t.offset, t.event_id, t.kind, t.shares, t.found) for t in found] == [
        (13, "p5", "purchase", 7, "scanned"), (16, "p6", "purchase", 8, "scanned")]


def entry(offset: int, event_id: str, kind: str, shares: int, **fields) -> story.Entry:
    ev = Event(kind, event_id, "1", shares, "Sendence", "AAPL", 1000 + offset, 0, offset)
    return story.Entry(0, offset, ev, 1000 + offset, **fields)


def test_assemble_puts_the_scanned_trades_before_the_latest_and_marks_the_trigger():
    kept = [entry(o, f"e{o}", events.PURCHASE, 1) for o in (1, 2, 3, 4, 9)]
    scanned = [entry(6, "e6", events.PURCHASE, 1, found="scanned")]
    sources = provenance.Sources("t", 6, tuple((0, t.offset) for t in kept))
    trades = story.assemble(kept, scanned, sources, {"trigger_event_id": "e9"})
    assert [t.offset for t in trades] == [1, 2, 3, 4, 6, 9]
    assert [t.offset for t in trades if t.trigger] == [9]


def test_the_text_names_every_trade_the_trigger_and_each_channels_history():
    alert = {"alert_id": "a1", "kind": "OVERFILL", "order_id": "1", "client": "Sendence", "stock": "AAPL",
             "requested": 100, "purchased": 120, "purchase_count": 2, "trigger_event_id": "3",
             "trigger_event_ts": 1_700_000_000_000, "detected_at": 1_700_000_000_500, "message": "m"}
    trades = [entry(4, "1", events.REQUEST, 100), entry(5, "2", events.PURCHASE, 90),
              entry(6, "3", events.PURCHASE, 30, trigger=True), story.Entry(0, 7, note="no longer in the topic")]
    e = story.Explanation("a1", alert, (1, 0), "trades", 3, trades,
                       deliveries=[{"channel": "sms", "source": "record", "state": "IN_DOUBT", "attempt": 1,
                                    "history": [{"at": 1_700_000_001, "state": "IN_DOUBT", "note": "timeout"}]}])
    story.check(e)
    text = story.render_text(e)
    assert "the 2 purchases listed add up to 120 shares" in text
    assert "<- trigger" in [line for line in text.splitlines() if " 6  " in line][0]
    assert "sms: IN_DOUBT" in text and "IN_DOUBT timeout" in text
    # `--json` lists each trade flat, the event's fields beside where it lies (the page and scripts read them).
    assert e.to_dict()["trades"][2] == {"partition": 0, "offset": 6, "event_id": "3", "kind": "purchase",
                                        "shares": 30, "order_id": "1", "kafka_ts": 1006, "found": "kept",
                                        "trigger": True, "note": None}
    assert e.to_dict()["trades"][3]["event_id"] is None and e.to_dict()["trades"][3]["offset"] == 7


def test_a_delivery_inside_a_group_commit_run_shows_the_runs_history():
    run = {"partition": 0, "start": 40, "end": 41, "state": "RECORDED", "epoch": 2, "owner": "w1",
           "history": [{"at": 1_700_000_000, "note": "claimed"}, {"at": 1_700_000_001, "note": "recorded"}]}
    e = story.Explanation("a1", {"alert_id": "a1"}, deliveries=[
        {"channel": "webhook", "source": "run", "state": "DELIVERED", "run": run},
        {"channel": "bus", "state": "PENDING", "note": "not yet in a run on this channel"}])
    text = story.render_text(e)
    assert "webhook: DELIVERED (run 0:40-41 RECORDED epoch 2)" in text
    assert "  claimed" in text and "  recorded" in text
    assert "bus: PENDING (not yet in a run on this channel)" in text


def test_an_unknown_alert_is_a_clear_message_and_exit_code_1(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ALDEBARAN_DELIVERY_STORE", str(tmp_path / "ledger"))
    monkeypatch.setattr("aldebaran.delivery.tools.locate_alert", lambda alert_id, timeout=30.0, scan=False: None)
    assert cli.main(["explain", "0123456789abcdef"]) == 1
    assert "no alert '0123456789abcdef' on the alerts topic" in caplog.text
    assert "Traceback" not in caplog.text


class _NullFiles:
    """Stands in for the state files: these tests look at alerts and trails, not at persistence."""

    def put(self, name, data) -> None:
        pass
