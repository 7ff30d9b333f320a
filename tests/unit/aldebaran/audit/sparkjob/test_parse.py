"""The JVM parser (aldebaran.audit.sparkjob.jvmparse.parse_events) agrees with the reference validator
(aldebaran.audit.parse.validate) on every message: the same verdict (valid, or the same reason code, whose
detail names the same field) and the same event fields.

Messages go through Spark as Kafka-shaped rows, in one DataFrame per batch of messages (never a
Spark job per message): the hand-written corpus of event_corpus.py, then random ones from Hypothesis.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from aldebaran.audit import parse as events
from aldebaran.audit.sparkjob.jvmparse import Limits, parse_events

from tests.unit.support.event_corpus import CASES, PUR, REQ, Case, enc, merged

KAFKA_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int")
KAFKA_TIME = dt.datetime(2024, 5, 6, 7, 8, 9, 123_000, tzinfo=dt.timezone.utc)
EVENT_FIELDS = ("kind", "event_id", "order_id", "shares", "client", "stock")


def epoch_ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def parse(spark, values: list[bytes | None], limits: Limits = Limits(), times: list[dt.datetime] | None = None):
    """parse_events over one Kafka-shaped DataFrame holding `values` (offset = position); rows in order."""
    times = times or [KAFKA_TIME] * len(values)
    rows = [(b"k", value, "trades", 3, offset, t, 0) for offset, (value, t) in enumerate(zip(values, times))]
    out = sorted(parse_events(spark.createDataFrame(rows, KAFKA_SCHEMA), limits).collect(), key=lambda r: r["offset"])
    assert [r["offset"] for r in out] == list(range(len(values)))
    return out


def named_fields(reason: str) -> list[str]:
    return re.findall(r"'([^']*)'", reason)


def disagreement(raw: bytes | None, row, limits: Limits = Limits()) -> str | None:
    """Why the JVM row for `raw` differs from the reference verdict, or None if they agree."""
    ref = events.validate(raw, max_message_bytes=limits.max_message_bytes, max_id_length=limits.max_id_length,
                          max_shares=limits.max_shares)
    jvm_fields = tuple(row[f] for f in EVENT_FIELDS)
    if isinstance(ref, events.Invalid):
        if (row["reason_code"], jvm_fields) != (ref.code, (None,) * len(EVENT_FIELDS)):
            return f"reference {ref.reason!r}; JVM {row['reason']!r} {jvm_fields}"
        if not row["reason"].startswith(ref.code + ": ") or named_fields(row["reason"]) != named_fields(ref.detail):
            return f"reference {ref.reason!r}; JVM {row['reason']!r} (detail names another field)"
        if row["event_ts"] is not None:
            return f"invalid but event_ts {row['event_ts']}"
        return None
    ref_fields = (ref.kind, ref.event_id, ref.order_id, ref.shares, ref.client, ref.stock)
    if row["reason_code"] is not None or jvm_fields != ref_fields:
        return f"reference valid {ref_fields}; JVM {row['reason']!r} {jvm_fields}"
    want_ts = ref.event_ts if ref.event_ts is not None else row["kafka_ts"]
    if row["event_ts"] != want_ts:
        return f"event_ts {row['event_ts']} != {want_ts}"
    return None


def assert_agree(values: list[bytes | None], rows, limits: Limits = Limits()):
    problems = []
    for value, row in zip(values, rows):
        assert bytes(row["value"]) == value if value is not None else row["value"] is None
        why = disagreement(value, row, limits)
        if why:
            problems.append(f"{value[:200]!r}{'...' if value and len(value) > 200 else ''}: {why}")
    assert not problems, f"{len(problems)} of {len(values)} disagree:\n" + "\n".join(problems[:20])


# ---------------------------------------------------------------- the hand-written corpus


T1 = dt.datetime(2023, 1, 2, 3, 4, 5, 678_000, tzinfo=dt.timezone.utc)
T2 = dt.datetime(2025, 12, 31, 23, 59, 59, 999_000, tzinfo=dt.timezone.utc)
# (message, its Kafka timestamp): for the event-time test, parsed in the same job as the corpus.
TIMED = [(enc(merged(REQ, ts=1_700_000_000_123)), T1), (enc(REQ), T1), (enc(merged(PUR, ts=None)), T2),
         (enc(merged(PUR, ts=0)), T2), (enc(merged(REQ, ts=-1)), T2)]


@pytest.fixture(scope="module")
def parsed(spark):
    """The corpus and the TIMED messages through one Spark job: (rows by case name, TIMED rows)."""
    values = [c.raw for c in CASES] + [v for v, _ in TIMED]
    rows = parse(spark, values, times=[KAFKA_TIME] * len(CASES) + [t for _, t in TIMED])
    return dict(zip((c.name for c in CASES), rows)), rows[len(CASES):]


@pytest.fixture(scope="module")
def corpus_rows(parsed):
    return parsed[0]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_agrees_with_reference(corpus_rows, case: Case):
    row = corpus_rows[case.name]
    assert row["reason_code"] == case.code, row["reason"]
    assert disagreement(case.raw, row) is None


def test_configured_limits(spark):
    limits = Limits(max_message_bytes=90, max_id_length=3, max_shares=50)
    values = [
        enc(merged(REQ, id="abc", shares=50)), enc(merged(REQ, id="abcd", shares=50)),
        enc(merged(REQ, id="abc", shares=51)), enc(merged(REQ, id="abc", client="c" * 40)),
        enc(merged(PUR, id=1, oid="abcd", shares=1)), enc(merged(PUR, id=1, oid=123, shares=1)),
        enc(merged(PUR, id=1, oid=1234, shares=1)), enc(merged(PUR, id=1, oid=123, shares=0)),
        enc(merged(PUR, id=1, oid=123, shares=-1)),
    ]
    rows = parse(spark, values, limits)
    assert [r["reason_code"] for r in rows] == [
        None, "invalid_id", "shares_out_of_range", "message_too_large", "invalid_id", None, "invalid_id", None,
        "shares_out_of_range"]
    assert rows[7]["shares"] == 0
    assert_agree(values, rows, limits)


def test_event_ts_is_ts_else_the_kafka_timestamp(parsed):
    rows = parsed[1]
    assert [r["kafka_ts"] for r in rows] == [epoch_ms(T1)] * 2 + [epoch_ms(T2)] * 3
    assert [r["event_ts"] for r in rows] == [1_700_000_000_123, epoch_ms(T1), epoch_ms(T2), 0, None]
    assert rows[-1]["reason_code"] == "ill_typed_field"
    assert_agree([v for v, _ in TIMED], rows)


# ---------------------------------------------------------------- random messages (Hypothesis)


class Raw(str):
    """A JSON literal written exactly as is (a number spelling, an escape the encoder would not write)."""


class Obj(list):
    """A JSON object as a list of (key, value) pairs: keys may repeat."""


OMIT = object()
DIGITS = "0123456789"

number_literals = st.one_of(
    st.integers(-(10**45), 10**45).map(str),
    st.integers(-20, 20).map(str),
    st.builds(
        lambda sign, whole, frac, exp: sign + whole + (f".{frac}" if frac is not None else "") + (exp or ""),
        st.sampled_from(["", "-"]),
        st.one_of(st.integers(0, 10**6).map(str), st.text(DIGITS, min_size=1, max_size=42)),
        st.none() | st.text(DIGITS, min_size=1, max_size=4),
        st.none() | st.builds(lambda e, s, d: e + s + d, st.sampled_from("eE"), st.sampled_from(["", "+", "-"]),
                              st.text(DIGITS, min_size=1, max_size=3)),
    ),
    st.sampled_from([
        "-0", "0.0", "-0.0", "100.0", "90.00", "1e2", "1E+2", "1e400", "-1e400", "1e-400", "NaN", "Infinity",
        "-Infinity", "01", "1.", ".5", "+1", "1e", "0x1", "9" * 1001, "9" * 1000, "1." + "0" * 999,
        str(2**63), str(2**63 - 1), str(-(2**63) - 1), "9" * 38, "1" + "0" * 38,
    ]),
).map(Raw)
plain_strings = st.one_of(
    st.text(max_size=12),
    st.text("ab-_0123456789", min_size=1, max_size=8),
    st.sampled_from(["", " ", "r-1", "é", "😀" * 129, "x" * 129, "x" * 128, "a\x00b", "\x7f", "\u0085", "\t"]),
)
string_literals = st.sampled_from([
    '"\\ud800"', '"a\\udc00"', '"\\ud83d\\ude00"', '"\\u0000"', '"\\u0069d"', '"\\/"', '"\\x"', '"tab\there"',
]).map(Raw)
keys = st.one_of(st.sampled_from(["id", "initial_order_id", "#shares", "client", "stock", "ts", "x", "ID"]),
                 st.text(max_size=6))
scalars = st.one_of(st.none(), st.booleans(), plain_strings, st.floats(allow_nan=False, allow_infinity=False),
                    st.integers(), number_literals, string_literals)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.lists(st.tuples(keys, inner), max_size=3).map(Obj),
    max_leaves=6,
)
whitespace = st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n  "])
odd_whitespace = st.sampled_from([""] * 25 + [" \n\t", "\x0b", "\x0c", "\u00a0", "\ufeff", "\x00"])


def render(value, ascii_only: bool, ws: str) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Obj):
        members = (json.dumps(k, ensure_ascii=ascii_only) + ws + ":" + ws + render(v, ascii_only, ws) for k, v in value)
        return "{" + ws + ("," + ws).join(members) + ws + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v, ascii_only, ws) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


def field(*good):
    """A field's value: mostly (7 in 8) a good one, else absent, null or any JSON value."""
    good_one, other = st.one_of(*good), st.one_of(st.just(OMIT), st.none(), json_values)
    return st.integers(0, 7).flatmap(lambda i: good_one if i else other)


good_ids = (st.text("abcXYZ-_0123456789", min_size=1, max_size=10), st.integers(-(10**40), 10**40), number_literals,
            st.text(min_size=1, max_size=5))
good_shares = (st.integers(0, 10**6), st.integers(0, 3), st.integers(-5, 10**13), st.integers(-(10**42), 10**42),
               number_literals, st.floats(-1e20, 1e20))
good_names = (st.sampled_from(["Sendence", "AAPL", "GOOG", ""]), st.text(max_size=8))
good_ts = (st.integers(0, 2**63 - 1), st.integers(-5, 2**64), number_literals)


@st.composite
def event_messages(draw) -> bytes:
    purchase = draw(st.booleans())
    pairs = [("id", draw(field(*good_ids)))]
    if purchase:
        pairs.append(("initial_order_id", draw(field(*good_ids))))
    pairs += [("#shares", draw(field(*good_shares))), ("client", draw(field(*good_names))),
              ("stock", draw(field(*good_names)))]
    if draw(st.booleans()):
        pairs.append(("ts", draw(field(*good_ts))))
    pairs += draw(st.lists(st.tuples(keys, json_values), max_size=2) | st.just([]))
    pairs = [(k, v) for k, v in draw(st.permutations(pairs)) if v is not OMIT]
    text = render(Obj(pairs), draw(st.booleans()), draw(whitespace))
    return (draw(odd_whitespace) + draw(whitespace) + text + draw(whitespace) + draw(odd_whitespace)).encode()


@st.composite
def mutated(draw, messages) -> bytes:
    """A message broken at the byte level: cut short, a byte changed/inserted/deleted, something appended."""
    raw = bytearray(draw(messages))
    at = draw(st.integers(0, len(raw)))
    how = draw(st.sampled_from(["cut", "insert", "replace", "delete", "append"]))
    if how == "cut":
        return bytes(raw[:at])
    if how == "append":
        return bytes(raw) + draw(st.sampled_from([b" x", b"{}", b"]", b",1", b"\x00", b'],{"a":1}', b"\xff"])
                                 | st.binary(max_size=4))
    byte = draw(st.sampled_from(b'{}[]":,\\-.0e \x00\x7f\xc3\xff') | st.integers(0, 255))
    if how == "insert":
        raw.insert(at, byte)
    elif at < len(raw):
        if how == "replace":
            raw[at] = byte
        else:
            del raw[at]
    return bytes(raw)


token_soup = st.lists(
    st.sampled_from(["{", "}", "[", "]", '"', '"id"', '"#shares"', ":", ",", "1", "-", "0", ".", "e", "true", "null",
                     " ", "\\", '"a"', "NaN", '"\\u', "d800"]),
    max_size=16,
).map(lambda tokens: "".join(tokens).encode())

@st.composite
def publisher_shaped(draw) -> bytes:
    """The fast path's domain and its edges: the publisher's field order, values and spacing mostly of the
    accepted kinds (fast path) but not always (a float, an escape, an empty or long id, a duplicate or extra
    key, a negative ts, a BOM, trailing U+2028...), which must take the general path with the same verdict."""
    def value(good, edge):
        i = draw(st.integers(0, 19))
        return draw(good if i >= 3 else edge if i else json_values)

    ws = draw(st.sampled_from(["", "", " ", "\n  "]))
    pairs = [("id", value(st.text("abcXYZ-_0123456789", min_size=1, max_size=10) | st.integers(-(10**17), 10**17),
                          st.integers(-(10**19), 10**19)
                          | st.sampled_from(["x" * 128, "x" * 129, "é" * 128, "😀" * 65, "a\x7fb", "\u2028", ""])))]
    if draw(st.booleans()):
        pairs.append(("initial_order_id", value(st.text("ab-_0123456789", min_size=1, max_size=8),
                                                st.sampled_from([0, "", "0", -1, 10**18]))))
    pairs += [("#shares", value(st.integers(0, 10**6) | st.integers(0, 3), st.integers(-2, 10**13)
                                | st.sampled_from([Raw("-0"), Raw("0.0"), Raw("100.0"), Raw("1e2"), 10**12,
                                                   10**12 + 1]))),
              ("client", value(good_names[0], st.text(max_size=4) | string_literals)),
              ("stock", value(good_names[0], st.sampled_from(["a\x7f", "\u2028", "é"]) | string_literals))]
    if draw(st.booleans()):
        pairs.append(("ts", value(st.integers(0, 2**63 - 1), st.integers(-5, 2**64))))
    if draw(st.integers(0, 9)) == 0:
        pairs.append((draw(st.sampled_from(["id", "#shares", "client", "ts", "x"])), draw(json_values)))
    text = render(Obj(pairs), draw(st.integers(0, 9)) == 0, ws)
    edges = draw(st.integers(0, 9)) == 0
    return ((draw(st.sampled_from([" ", "\ufeff", "\t"])) if edges else "") + text
            + (draw(st.sampled_from(["\n", "\u2028", " x", "{}"])) if edges else "")).encode()


messages = st.one_of(
    event_messages(), event_messages(), event_messages(), event_messages(),
    mutated(event_messages()), mutated(event_messages()),
    json_values.map(lambda v: render(v, True, "").encode()),
    st.binary(max_size=40),
    token_soup,
)


def test_random_messages_agree_with_reference(spark):
    """~300 random messages, drawn by Hypothesis first and then parsed in one Spark job. A disagreement
    lists the messages (no shrinking: add them to event_corpus.py as cases)."""
    batch: list[bytes] = []

    @settings(max_examples=300, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(messages)
    def draw(message):
        batch.append(message)

    draw()
    assert len(batch) >= 250
    assert_agree(batch, parse(spark, batch))


def test_publisher_shaped_messages_agree_with_reference_on_both_paths(spark):
    """~400 messages around the fast path's shape: each agrees with the reference whichever path it took,
    and both paths were taken often enough to count (the fast path is an optimisation, never a verdict)."""
    batch: list[bytes] = []

    @settings(max_examples=400, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(publisher_shaped())
    def draw(message):
        batch.append(message)

    draw()
    rows = parse(spark, batch)
    assert_agree(batch, rows)
    fast = sum(1 for r in rows if r["fast_path"])
    assert fast >= 40 and len(rows) - fast >= 40, f"fast path taken {fast} of {len(rows)}"
    assert all(r["reason_code"] is None for r in rows if r["fast_path"])


def test_fast_path_takes_the_publisher_format(spark):
    values = [
        b'{"id":"r-1","#shares":100,"client":"Sendence","stock":"AAPL"}',
        b'{"id": 7, "initial_order_id": "r-1", "#shares": 90, "client": "Sendence", "stock": "AAPL", "ts": 0}',
        b' {\n "id" : -12 ,"#shares":1,"client":"","stock":"\xc3\xa9"}\r\n',
        # Not the fast path (other key order, an escape, a float, an extra key, a duplicate, trailing U+2028):
        b'{"#shares":100,"id":"r-1","client":"Sendence","stock":"AAPL"}',
        b'{"id":"r\\u0031","#shares":100,"client":"Sendence","stock":"AAPL"}',
        b'{"id":"r-1","#shares":100.0,"client":"Sendence","stock":"AAPL"}',
        b'{"id":"r-1","#shares":100,"client":"Sendence","stock":"AAPL","x":1}',
        b'{"id":"r-1","#shares":100,"client":"Sendence","stock":"AAPL","ts":1,"ts":2}',
        b'{"id":"r-1","#shares":100,"client":"Sendence","stock":"AAPL"}\xe2\x80\xa8',
    ]
    rows = parse(spark, values)
    assert [r["fast_path"] for r in rows] == [True] * 3 + [False] * 6
    assert [(r["kind"], r["event_id"], r["order_id"], r["shares"]) for r in rows[:3]] == [
        (events.REQUEST, "r-1", "r-1", 100), (events.PURCHASE, "7", "r-1", 90), (events.REQUEST, "-12", "-12", 1)]
    assert rows[1]["event_ts"] == 0 and rows[2]["stock"] == "é"
    assert [r["reason_code"] for r in rows[3:]] == [None, None, "shares_not_integer", None, "invalid_json",
                                                    "invalid_json"]
    assert_agree(values, rows)


def test_zero_shares_are_valid_on_both_paths_and_count_zero(spark):
    """BRIEF §2 (turn 2): `#shares` 0 is valid for a request and a purchase; the fast path proves the
    publisher's own spelling valid, the general path accepts every other spelling of 0 alike."""
    values = [
        # The publisher's shape: the fast path.
        b'{"id":"r-0","#shares":0,"client":"Sendence","stock":"AAPL"}',
        b'{"id": "p-0", "initial_order_id": "r-0", "#shares": 0, "client": "Goldman", "stock": "AAPL"}',
        b'{"id":7,"initial_order_id":8,"#shares":0,"client":"c","stock":"s","ts":12}',
        # Any other shape: the general path.
        b'{"#shares":0,"id":"r-0","client":"Sendence","stock":"AAPL"}',
        b'{"id":"p-0","initial_order_id":"r-0","#shares":-0,"client":"Goldman","stock":"AAPL"}',
        b'{"id":"p-1","initial_order_id":"r-0","#shares":0}',
        b'{"id":"p-2","initial_order_id":"r-0","#shares":0,"client":"Goldman","stock":"AAPL","x":[0]}',
        # Still invalid, whatever the path: below zero, or 0 spelled as a float, a string, with a leading zero.
        b'{"id":"p-3","initial_order_id":"r-0","#shares":-1,"client":"Goldman","stock":"AAPL"}',
        b'{"id":"p-4","initial_order_id":"r-0","#shares":0.0,"client":"Goldman","stock":"AAPL"}',
        b'{"id":"p-5","initial_order_id":"r-0","#shares":"0","client":"Goldman","stock":"AAPL"}',
        b'{"id":"p-6","initial_order_id":"r-0","#shares":00,"client":"Goldman","stock":"AAPL"}',
    ]
    rows = parse(spark, values)
    assert [r["fast_path"] for r in rows] == [True] * 3 + [False] * 8
    assert [(r["kind"], r["event_id"], r["order_id"], r["shares"]) for r in rows[:7]] == [
        (events.REQUEST, "r-0", "r-0", 0), (events.PURCHASE, "p-0", "r-0", 0), (events.PURCHASE, "7", "8", 0),
        (events.REQUEST, "r-0", "r-0", 0), (events.PURCHASE, "p-0", "r-0", 0), (events.PURCHASE, "p-1", "r-0", 0),
        (events.PURCHASE, "p-2", "r-0", 0)]
    assert [r["reason_code"] for r in rows] == [None] * 7 + [
        "shares_out_of_range", "shares_not_integer", "ill_typed_field", "invalid_json"]
    assert rows[7]["reason"] == f"shares_out_of_range: '#shares' is -1, must be between 0 and {events.MAX_SHARES}"
    assert rows[2]["event_ts"] == 12
    assert_agree(values, rows)
