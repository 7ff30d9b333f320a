"""The input contract's validator, its general path (aldebaran.audit.parse.validate), against BRIEF.md §2.

The cases live in event_corpus.py, shared with test_parse.py, which holds the JVM parser to the
same verdicts on the same bytes.
"""

from __future__ import annotations

import sys

import pytest

from aldebaran.audit import parse as events

from tests.unit.support.event_corpus import CASES, PUR, REQ, Case, enc, merged, nested


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case):
    got = events.validate(case.raw)
    if case.code is None:
        assert got == case.event
        return
    assert isinstance(got, events.Invalid), got
    assert got.code == case.code, got.reason
    assert got.code in events.REASONS
    assert got.reason == f"{got.code}: {got.detail}"
    if case.field is not None:
        assert f"'{case.field}'" in got.detail


def test_corpus_covers_every_reason_code():
    assert {c.code for c in CASES} - {None} == set(events.REASONS)


def test_integer_and_string_ids_compare_as_strings():
    as_int = events.validate(enc(merged(PUR, id=12, oid=34)))
    as_str = events.validate(enc(merged(PUR, id="12", oid="34")))
    assert as_int == as_str
    assert (as_int.event_id, as_int.order_id) == ("12", "34")


def test_configured_limits():
    small = {"max_message_bytes": 80, "max_id_length": 3, "max_shares": 50}
    assert events.validate(enc(merged(REQ, id="abc", shares=50)), **small).shares == 50
    assert events.validate(enc(merged(REQ, id="abcd", shares=50)), **small).code == "invalid_id"
    assert events.validate(enc(merged(REQ, id="abc", shares=51)), **small).code == "shares_out_of_range"
    assert events.validate(enc(merged(REQ, id="abc", client="c" * 40)), **small).code == "message_too_large"
    assert events.validate(enc(merged(REQ, id="abc", shares=0)), **small).shares == 0
    assert events.validate(enc(merged(REQ, id="abc", shares=-1)), **small).code == "shares_out_of_range"


def test_zero_shares_are_valid_and_count_zero():
    """BRIEF §2 (turn 2): `#shares` is an integer >= 0, for a request and a purchase alike."""
    assert events.validate(enc(merged(REQ, shares=0))) == events.Event("PR", "r-1", "r-1", 0, "Sendence", "AAPL", None)
    assert events.validate(enc(merged(PUR, shares=0))) == events.Event("P", "p-1", "r-1", 0, "Sendence", "AAPL", None)
    # The original publisher's own bytes for a 0-share purchase (json.dumps with its default separators).
    raw = b'{"id": "p-9", "initial_order_id": "o-9", "#shares": 0, "client": "Goldman", "stock": "AAPL"}'
    assert events.validate(raw) == events.Event("P", "p-9", "o-9", 0, "Goldman", "AAPL", None)


def test_below_zero_is_out_of_range_and_the_reason_says_zero_is_the_floor():
    got = events.validate(enc(merged(PUR, shares=-1)))
    assert got.code == "shares_out_of_range"
    assert got.reason == f"shares_out_of_range: '#shares' is -1, must be between 0 and {events.MAX_SHARES}"
    assert "between 0 and" in events.REASONS["shares_out_of_range"]


def test_helpers_encode_valid_events():
    assert events.validate(events.encode(events.request(5, 10, ts=7))) == events.Event(
        "PR", "5", "5", 10, "Sendence", "AAPL", 7)
    assert events.validate(events.encode(events.purchase("e", 5, 3))) == events.Event(
        "P", "e", "5", 3, "Sendence", "AAPL", None)


def test_deep_nesting_verdict_does_not_depend_on_the_callers_stack():
    """json's C decoder recurses once per level: 999 levels must pass wherever the validator is called."""

    def at_depth(n: int):
        return at_depth(n - 1) if n else events.validate(nested(999))

    limit = sys.getrecursionlimit()
    try:
        assert events.validate(nested(999)) == at_depth(limit - 200) == events.validate(enc(REQ))
    finally:
        sys.setrecursionlimit(limit)
    assert events.validate(nested(1000)).code == "invalid_json"
