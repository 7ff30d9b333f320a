"""The auditor's batch parse (aldebaran.audit.parse.Parser) agrees with the general path (aldebaran.audit.parse.validate)
on every message: the same verdict and reason for invalid ones (its slow path *is* validate), and for
valid ones the same event, whichever path decided. The fast path must be sound: what it accepts,
validate accepts with the same fields."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from aldebaran.audit import parse as events
from aldebaran.audit.parse import Parser
from aldebaran.model import Event

from tests.unit.support.event_corpus import CASES, PUR, REQ, enc, merged
from tests.unit.aldebaran.audit.sparkjob.test_parse import messages, publisher_shaped

KAFKA_TS = 1_715_000_000_000


def expected(raw: bytes | None, limits: events.Limits = events.Limits()) -> Event | tuple[str, str]:
    ref = events.validate(raw, kafka_ts=KAFKA_TS, max_message_bytes=limits.max_message_bytes,
                          max_id_length=limits.max_id_length, max_shares=limits.max_shares)
    if isinstance(ref, events.Invalid):
        return ref.code, ref.reason
    return ref


def parsed(parser: Parser, raw: bytes | None) -> Event | tuple[str, str]:
    invalid: list = []
    rows = parser.parse([raw], [KAFKA_TS], invalid)
    if invalid:
        assert rows == [] and invalid[0][0] == 0
        return invalid[0][1].code, invalid[0][1].reason
    assert len(rows) == 1
    return rows[0]


def test_corpus_agrees_with_reference():
    parser = Parser()
    for case in CASES:
        assert parsed(parser, case.raw) == expected(case.raw), case.name


def test_publisher_messages_take_the_fast_path():
    parser = Parser()
    values = [enc(REQ), enc(PUR), enc(merged(PUR, shares=0)), enc(merged(REQ, ts=5, id=42)),
              b'{"id": "p-2", "initial_order_id": 7, "#shares": 3, "client": "S", "stock": "A"}\n']
    invalid: list = []
    rows = parser.parse(values, [KAFKA_TS] * len(values), invalid)
    assert invalid == [] and (parser.fast, parser.slow) == (5, 0)
    assert rows[2] == Event(events.PURCHASE, "p-1", "r-1", 0, "Sendence", "AAPL", KAFKA_TS)
    assert rows[3] == Event(events.REQUEST, "42", "42", 100, "Sendence", "AAPL", 5)
    assert rows[4].order_id == "7"


def test_both_paths_say_where_each_event_was_read():
    values = [enc(REQ), b'{"id":"p-1","initial_order_id":"r-1","#shares":1,"x":":"}', b"{not json", enc(PUR)]
    invalid: list = []
    rows = Parser().parse(values, [KAFKA_TS] * 4, invalid, partition=3, offsets=[40, 41, 42, 43])
    assert [(r.event_id, r.partition, r.offset) for r in rows] == [("r-1", 3, 40), ("p-1", 3, 41), ("p-1", 3, 43)]
    assert [(i, bad.code) for i, bad in invalid] == [(2, "invalid_json")]


def test_what_the_fast_path_leaves_to_the_reference():
    parser = Parser(events.Limits(max_message_bytes=200, max_id_length=5, max_shares=50))
    cases = {
        b'{"id":"a","id":"b","#shares":1,"client":"c","stock":"s"}': "invalid_json",  # repeated key
        b'{"id":"a","#shares":1,"client":"c:d","stock":"s"}': None,  # a colon in a value: slow, valid
        b'{"id":"a","#shares":1,"client":"c","stock":"s","x":1}': None,  # unknown key: slow, valid
        b'{"id":"a","#shares":1,"client":"c","stock":"s","ts":null}': None,  # null ts: slow, valid
        b'{"id":"abcdef","#shares":1,"client":"c","stock":"s"}': "invalid_id",
        b'{"id":"a\\u0001","#shares":1,"client":"c","stock":"s"}': "invalid_id",
        b'{"id":"a","#shares":51,"client":"c","stock":"s"}': "shares_out_of_range",
        b'{"id":"a","#shares":-0,"client":"c","stock":"s"}': None,
        b'{"id":"a","#shares":1.0,"client":"c","stock":"s"}': "shares_not_integer",
        b'{"id":"a","#shares":1,"client":"c"}': "missing_field",
        b'{"id":"a","#shares":1,"client":"c","stock":"s","ts":-1}': "ill_typed_field",
        b'\xef\xbb\xbf{"id":"a","#shares":1,"client":"c","stock":"s"}': "invalid_json",
        b'{"id":"a","#shares":1,"client":"c","stock":"s"} x': "invalid_json",
        b'{"id":"\\ud800","#shares":1,"client":"c","stock":"s"}': "invalid_json",
        b'{"id":"a\xff","#shares":1,"client":"c","stock":"s"}': "invalid_utf8",
        None: "invalid_json",
    }
    for raw, code in cases.items():
        got = parsed(parser, raw)
        assert got == expected(raw, parser.limits), raw
        assert (None if isinstance(got, Event) else got[0]) == code, raw


@settings(max_examples=3000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(messages)
def test_random_messages_agree_with_reference(raw):
    assert parsed(Parser(), raw) == expected(raw)


@settings(max_examples=3000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(publisher_shaped())
def test_publisher_shaped_messages_agree_with_reference(raw):
    assert parsed(Parser(), raw) == expected(raw)


@settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(publisher_shaped())
def test_configured_limits_agree_with_reference(raw):
    limits = events.Limits(max_message_bytes=90, max_id_length=3, max_shares=50)
    assert parsed(Parser(limits), raw) == expected(raw, limits)
