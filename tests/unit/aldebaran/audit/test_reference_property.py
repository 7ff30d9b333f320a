"""Property: any stream, cut into any micro-batches, through the books (with restarts and re-executed
batches thrown in) gives exactly the reference model's alerts.

Streams mix requests and purchases over a few order ids (int and string spellings of the same id),
redeliveries of earlier messages, reused event ids, late requests, invalid messages, share sizes
around the request (so equal and over both happen; 0 included, valid since turn 2), clients/stocks that sometimes differ or are
absent, and event times that jump (so books expire and orders re-open) or arrive late. Both rules
are on. Processing time is held still, so only event time expires books (the idle fallback has its
own unit test).
"""

from __future__ import annotations

import copy
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aldebaran.audit import reference
from aldebaran.audit import parse as events
from aldebaran.audit.rules import resolve
from aldebaran.audit.state import snapshots
from aldebaran.audit.state.store import _CACHE, Config, ShardStore
from aldebaran.model import Alert

TTL = 100
# Book files on tmpfs when there is one: fsync is then nearly free, so the many runs of shrinking stay fast.
STATE_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
NOW = 10**12
RULES = ("overfill", "mismatch")

order_ids = st.sampled_from([1, "1", "1", 2, "2", "x"])
parties = st.sampled_from([("C", "S"), ("C", "S"), ("C", "S"), ("D", "S"), ("C", "T"), (None, None), (None, "T")])
time_steps = st.sampled_from([0, 0, 0, 0, 1, 1, 2, 5, 10, 20, 50, 99, 100, 101])

request = st.tuples(st.just("request"), order_ids, st.integers(0, 10), parties)
purchase = st.tuples(st.just("purchase"), order_ids, st.integers(0, 5), parties)
redelivery = st.tuples(st.just("redeliver"), st.integers(0, 10**6))  # an earlier message, again
reused_id = st.tuples(st.just("reuse_id"), st.integers(0, 10**6), st.integers(0, 5))  # same id, other content
invalid = st.tuples(st.just("invalid"), st.sampled_from([
    b"not json", b"[]", b'{"id":"9","#shares":-1,"client":"C","stock":"S"}',
    b'{"id":"p0","initial_order_id":"1","#shares":-1}', b'{"id":"p0","initial_order_id":"1","#shares":0.0}']))
action = st.one_of(request, request, purchase, purchase, purchase, purchase, redelivery, reused_id, invalid)
step = st.tuples(action, time_steps, st.integers(0, 150), st.sampled_from([False, False, False, True]), st.booleans())
# (what, how far the clock moves, how late if late, late?, `ts` in the message (else the Kafka timestamp))


def build(steps) -> list[tuple[bytes, int]]:
    """The messages (value, Kafka timestamp) of a drawn stream."""
    out: list[tuple[bytes, int]] = []
    valid: list[dict] = []
    clock = 1_000
    n = 0
    for act, dt, lateness, late, ts_in_message in steps:
        clock += dt
        ts = max(0, clock - lateness) if late else clock
        kind = act[0]
        if kind == "invalid":
            out.append((act[1], ts))
            continue
        if kind == "request":
            _, oid, shares, (client, stock) = act
            msg = events.request(oid, shares, client or "C", stock or "S")
        elif kind == "purchase":
            _, oid, shares, (client, stock) = act
            n += 1
            msg = {"id": f"p{n}", "initial_order_id": oid, "#shares": shares}
            if client is not None:
                msg["client"] = client
            if stock is not None:
                msg["stock"] = stock
        elif not valid:
            continue
        elif kind == "redeliver":
            msg = dict(valid[act[1] % len(valid)])
            msg.pop("ts", None)
        else:  # reuse_id
            msg = dict(valid[act[1] % len(valid)], **{"#shares": act[2]})
            msg.pop("ts", None)
        valid.append(msg)
        if ts_in_message:
            msg = dict(msg, ts=ts)
        out.append((events.encode(msg), ts if not ts_in_message else clock + 7))  # Kafka ts unused then
    return out


def dying(rows, after: int):
    yield from rows[:after]
    raise RuntimeError("task killed")


def full_key(alert: Alert | dict) -> tuple:
    """The auditor's alerts are typed, the reference model's are dicts: compared on the same fields."""
    fields = alert.to_dict() if isinstance(alert, Alert) else alert
    return reference.key(alert) + (fields["client"], fields["stock"], fields["trigger_event_ts"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=10, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=10),
    mishaps=st.lists(st.sampled_from(["none", "none", "none", "restart", "retry-cold", "retry-warm", "crash",
                                      "stale-worker"]), min_size=10, max_size=10),
    snapshot_every=st.sampled_from([0, 1, 2, 3, 20]),
)
def test_books_equal_the_reference_model(steps, cuts, mishaps, snapshot_every):
    messages = build(steps)
    bounds = sorted({0, len(messages), *(c for c in cuts if c < len(messages))})
    batches = [messages[a:b] for a, b in zip(bounds, bounds[1:])]

    _CACHE.clear()
    with tempfile.TemporaryDirectory(prefix="aldebaran-books-", dir=STATE_DIR) as root:
        config = Config(root, resolve(list(RULES)), ttl_ms=TTL, grace_ms=0, snapshot_every=snapshot_every)
        got: list[Alert] = []
        history = []  # this process's cached shard after each batch: "another worker" lagging behind
        for batch_id, batch in enumerate(batches):
            rows = reference.valid_events(batch)
            mishap = mishaps[batch_id % len(mishaps)]
            if mishap == "restart":
                _CACHE.clear()
            elif mishap == "stale-worker" and len(history) >= 2:
                _CACHE[(root, 0)] = copy.deepcopy(history[-2])
            elif mishap == "crash":  # the task dies part-way through its input, then is retried
                with pytest.raises(RuntimeError, match="task killed"):
                    ShardStore(config, 0).apply(batch_id, dying(rows, len(rows) // 2), now_ms=NOW)
            if mishap.startswith("retry"):
                first = ShardStore(config, 0).apply(batch_id, rows, now_ms=NOW).alerts
                if mishap == "retry-cold":
                    _CACHE.clear()
                again = ShardStore(config, 0).apply(batch_id, rows, now_ms=NOW).alerts
                assert sorted(map(full_key, again)) == sorted(map(full_key, first))
                got += again
            else:
                got += ShardStore(config, 0).apply(batch_id, rows, now_ms=NOW).alerts
            history.append(copy.deepcopy(_CACHE[(root, 0)]))
        snapshots.wait_all()  # no snapshot child outlives the temp dir
    _CACHE.clear()

    expected = reference.expected_alerts(messages, ttl_ms=TTL, rules=RULES)
    assert sorted(map(reference.key, got)) == sorted(map(reference.key, expected))
    assert sorted(map(full_key, got)) == sorted(map(full_key, expected))


# --- zero shares (BRIEF §2, turn 2): hand-written expectations for the reference model itself ---------
def _alerts(messages, ttl_ms=10**9):
    return [(a["kind"], a["order_id"], a["requested"], a["purchased"], a["purchase_count"], a["trigger_event_id"])
            for a in reference.expected_alerts(messages, ttl_ms=ttl_ms)]


def _pr(oid, shares, ts=None):
    return events.encode(events.request(oid, shares, ts=ts))


def _p(eid, oid, shares, ts=None):
    return events.encode(events.purchase(eid, oid, shares, ts=ts))


def test_reference_zero_share_purchase_is_valid_and_counts_zero():
    assert [ev.shares for ev in reference.valid_events([_pr("1", 10), _p("a", "1", 0)])] == [10, 0]
    # 10 requested; 0 + 10 is equal (not over); a second 0 does not make it over either; 1 more does.
    msgs = [_pr("1", 10), _p("a", "1", 0), _p("b", "1", 10), _p("c", "1", 0)]
    assert _alerts(msgs) == []
    assert _alerts(msgs + [_p("d", "1", 1)]) == [("OVERFILL", "1", 10, 11, 4, "d")]


def test_reference_zero_request_and_zero_purchases_are_equal_not_over():
    assert _alerts([_pr("1", 0), _p("a", "1", 0), _p("b", "1", 0)]) == []
    assert _alerts([_pr("1", 0), _p("a", "1", 0), _p("b", "1", 1)]) == [("OVERFILL", "1", 0, 1, 2, "b")]


def test_reference_zero_share_purchase_before_its_request():
    # A 0-share purchase opens the book; the request arriving later finds 0 <= requested: no alert.
    assert _alerts([_p("a", "1", 0), _pr("1", 0)]) == []
    assert _alerts([_p("a", "1", 0), _pr("1", 5)]) == []
    # ...but with 6 already bought, the request for 5 fires, counting the 0-share purchase.
    assert _alerts([_p("a", "1", 0), _p("b", "1", 6), _pr("1", 5)]) == [("OVERFILL", "1", 5, 6, 2, "1")]


def test_reference_zero_share_purchase_duplicates_count_once():
    msgs = [_pr("1", 1), _p("a", "1", 0), _p("a", "1", 0), _p("b", "1", 1)]
    assert _alerts(msgs) == []  # 'a' once: 2 purchases, sum 1 = requested
    # A reused id counts once whatever it carries: the first (0) wins over a later 5.
    assert _alerts([_pr("1", 1), _p("a", "1", 0), _p("a", "1", 5)]) == []


def test_reference_orphan_of_zero_share_purchases_alone():
    # Purchases but never a request: one ORPHAN at expiry, even if they bought 0 shares.
    msgs = [_p("a", "1", 0, ts=0), _p("b", "1", 0, ts=1), _pr("flush", 1, ts=10_000)]
    assert _alerts(msgs, ttl_ms=100) == [("ORPHAN", "1", None, 0, 2, "a")]
