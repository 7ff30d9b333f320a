"""The audit rules and the semantics of BRIEF §2, driven through the state store (ShardStore) on local files.

Every expected value here is written out by hand from the brief, never computed by the code under
test.
"""

from __future__ import annotations

import random
import uuid

import pytest

from aldebaran.audit import reference
from aldebaran.audit import parse as events
from aldebaran.audit.findings import alert_id
from aldebaran.audit.rules import resolve
from aldebaran.audit.state import snapshots
from aldebaran.audit.state.store import _CACHE, Config, ShardStore
from aldebaran.exceptions import ConfigError
from aldebaran.model import Alert, Event

TTL = 1_000
GRACE = 500
NOW = 1_000_000  # processing time passed to every batch unless a test is about the fallback


# The challenge's example, as the brief gives it: a request for 100, then purchases of 90, 30 and 10.
CHALLENGE_EXAMPLE = [
    events.request(1, 100, "Sendence", "AAPL"),
    events.purchase(2, 1, 90, "Sendence", "AAPL"),
    events.purchase(3, 1, 30, "Sendence", "AAPL"),
    events.purchase(4, 1, 10, "Sendence", "AAPL"),
]


def original_mix(orders: int, seed: int) -> list[dict]:
    """Orders as the original publisher sent them: a request for 50..100, then 4 purchases of
    ``int(limit / 2 * random())`` shares each (the load generator's mix, written out here so the product's
    tests need not import the capacity package)."""
    rng = random.Random(seed)

    def new_id() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    out = []
    for _ in range(orders):
        limit = rng.randint(50, 100)
        amounts = [int(limit / 2 * rng.random()) for _ in range(4)]
        order_id = new_id()
        out.append(events.request(order_id, limit, "Goldman", "AAPL"))
        out += [events.purchase(new_id(), order_id, amount, "Goldman", "AAPL") for amount in amounts]
    return out


@pytest.fixture(autouse=True)
def _fresh_cache():
    _CACHE.clear()
    yield
    snapshots.wait_all()  # no snapshot child outlives its test's temp dir
    _CACHE.clear()


def pr(order_id, shares: int, ts: int = 0, client: str = "Sendence", stock: str = "AAPL") -> Event:
    return Event(events.REQUEST, str(order_id), str(order_id), shares, client, stock, ts)


def p(event_id, order_id, shares: int, ts: int = 0, client: str | None = "Sendence",
      stock: str | None = "AAPL") -> Event:
    return Event(events.PURCHASE, str(event_id), str(order_id), shares, client, stock, ts)


class Auditor:
    """One shard's books on a temp dir, fed batch after batch (batch ids 0, 1, 2, ...)."""

    def __init__(self, root, rules=("overfill",), ttl_ms: int = TTL, grace_ms: int = GRACE) -> None:
        self.store = ShardStore(Config(str(root), resolve(list(rules)), ttl_ms=ttl_ms, grace_ms=grace_ms), 0)
        self.batch_id = 0
        self.last = None

    def batch(self, *rows: Event, now_ms: int = NOW) -> list[Alert]:
        self.last = self.store.apply(self.batch_id, list(rows), now_ms=now_ms)
        self.batch_id += 1
        return self.last.alerts


def summary(alert: Alert) -> tuple:
    return (alert.kind, alert.order_id, alert.requested, alert.purchased, alert.purchase_count,
            alert.trigger_event_id)


# --- OVERFILL --------------------------------------------------------------------------------------
def test_challenge_example_one_overfill_triggered_by_purchase_3(tmp_path):
    a = Auditor(tmp_path)
    alerts = a.batch(pr(1, 100), p(2, 1, 90), p(3, 1, 30))
    assert [summary(x) for x in alerts] == [("OVERFILL", "1", 100, 120, 2, "3")]
    alert = alerts[0]
    assert alert.alert_id == alert_id("OVERFILL", "1")
    assert (alert.client, alert.stock) == ("Sendence", "AAPL")
    assert a.batch(p(4, 1, 10)) == []  # a later purchase never alerts again


def test_challenge_example_from_the_wire_in_one_batch(tmp_path):
    rows = reference.valid_events([events.encode(e) for e in CHALLENGE_EXAMPLE])
    alerts = Auditor(tmp_path).batch(*rows)
    assert [summary(x) for x in alerts] == [("OVERFILL", "1", 100, 120, 2, "3")]


def test_equal_is_not_over(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 100), p(2, 1, 60), p(3, 1, 40)) == []
    assert [summary(x) for x in a.batch(p(4, 1, 1))] == [("OVERFILL", "1", 100, 101, 3, "4")]


def test_purchases_before_request_fire_when_the_request_arrives(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(p(2, 1, 90), p(3, 1, 30)) == []
    alerts = a.batch(pr(1, 100))
    assert [summary(x) for x in alerts] == [("OVERFILL", "1", 100, 120, 2, "1")]
    assert alerts[0].trigger_event_ts == 0


def test_purchases_before_request_equal_do_not_fire(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(p(2, 1, 60), p(3, 1, 40), pr(1, 100)) == []
    assert [summary(x) for x in a.batch(p(4, 1, 5))] == [("OVERFILL", "1", 100, 105, 3, "4")]


def test_int_and_string_ids_are_the_same_order(tmp_path):
    msgs = [events.encode(events.request(7, 10)), events.encode(events.purchase("8", "7", 11))]
    alerts = Auditor(tmp_path).batch(*reference.valid_events(msgs))
    assert [summary(x) for x in alerts] == [("OVERFILL", "7", 10, 11, 1, "8")]


# --- zero shares (BRIEF §2, turn 2: `#shares` is an integer >= 0) ---------------------------------------
def test_zero_share_purchase_is_applied_and_counts_zero(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 10), p(2, 1, 0), p(3, 1, 10)) == []  # 0 + 10 = 10: equal is not over
    assert (a.last.applied, a.last.duplicates) == (3, 0)
    assert a.batch(p(4, 1, 0)) == []  # another 0: still 10
    assert [summary(x) for x in a.batch(p(5, 1, 1))] == [("OVERFILL", "1", 10, 11, 4, "5")]


def test_zero_share_request_and_zero_share_purchases_are_not_over(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 0), p(2, 1, 0), p(3, 1, 0)) == []
    assert [summary(x) for x in a.batch(p(4, 1, 1))] == [("OVERFILL", "1", 0, 1, 3, "4")]


def test_zero_share_purchase_before_its_request(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(p(2, 1, 0)) == []  # opens the book
    assert a.last.opened == 1
    assert a.batch(pr(1, 0)) == []  # 0 requested, 0 bought: equal, not over
    b = Auditor(tmp_path / "b")
    assert b.batch(p(2, 1, 0), p(3, 1, 6)) == []
    assert [summary(x) for x in b.batch(pr(1, 5))] == [("OVERFILL", "1", 5, 6, 2, "1")]


def test_zero_share_purchase_redelivered_counts_once(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 1), p(2, 1, 0), p(2, 1, 0)) == []
    assert a.last.duplicates == 1
    assert a.batch(p(3, 1, 1)) == []  # 2 purchases, 1 share: equal
    assert [summary(x) for x in a.batch(p(4, 1, 1))] == [("OVERFILL", "1", 1, 2, 3, "4")]


def test_zero_share_purchases_without_a_request_are_an_orphan(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(p(2, 1, 0, ts=0), p(3, 1, 0, ts=5)) == []
    alerts = a.batch(pr(9, 1, ts=TTL))
    assert [summary(x) for x in alerts] == [("ORPHAN", "1", None, 0, 2, "2")]


def test_zero_share_purchases_from_the_wire(tmp_path):
    msgs = [events.encode(e) for e in (events.request(1, 10), events.purchase(2, 1, 0), events.purchase(3, 1, 11))]
    rows = reference.valid_events(msgs)
    assert [r.shares for r in rows] == [10, 0, 11]
    assert [summary(x) for x in Auditor(tmp_path).batch(*rows)] == [("OVERFILL", "1", 10, 11, 2, "3")]


# --- duplicates ------------------------------------------------------------------------------------
def test_duplicate_event_id_counts_once(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 100), p(2, 1, 90), p(2, 1, 90)) == []
    assert a.last.duplicates == 1
    assert a.batch(p(2, 1, 90)) == []  # redelivered in a later batch: still once
    assert [summary(x) for x in a.batch(p(3, 1, 11))] == [("OVERFILL", "1", 100, 101, 2, "3")]


def test_duplicate_of_the_trigger_does_not_fire_again(tmp_path):
    a = Auditor(tmp_path)
    assert len(a.batch(pr(1, 10), p(2, 1, 11))) == 1
    assert a.batch(p(2, 1, 11), pr(1, 10)) == []


def test_second_request_is_a_duplicate_first_wins(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 100), p(2, 1, 60)) == []
    assert a.batch(pr(1, 50)) == []  # would make 60 > 50 if it replaced the first
    assert a.last.duplicates == 1
    assert [summary(x) for x in a.batch(p(3, 1, 41))] == [("OVERFILL", "1", 100, 101, 2, "3")]


# --- expiry ----------------------------------------------------------------------------------------
def test_orphan_once_at_expiry_then_state_dropped(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(p(2, 1, 5, ts=0), p(3, 1, 7, ts=10)) == []
    assert a.batch(pr(9, 10, ts=TTL - 1)) == []  # the clock at first_ts + ttl - 1: not yet
    assert a.last.open_books == 2
    alerts = a.batch(pr(10, 10, ts=TTL))  # the clock reaches first_ts + ttl
    assert [summary(x) for x in alerts] == [("ORPHAN", "1", None, 12, 2, "2")]
    assert alerts[0].alert_id == alert_id("ORPHAN", "1")
    assert alerts[0].trigger_event_ts == 0
    assert a.last.expired == 1
    assert a.batch(pr(11, 10, ts=5 * TTL)) == []  # never twice
    # The old book is gone: order 1 starts over, and can be an orphan again (same id).
    assert a.batch(p(4, 1, 1, ts=5 * TTL)) == []
    alerts = a.batch(pr(12, 10, ts=6 * TTL))
    assert [summary(x) for x in alerts] == [("ORPHAN", "1", None, 1, 1, "4")]
    assert alerts[0].alert_id == alert_id("ORPHAN", "1")


def test_no_orphan_for_request_without_purchases_or_within_limit(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 10, ts=0), pr(2, 10, ts=0), p(3, 2, 10, ts=1)) == []
    assert a.batch(pr(9, 1, ts=10 * TTL)) == []
    assert a.last.expired == 2


def test_expired_request_does_not_meet_a_later_purchase(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 100, ts=0), p(2, 1, 90, ts=1)) == []
    assert a.batch(pr(9, 1, ts=TTL)) == []  # order 1 expires (it held a request: no orphan)
    assert a.batch(p(3, 1, 30, ts=TTL + 1)) == []  # a new book for order 1: no request, no overfill
    alerts = a.batch(pr(10, 1, ts=2 * TTL + 1))
    assert [summary(x) for x in alerts] == [("ORPHAN", "1", None, 30, 1, "3")]


def test_expiry_decodes_only_the_books_a_rule_may_alert_on(tmp_path, monkeypatch):
    """A frozen book with its request is dropped at expiry without decoding it when every rule is quiet
    for such books (ORPHAN needs the request missing); an orphan is still decoded and alerts."""
    from aldebaran.audit.state import batchstep

    thawed: list[str] = []
    real_thaw = batchstep.thaw
    monkeypatch.setattr(batchstep, "thaw", lambda row, order_id: thawed.append(order_id) or real_thaw(row, order_id))
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 100, ts=0), p(2, 1, 90, ts=1), p(3, 7, 5, ts=2)) == []  # order 7: no request
    alerts = a.batch(pr(9, 1, ts=TTL + 5))  # orders 1 and 7 expire, frozen since the first batch
    assert [summary(x) for x in alerts] == [("ORPHAN", "7", None, 5, 1, "3")]
    assert a.last.expired == 2 and thawed == ["7"]
    # Shipped rules: OVERFILL/ORPHAN is quiet only with the request; MISMATCH never alerts at expiry.
    mixed = Auditor(tmp_path / "mixed", rules=("overfill", "mismatch"))
    assert [r.quiet_at_expiry(True) for r in mixed.store.config.rules] == [True, True]
    assert [r.quiet_at_expiry(False) for r in mixed.store.config.rules] == [False, True]

    # A rule that overrides on_expire without saying when it is quiet gets every book decoded.
    from aldebaran.audit.rules import Rule

    class AtExpiry(Rule):
        name, kinds = "at_expiry", ("X",)

        def on_expire(self, book):
            return None

    assert AtExpiry().quiet_at_expiry(True) is False and AtExpiry().quiet_at_expiry(False) is False


def test_frozen_rows_tell_whether_they_hold_a_request():
    from aldebaran.audit.findings import Book
    from aldebaran.audit.state.rows import freeze, request_known

    book = Book("1", 5, 6)
    assert request_known(freeze(book)) is False
    book.request = {"event_id": "1", "shares": 3, "client": "c", "stock": "s", "ts": 5}
    book.seen.append("1")
    assert request_known(freeze(book)) is True


def test_event_at_its_books_deadline_opens_a_new_book_even_in_the_same_batch(tmp_path):
    # One batch, no other order: the purchase at first_ts + ttl is past the book's lifetime.
    a = Auditor(tmp_path)
    alerts = a.batch(pr(1, 100, ts=0), p(2, 1, 90, ts=1), p(3, 1, 30, ts=TTL))
    assert alerts == []
    assert a.last.expired == 1
    alerts = a.batch(pr(9, 1, ts=3 * TTL))
    assert [summary(x) for x in alerts] == [("ORPHAN", "1", None, 30, 1, "3")]


def test_batch_boundaries_do_not_change_the_alerts(tmp_path):
    stream = [pr(1, 100, ts=0), p(2, 1, 60, ts=10), pr(5, 1, ts=TTL + 50), p(3, 1, 60, ts=TTL + 60),
              pr(6, 1, ts=3 * TTL)]
    expected = [("ORPHAN", "1", None, 60, 1, "3")]
    whole = Auditor(tmp_path / "whole")
    got = whole.batch(*stream)
    assert [summary(x) for x in got] == expected
    split = Auditor(tmp_path / "split")
    got = split.batch(*stream[:3]) + split.batch(*stream[3:])
    assert [summary(x) for x in got] == expected
    one_by_one = Auditor(tmp_path / "one")
    got = [x for row in stream for x in one_by_one.batch(row)]
    assert [summary(x) for x in got] == expected


def test_late_event_of_an_expired_order_is_an_orphan_of_its_own(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 10, ts=0), pr(2, 10, ts=2 * TTL)) == []
    alerts = a.batch(p(3, 1, 5, ts=5))  # late: its order is long expired; the new book is already due
    assert [summary(x) for x in alerts] == [("ORPHAN", "1", None, 5, 1, "3")]


def test_idle_stream_expires_on_processing_time(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(p(2, 1, 5, ts=0), now_ms=10_000) == []
    # No more events: the event-time clock stands still, processing time goes on.
    assert a.batch(now_ms=10_000 + TTL + GRACE - 1) == []
    alerts = a.batch(now_ms=10_000 + TTL + GRACE)
    assert [summary(x) for x in alerts] == [("ORPHAN", "1", None, 5, 1, "2")]
    assert a.batch(now_ms=10_000 + 10 * TTL) == []
    assert a.last.open_books == 0


def test_fallback_waits_while_the_event_clock_moves(tmp_path):
    """An auditor restarted after an outage catches up on a backlog: processing time is far past
    every book's fallback deadline, but the event clock is moving, so only event time expires books."""
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 100, ts=0), now_ms=10_000) == []
    late = 10_000 + 100 * TTL  # the restart, much later in processing time
    # The backlog continues within the ttl in event time: the request is still open, the overfill fires.
    assert a.batch(p(2, 1, 90, ts=100), now_ms=late) == []
    alerts = a.batch(p(3, 1, 30, ts=200), now_ms=late + 1)
    assert [summary(x) for x in alerts] == [("OVERFILL", "1", 100, 120, 2, "3")]
    # Once the event clock has stood still for the grace, the fallback expires what is left.
    moved = late + 1  # the last time the event clock moved
    assert a.batch(now_ms=moved + GRACE - 1) == [] and a.last.open_books == 1
    assert a.batch(now_ms=moved + GRACE) == [] and a.last.open_books == 0


# --- MISMATCH --------------------------------------------------------------------------------------
def test_mismatch_is_off_unless_selected(tmp_path):
    a = Auditor(tmp_path)
    assert a.batch(pr(1, 100), p(2, 1, 10, client="Other"), p(3, 1, 10, stock="MSFT")) == []


def test_mismatch_on_client_or_stock(tmp_path):
    a = Auditor(tmp_path, rules=("mismatch",))
    assert a.batch(pr(1, 100), p(2, 1, 10)) == []
    alerts = a.batch(p(3, 1, 10, stock="MSFT"), p(4, 1, 10, client="Other"))
    assert [summary(x) for x in alerts] == [("MISMATCH", "1", 100, 20, 2, "3")]
    assert alerts[0].alert_id == alert_id("MISMATCH", "1")
    assert a.batch(p(5, 1, 10, client="Third")) == []  # once per order
    b = Auditor(tmp_path / "client", rules=("mismatch",))
    assert [summary(x) for x in b.batch(pr(1, 100), p(2, 1, 10, client="Other"))] == [
        ("MISMATCH", "1", 100, 10, 1, "2")]


def test_mismatch_ignores_absent_fields(tmp_path):
    a = Auditor(tmp_path, rules=("mismatch",))
    assert a.batch(pr(1, 100), p(2, 1, 10, client=None, stock=None), p(3, 1, 10, client=None)) == []
    assert [summary(x) for x in a.batch(p(4, 1, 10, client=None, stock="MSFT"))] == [
        ("MISMATCH", "1", 100, 30, 3, "4")]


def test_mismatch_of_a_purchase_before_the_request(tmp_path):
    a = Auditor(tmp_path, rules=("mismatch",))
    assert a.batch(p(2, 1, 10), p(3, 1, 10, client="Other")) == []
    alerts = a.batch(pr(1, 100))
    assert [summary(x) for x in alerts] == [("MISMATCH", "1", 100, 20, 2, "1")]
    assert a.batch(p(4, 1, 10, stock="MSFT")) == []


def test_mismatch_many_distinct_pairs_before_the_request(tmp_path):
    a = Auditor(tmp_path, rules=("mismatch",))
    compatible = [(None, None), ("Sendence", None), (None, "AAPL"), ("Sendence", "AAPL")]
    rows = [p(100 + i, 1, 1, client=c, stock=s) for i, (c, s) in enumerate(compatible * 3)]
    assert a.batch(*rows, pr(1, 100)) == []
    b = Auditor(tmp_path / "b", rules=("mismatch",))
    rows = rows + [p(200, 1, 1, client="Other")]
    assert [summary(x) for x in b.batch(*rows, pr(1, 100))] == [("MISMATCH", "1", 100, 13, 13, "1")]


def test_both_rules_on_one_order(tmp_path):
    a = Auditor(tmp_path, rules=("overfill", "mismatch"))
    alerts = a.batch(pr(1, 10), p(2, 1, 11, stock="MSFT"))
    assert sorted(summary(x) for x in alerts) == [("MISMATCH", "1", 10, 11, 1, "2"), ("OVERFILL", "1", 10, 11, 1, "2")]
    assert len({x.alert_id for x in alerts}) == 2
    assert {x.extra["rule"] for x in alerts} == {"overfill", "mismatch"}


# --- ids and replays -------------------------------------------------------------------------------
def test_alert_id_is_a_function_of_kind_and_order():
    assert alert_id("OVERFILL", "1") == alert_id("OVERFILL", "1")
    assert len({alert_id("OVERFILL", "1"), alert_id("ORPHAN", "1"), alert_id("OVERFILL", "2")}) == 3


def test_replay_gives_the_same_alerts_and_ids(tmp_path):
    msgs = [events.encode(e) for e in CHALLENGE_EXAMPLE + original_mix(200, seed=3)]
    rows = reference.valid_events(msgs)
    runs = []
    for run in ("first", "replay"):
        a = Auditor(tmp_path / run, rules=("overfill", "mismatch"), ttl_ms=10**12)
        alerts = [x for i in range(0, len(rows), 97) for x in a.batch(*rows[i:i + 97])]
        alerts += a.batch(pr("flush", 1, ts=10**13))  # the clock passes every deadline: orphans out
        runs.append(sorted(reference.key(x) for x in alerts))
    assert runs[0] == runs[1]
    assert len(runs[0]) == len({k[0] for k in runs[0]}) > 50  # one alert per id, and plenty of them
    expected = reference.expected_alerts(msgs + [events.encode(events.request("flush", 1, ts=10**13))],
                                         ttl_ms=10**12, rules=("overfill", "mismatch"))
    assert runs[0] == sorted(reference.key(x) for x in expected)


def test_resolve_rejects_unknown_rules():
    assert [r.name for r in resolve(["overfill", "mismatch"])] == ["overfill", "mismatch"]
    with pytest.raises(ConfigError, match="nosuch"):
        resolve(["nosuch"])
    with pytest.raises(ConfigError):
        resolve([])
