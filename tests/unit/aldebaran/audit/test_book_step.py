"""The pure book step (aldebaran.audit.book) driven directly: a Book and events in, alerts out, no
files, no store, no Spark. Expected values are written out by hand from docs/design.md § Contracts."""

from __future__ import annotations

from aldebaran.audit import parse as events
from aldebaran.audit import book as step
from aldebaran.audit.findings import Book, Finding, alert_id, alert_json
from aldebaran.model import Event
from aldebaran.audit.rules import Rule, resolve

NOW = 42


def pr(order_id: str, shares: int, ts: int = 0) -> Event:
    return Event(events.REQUEST, order_id, order_id, shares, "Sendence", "AAPL", ts)


def p(event_id: str, order_id: str, shares: int, ts: int = 0, stock: str = "AAPL") -> Event:
    return Event(events.PURCHASE, event_id, order_id, shares, "Sendence", stock, ts)


def test_the_challenge_example_fires_once_on_the_third_event():
    book, rules = Book("1", 0, NOW), resolve(["overfill"])
    assert step.apply(book, pr("1", 100), rules, NOW) == []
    assert step.apply(book, p("2", "1", 90, ts=1), rules, NOW) == []
    [alert] = step.apply(book, p("3", "1", 30, ts=2), rules, NOW)
    assert alert.to_dict() == {"alert_id": alert_id("OVERFILL", "1"), "kind": "OVERFILL", "rule": "overfill", "order_id": "1",
                     "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2,
                     "trigger_event_id": "3", "trigger_event_ts": 2, "detected_at": NOW,
                     "message": "purchased 120 shares of 100 requested in 2 purchases"}
    assert step.apply(book, p("4", "1", 5, ts=3), rules, NOW) == []  # never again for this order
    assert (book.purchased, book.purchase_count, book.fired) == (125, 3, ["OVERFILL"])
    # The bytes on the alerts topic, written out by hand: a newer auditor replaying an older run's input
    # writes exactly what that run wrote (rule right after kind, message last).
    assert alert_json(alert) == (
        '{"alert_id":"%s","kind":"OVERFILL","rule":"overfill","order_id":"1","client":"Sendence","stock":"AAPL",'
        '"requested":100,"purchased":120,"purchase_count":2,"trigger_event_id":"3","trigger_event_ts":2,'
        '"detected_at":42,"message":"purchased 120 shares of 100 requested in 2 purchases"}' % alert_id("OVERFILL", "1"))


def test_a_seen_event_counts_once_and_step_says_so():
    book, rules, alerts = Book("1", 0, NOW), resolve(["overfill"]), []
    assert step.step(book, p("2", "1", 10), rules, NOW, alerts) is True
    assert step.step(book, p("2", "1", 10), rules, NOW, alerts) is False
    assert (book.purchased, book.purchase_count, book.seen, alerts) == (10, 1, ["2"], [])


def test_the_first_request_wins():
    book, rules = Book("1", 0, NOW), resolve(["overfill"])
    step.apply(book, pr("1", 10, ts=0), rules, NOW)
    step.apply(book, pr("1", 500, ts=1), rules, NOW)  # a second request for the order: its id again
    assert book.request["shares"] == 10 and book.request["ts"] == 0


def test_purchases_before_the_request_fire_when_it_arrives():
    book, rules = Book("1", 0, NOW), resolve(["overfill"])
    assert step.apply(book, p("2", "1", 60, ts=0), rules, NOW) == []
    assert step.apply(book, p("3", "1", 50, ts=1), rules, NOW) == []
    [alert] = step.apply(book, pr("1", 100, ts=2), rules, NOW)
    assert (alert.kind, alert.purchased, alert.trigger_event_id) == ("OVERFILL", 110, "1")


def test_expiry_of_purchases_without_a_request_is_one_orphan():
    book, rules = Book("9", 0, NOW), resolve(["overfill"])
    step.apply(book, p("a", "9", 7, ts=0), rules, NOW)
    step.apply(book, p("b", "9", 0, ts=1), rules, NOW)
    [alert] = step.expire(book, rules, NOW)
    assert (alert.kind, alert.requested, alert.purchased, alert.purchase_count,
            alert.trigger_event_id, alert.extra["message"]) == ("ORPHAN", None, 7, 2, "a",
                                                             "purchased 7 shares without a request")
    assert step.expire(Book("8", 0, NOW), rules, NOW) == []  # an empty book says nothing


def test_mismatch_and_overfill_on_one_book():
    book, rules = Book("1", 0, NOW), resolve(["overfill", "mismatch"])
    step.apply(book, pr("1", 10), rules, NOW)
    kinds = [a.kind for a in step.apply(book, p("2", "1", 11, stock="MSFT"), rules, NOW)]
    assert kinds == ["OVERFILL", "MISMATCH"]


class Shouty(Rule):
    """A rule that fires on every event: the step still lets one alert per (kind, order) out."""

    name, kinds = "shouty", ("SHOUT",)

    def on_event(self, book, event):
        return Finding("SHOUT", book.order_id, event.event_id, event.event_ts, "again")


def test_a_rule_that_always_fires_gets_one_alert_per_kind_and_order():
    book = Book("1", 0, NOW)
    assert [a.trigger_event_id for a in step.apply(book, p("2", "1", 1), [Shouty()], NOW)] == ["2"]
    assert step.apply(book, p("3", "1", 1), [Shouty()], NOW) == []
