"""Hand-written Kafka message values and the validator's verdict on each (aldebaran.audit.parse), per BRIEF.md §2.

Shared by audit/test_parse.py (validate against these expectations), audit/test_parse_fast.py (the
auditor's batch Parser against validate) and audit/sparkjob/test_parse.py (the JVM parser against validate
on the same bytes). Each case states the reason code
(None: a valid event), the field its detail must name, and for valid ones the event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aldebaran.audit import parse as events

REQ = {"id": "r-1", "#shares": 100, "client": "Sendence", "stock": "AAPL"}
PUR = {"id": "p-1", "initial_order_id": "r-1", "#shares": 90, "client": "Sendence", "stock": "AAPL"}
_LIT = "\u0000literal\u0000"


@dataclass(frozen=True)
class Case:
    name: str
    raw: bytes | None
    code: str | None  # None: a valid event
    field: str | None = None  # the field the detail names
    event: events.Event | None = None  # the event, for valid cases

    def __repr__(self) -> str:  # keeps pytest ids and failure messages short
        return f"Case({self.name})"


def enc(obj, ensure_ascii: bool = True) -> bytes:
    return json.dumps(obj, ensure_ascii=ensure_ascii).encode()


def merged(base: dict, **fields) -> dict:
    """`base` with fields replaced; `shares=` stands for '#shares', `oid=` for 'initial_order_id'."""
    out = dict(base)
    for name, value in fields.items():
        out[{"shares": "#shares", "oid": "initial_order_id"}.get(name, name)] = value
    return out


def without(base: dict, *names: str) -> dict:
    return {k: v for k, v in base.items() if k not in names}


def literal(base: dict, field: str, text: str) -> bytes:
    """`base` with `field` set to a JSON literal written exactly as `text` (e.g. 100.0, 1e2, NaN)."""
    return json.dumps({**base, field: _LIT}).replace(json.dumps(_LIT), text).encode()


def ev(kind, event_id, order_id, shares, client="Sendence", stock="AAPL", ts=None) -> events.Event:
    return events.Event(kind, event_id, order_id, shares, client, stock, ts)


def request_event(**fields) -> events.Event:
    return ev("PR", fields.get("id", "r-1"), fields.get("id", "r-1"), fields.get("shares", 100),
              fields.get("client", "Sendence"), fields.get("stock", "AAPL"), fields.get("ts"))


def nested(depth: int, inner: str = "1") -> bytes:
    """A request whose extra field nests `depth` - 1 arrays, so the message is `depth` levels deep."""
    return literal(REQ, "x", "[" * (depth - 1) + inner + "]" * (depth - 1))


def padded_to(size: int) -> bytes:
    """A valid request of exactly `size` bytes."""
    head = enc({**REQ, "pad": ""})
    return enc({**REQ, "pad": "x" * (size - len(head))})


LONG = "x" * 100_000
MAX = events.MAX_SHARES

CASES: list[Case] = [
    # ---- valid events
    Case("request", enc(REQ), None, event=request_event()),
    Case("purchase", enc(PUR), None, event=ev("P", "p-1", "r-1", 90)),
    Case("request int id", enc(merged(REQ, id=1)), None, event=request_event(id="1")),
    Case("request int id 0", enc(merged(REQ, id=0)), None, event=request_event(id="0")),
    Case("request negative int id", enc(merged(REQ, id=-5)), None, event=request_event(id="-5")),
    Case("request -0 id", literal(REQ, "id", "-0"), None, event=request_event(id="0")),
    Case("request id beyond bigint", enc(merged(REQ, id=2**63)), None, event=request_event(id=str(2**63))),
    Case("request 38-digit id", enc(merged(REQ, id=10**38 - 1)), None, event=request_event(id=str(10**38 - 1))),
    Case("request -38-digit id", enc(merged(REQ, id=-(10**38 - 1))), None,
         event=request_event(id=str(-(10**38 - 1)))),
    Case("purchase int ids", enc(merged(PUR, id=7, oid=1)), None, event=ev("P", "7", "1", 90)),
    Case("purchase big int order id", enc(merged(PUR, oid=10**20)), None, event=ev("P", "p-1", str(10**20), 90)),
    Case("purchase without client/stock", enc(without(PUR, "client", "stock")), None,
         event=ev("P", "p-1", "r-1", 90, None, None)),
    Case("purchase null client/stock", enc(merged(PUR, client=None, stock=None)), None,
         event=ev("P", "p-1", "r-1", 90, None, None)),
    Case("purchase client only", enc(without(PUR, "stock")), None, event=ev("P", "p-1", "r-1", 90, "Sendence", None)),
    Case("request with ts", enc(merged(REQ, ts=1_700_000_000_123)), None, event=request_event(ts=1_700_000_000_123)),
    Case("request ts 0", enc(merged(REQ, ts=0)), None, event=request_event(ts=0)),
    Case("request ts max", enc(merged(REQ, ts=2**63 - 1)), None, event=request_event(ts=2**63 - 1)),
    Case("request ts null", enc(merged(REQ, ts=None)), None, event=request_event()),
    Case("purchase with ts", enc(merged(PUR, ts=5)), None, event=ev("P", "p-1", "r-1", 90, ts=5)),
    Case("initial_order_id null is a request", enc(merged(REQ, oid=None)), None, event=request_event()),
    Case("unknown fields ignored",
         enc({**REQ, "extra": {"a": [1, 2.5, None, True], "id": 5}, "#Shares": "x", "ID": [], "price": 1.5e300}),
         None, event=request_event()),
    Case("unknown overflowing number", literal(REQ, "x", "1e400"), None, event=request_event()),
    Case("unknown underflowing number", literal(REQ, "x", "-1e-400"), None, event=request_event()),
    Case("unknown 1000-digit integer", literal(REQ, "x", "9" * 1000), None, event=request_event()),
    Case("unknown negative 1000-digit integer", literal(REQ, "x", "-" + "9" * 1000), None, event=request_event()),
    Case("unknown 1000-digit float", literal(REQ, "x", "1." + "5" * 998 + "e7"), None, event=request_event()),
    Case("unknown 50000-char key", enc({**REQ, "k" * 50_000: 1}), None, event=request_event()),
    Case("unknown 25000-emoji key", enc({**REQ, "😀" * 25_000: 1}, ensure_ascii=False), None, event=request_event()),
    Case("unknown key of 49999 chars and one astral", enc({**REQ, "k" * 49_999 + "😀": 1}, ensure_ascii=False),
         "invalid_json"),
    Case("nested 999 deep", nested(999), None, event=request_event()),
    Case("shares max", enc(merged(REQ, shares=MAX)), None, event=request_event(shares=MAX)),
    Case("shares 1", enc(merged(REQ, shares=1)), None, event=request_event(shares=1)),
    # Zero is valid (BRIEF §2, turn 2), for requests and purchases alike; JSON's -0 is the integer 0.
    Case("shares 0", enc(merged(REQ, shares=0)), None, event=request_event(shares=0)),
    Case("shares -0", literal(REQ, "#shares", "-0"), None, event=request_event(shares=0)),
    Case("purchase shares 0", enc(merged(PUR, shares=0)), None, event=ev("P", "p-1", "r-1", 0)),
    Case("purchase shares -0", literal(PUR, "#shares", "-0"), None, event=ev("P", "p-1", "r-1", 0)),
    Case("purchase shares 0 compact (publisher shape)",
         b'{"id":"p-1","initial_order_id":"r-1","#shares":0,"client":"Sendence","stock":"AAPL"}', None,
         event=ev("P", "p-1", "r-1", 0)),
    Case("purchase shares 0 spaced, with ts", b'{"id": 7, "initial_order_id": 1, "#shares" : 0 , "ts": 5}', None,
         event=ev("P", "7", "1", 0, None, None, 5)),
    Case("purchase shares 0 first key", b'{"#shares":0,"id":"p-1","initial_order_id":"r-1"}', None,
         event=ev("P", "p-1", "r-1", 0, None, None)),
    Case("purchase shares 0 with unknown field", enc({**merged(PUR, shares=0), "x": [0]}), None,
         event=ev("P", "p-1", "r-1", 0)),
    Case("whitespace around", b"\n\t \r" + enc(REQ) + b" \r\n\t", None, event=request_event()),
    Case("whitespace inside", b'{ "id" : "r-1" ,\n"#shares":\t100 , "client":"Sendence", "stock" : "AAPL" }', None,
         event=request_event()),
    Case("compact", b'{"id":"r-1","#shares":100,"client":"Sendence","stock":"AAPL"}', None, event=request_event()),
    Case("unicode id (utf-8)", enc(merged(REQ, id="ordre-é-注文-😀"), ensure_ascii=False), None,
         event=request_event(id="ordre-é-注文-😀")),
    Case("unicode id (escaped)", enc(merged(REQ, id="ordre-é-注文-😀")), None,
         event=request_event(id="ordre-é-注文-😀")),
    Case("id of 128 chars", enc(merged(REQ, id="i" * 128)), None, event=request_event(id="i" * 128)),
    Case("id of 128 emoji", enc(merged(REQ, id="😀" * 128), ensure_ascii=False), None,
         event=request_event(id="😀" * 128)),
    Case("id with C1 control and space", enc(merged(REQ, id="a\u0085 b")), None, event=request_event(id="a\u0085 b")),
    Case("escaped solidus and quotes", b'{"id":"a\\/b\\"c\\\\","#shares":100,"client":"Sendence","stock":"AAPL"}', None,
         event=request_event(id='a/b"c\\')),
    Case("very long client", enc(merged(REQ, client=LONG)), None, event=request_event(client=LONG)),
    Case("empty client and stock", enc(merged(REQ, client="", stock="")), None,
         event=request_event(client="", stock="")),
    Case("exactly the maximum size", padded_to(events.MAX_MESSAGE_BYTES), None, event=request_event()),
    # ---- message_too_large
    Case("one byte over the maximum", padded_to(events.MAX_MESSAGE_BYTES + 1), "message_too_large"),
    Case("2 MB message", padded_to(2 * 1024 * 1024), "message_too_large"),
    Case("2 MB of garbage", b"\xff" * (2 * 1024 * 1024), "message_too_large"),
    # ---- invalid_utf8
    Case("lone 0xff", b"\xff", "invalid_utf8"),
    Case("latin-1 in a string", enc(REQ).replace(b"Sendence", b"Send\xe9nce"), "invalid_utf8"),
    Case("truncated sequence at end", enc(REQ) + b"\xe2\x82", "invalid_utf8"),
    Case("overlong encoding", b'{"id":"\xc0\xaf"}', "invalid_utf8"),
    Case("encoded surrogate", enc(REQ).replace(b"r-1", b"\xed\xa0\x80"), "invalid_utf8"),
    Case("beyond U+10FFFF", enc(REQ).replace(b"r-1", b"\xf4\x90\x80\x80"), "invalid_utf8"),
    Case("five-byte form", enc(REQ).replace(b"r-1", b"\xf8\x88\x80\x80\x80"), "invalid_utf8"),
    # ---- invalid_json
    Case("no value (tombstone)", None, "invalid_json"),
    Case("empty", b"", "invalid_json"),
    Case("whitespace only", b" \n\t", "invalid_json"),
    Case("not json", b"not json", "invalid_json"),
    Case("truncated object", enc(REQ)[:-1], "invalid_json"),
    Case("trailing comma", enc(REQ)[:-1] + b",}", "invalid_json"),
    Case("single quotes", b"{'id': 'r-1', '#shares': 100, 'client': 'Sendence', 'stock': 'AAPL'}", "invalid_json"),
    Case("unquoted key", b'{id: "r-1"}', "invalid_json"),
    Case("comment", b"/* c */" + enc(REQ), "invalid_json"),
    Case("duplicate id", b'{"id":"a","id":"b","#shares":100,"client":"Sendence","stock":"AAPL"}', "invalid_json"),
    Case("duplicate #shares", literal(REQ, "x", "0").replace(b'"x"', b'"#shares"'), "invalid_json"),
    Case("duplicate key via escape", b'{"id":"a","\\u0069d":"b","#shares":100,"client":"Sendence","stock":"AAPL"}',
         "invalid_json"),
    Case("duplicate key nested", literal(REQ, "x", '{"a":1,"a":2}'), "invalid_json"),
    Case("duplicate key in array", literal(REQ, "x", '[{"a":1,"a":1}]'), "invalid_json"),
    Case("NaN shares", literal(REQ, "#shares", "NaN"), "invalid_json"),
    Case("Infinity shares", literal(REQ, "#shares", "Infinity"), "invalid_json"),
    Case("-Infinity ts", literal(REQ, "ts", "-Infinity"), "invalid_json"),
    Case("NaN in unknown field", literal(REQ, "x", "NaN"), "invalid_json"),
    Case("Infinity nested in unknown field", literal(REQ, "x", "[1, {\"y\": Infinity}]"), "invalid_json"),
    Case("NaN alone", b"NaN", "invalid_json"),
    Case("Infinity alone", b"-Infinity", "invalid_json"),
    Case("leading zero", literal(REQ, "#shares", "0100"), "invalid_json"),
    Case("shares 00", literal(PUR, "#shares", "00"), "invalid_json"),
    Case("plus sign", literal(REQ, "#shares", "+100"), "invalid_json"),
    Case("bare fraction", literal(REQ, "x", ".5"), "invalid_json"),
    Case("trailing point", literal(REQ, "x", "1."), "invalid_json"),
    Case("empty exponent", literal(REQ, "x", "1e"), "invalid_json"),
    Case("hex number", literal(REQ, "x", "0x10"), "invalid_json"),
    Case("True capitalised", literal(REQ, "x", "True"), "invalid_json"),
    Case("raw control char in string", enc(REQ).replace(b"Sendence", b"Send\tence"), "invalid_json"),
    Case("raw NUL in string", enc(REQ).replace(b"Sendence", b"Send\x00ence"), "invalid_json"),
    Case("bad escape", enc(REQ).replace(b"Sendence", b"Send\\xence"), "invalid_json"),
    Case("short unicode escape", enc(REQ).replace(b"Sendence", b"Send\\u12"), "invalid_json"),
    Case("lone high surrogate in id", literal(REQ, "id", '"\\ud800"'), "invalid_json"),
    Case("lone low surrogate in client", literal(REQ, "client", '"a\\udc00"'), "invalid_json"),
    Case("reversed surrogate pair", literal(REQ, "stock", '"\\ude00\\ud83d"'), "invalid_json"),
    Case("high surrogate then letter", literal(REQ, "x", '"\\ud800\\u0041"'), "invalid_json"),
    Case("lone surrogate in key", enc({**REQ, "\ud800": 1}), "invalid_json"),
    Case("lone surrogate nested", literal(REQ, "x", '[{"y": ["\\udbff"]}]'), "invalid_json"),
    Case("lone surrogate alone", b'"\\ud800"', "invalid_json"),
    Case("byte order mark", b"\xef\xbb\xbf" + enc(REQ), "invalid_json"),
    Case("leading vertical tab", b"\x0b" + enc(REQ), "invalid_json"),
    Case("leading no-break space", "\u00a0".encode() + enc(REQ), "invalid_json"),
    Case("trailing text", enc(REQ) + b" x", "invalid_json"),
    Case("trailing object", enc(REQ) + enc(REQ), "invalid_json"),
    Case("trailing bracket", enc(REQ) + b"]", "invalid_json"),
    Case("trailing array closer and more", enc(REQ) + b'],{"a":1}', "invalid_json"),
    Case("trailing comma and value", enc(REQ) + b",1", "invalid_json"),
    Case("trailing NUL", enc(REQ) + b"\x00", "invalid_json"),
    Case("trailing form feed", enc(REQ) + b"\x0c", "invalid_json"),
    Case("trailing no-break space", enc(REQ) + "\u00a0".encode(), "invalid_json"),
    Case("1001-digit integer", literal(REQ, "x", "9" * 1001), "invalid_json"),
    Case("1001-digit shares", literal(REQ, "#shares", "1" * 1001), "invalid_json"),
    Case("5000-digit integer", literal(REQ, "x", "9" * 5000), "invalid_json"),
    Case("1001-digit float", literal(REQ, "x", "1." + "5" * 1000), "invalid_json"),
    Case("1001 digits with exponent", literal(REQ, "x", "1.5e-" + "1" * 999), "invalid_json"),
    Case("50001-char key", enc({**REQ, "k" * 50_001: 1}), "invalid_json"),
    Case("nested 1000 deep", nested(1000), "invalid_json"),
    Case("arrays 5000 deep", b"[" * 5000, "invalid_json"),
    Case("closed arrays 5000 deep", b"[" * 5000 + b"]" * 5000, "invalid_json"),
    Case("objects 3000 deep", b'{"a":' * 3000 + b"1" + b"}" * 3000, "invalid_json"),
    # ---- not_an_object
    Case("array", b"[1, 2]", "not_an_object"),
    Case("empty array", b"[]", "not_an_object"),
    Case("array of the object", b"[" + enc(REQ) + b"]", "not_an_object"),
    Case("string", b'"r-1"', "not_an_object"),
    Case("integer", b"1", "not_an_object"),
    Case("negative zero", b"-0", "not_an_object"),
    Case("float", b"1.5", "not_an_object"),
    Case("overflowing number", b"1e400", "not_an_object"),
    Case("null", b"null", "not_an_object"),
    Case("true", b"true", "not_an_object"),
    Case("false", b" false ", "not_an_object"),
    Case("whitespace then array", b"\n\t [1]", "not_an_object"),
    Case("arrays 999 deep", b"[" * 999 + b"]" * 999, "not_an_object"),
    # ---- missing_field
    Case("request without id", enc(without(REQ, "id")), "missing_field", "id"),
    Case("request id null", enc(merged(REQ, id=None)), "missing_field", "id"),
    Case("request without #shares", enc(without(REQ, "#shares")), "missing_field", "#shares"),
    Case("request #shares null", enc(merged(REQ, shares=None)), "missing_field", "#shares"),
    Case("request without client", enc(without(REQ, "client")), "missing_field", "client"),
    Case("request client null", enc(merged(REQ, client=None)), "missing_field", "client"),
    Case("request without stock", enc(without(REQ, "stock")), "missing_field", "stock"),
    Case("request stock null", enc(merged(REQ, stock=None)), "missing_field", "stock"),
    Case("empty object", b"{}", "missing_field", "id"),
    Case("purchase without id", enc(without(PUR, "id")), "missing_field", "id"),
    Case("purchase without #shares", enc(without(PUR, "#shares")), "missing_field", "#shares"),
    Case("purchase without order id or client", enc(without(PUR, "initial_order_id", "client")),
         "missing_field", "client"),
    Case("purchase null order id, no stock", enc(merged(without(PUR, "stock"), oid=None)), "missing_field", "stock"),
    # ---- ill_typed_field
    Case("id true", enc(merged(REQ, id=True)), "ill_typed_field", "id"),
    Case("id 1.5", enc(merged(REQ, id=1.5)), "ill_typed_field", "id"),
    Case("id 1.0", literal(REQ, "id", "1.0"), "ill_typed_field", "id"),
    Case("id 100.00", literal(REQ, "id", "100.00"), "ill_typed_field", "id"),
    Case("id -0.0", literal(REQ, "id", "-0.0"), "ill_typed_field", "id"),
    Case("id 1e2", literal(REQ, "id", "1e2"), "ill_typed_field", "id"),
    Case("id 39-digit integer", enc(merged(REQ, id=10**38)), "ill_typed_field", "id"),
    Case("id array", enc(merged(REQ, id=["r-1"])), "ill_typed_field", "id"),
    Case("id object", enc(merged(REQ, id={"v": "r-1"})), "ill_typed_field", "id"),
    Case("order id false", enc(merged(PUR, oid=False)), "ill_typed_field", "initial_order_id"),
    Case("order id 1.0", literal(PUR, "initial_order_id", "1.0"), "ill_typed_field", "initial_order_id"),
    Case("order id 2.5", enc(merged(PUR, oid=2.5)), "ill_typed_field", "initial_order_id"),
    Case("order id 40-digit integer", enc(merged(PUR, oid=10**39)), "ill_typed_field", "initial_order_id"),
    Case("order id array", enc(merged(PUR, oid=[])), "ill_typed_field", "initial_order_id"),
    Case("order id object", enc(merged(PUR, oid={})), "ill_typed_field", "initial_order_id"),
    Case("shares string", enc(merged(REQ, shares="100")), "ill_typed_field", "#shares"),
    Case("purchase shares string 0", enc(merged(PUR, shares="0")), "ill_typed_field", "#shares"),
    Case("purchase shares false", enc(merged(PUR, shares=False)), "ill_typed_field", "#shares"),
    Case("shares true", enc(merged(REQ, shares=True)), "ill_typed_field", "#shares"),
    Case("shares array", enc(merged(REQ, shares=[100])), "ill_typed_field", "#shares"),
    Case("shares object", enc(merged(REQ, shares={})), "ill_typed_field", "#shares"),
    Case("client integer", enc(merged(REQ, client=1)), "ill_typed_field", "client"),
    Case("client array", enc(merged(REQ, client=["Sendence"])), "ill_typed_field", "client"),
    Case("stock false", enc(merged(REQ, stock=False)), "ill_typed_field", "stock"),
    Case("stock object", enc(merged(REQ, stock={})), "ill_typed_field", "stock"),
    Case("purchase client integer", enc(merged(PUR, client=7)), "ill_typed_field", "client"),
    Case("purchase stock float", enc(merged(PUR, stock=1.5)), "ill_typed_field", "stock"),
    Case("ts string", enc(merged(REQ, ts="1700000000000")), "ill_typed_field", "ts"),
    Case("ts float", enc(merged(REQ, ts=1.5)), "ill_typed_field", "ts"),
    Case("ts 1.0", literal(REQ, "ts", "1.0"), "ill_typed_field", "ts"),
    Case("ts 1e3", literal(REQ, "ts", "1e3"), "ill_typed_field", "ts"),
    Case("ts negative", enc(merged(REQ, ts=-1)), "ill_typed_field", "ts"),
    Case("ts 2**63", enc(merged(REQ, ts=2**63)), "ill_typed_field", "ts"),
    Case("ts true", enc(merged(REQ, ts=True)), "ill_typed_field", "ts"),
    Case("ts array", enc(merged(REQ, ts=[1])), "ill_typed_field", "ts"),
    # ---- shares_not_integer
    Case("shares 1.5", enc(merged(REQ, shares=1.5)), "shares_not_integer", "#shares"),
    Case("shares 1e2", literal(REQ, "#shares", "1e2"), "shares_not_integer", "#shares"),
    Case("shares 1E+2", literal(REQ, "#shares", "1E+2"), "shares_not_integer", "#shares"),
    Case("shares 100.0", literal(REQ, "#shares", "100.0"), "shares_not_integer", "#shares"),
    Case("shares 100.000", literal(REQ, "#shares", "100.000"), "shares_not_integer", "#shares"),
    Case("shares -0.0", literal(REQ, "#shares", "-0.0"), "shares_not_integer", "#shares"),
    Case("shares 0.5", literal(REQ, "#shares", "0.5"), "shares_not_integer", "#shares"),
    Case("purchase shares 0.0", literal(PUR, "#shares", "0.0"), "shares_not_integer", "#shares"),
    Case("purchase shares 0e0", literal(PUR, "#shares", "0e0"), "shares_not_integer", "#shares"),
    Case("purchase shares -0E+2", literal(PUR, "#shares", "-0E+2"), "shares_not_integer", "#shares"),
    Case("shares 1e400", literal(REQ, "#shares", "1e400"), "shares_not_integer", "#shares"),
    Case("shares 1e40", literal(REQ, "#shares", "1e40"), "shares_not_integer", "#shares"),
    Case("shares 40-digit float", literal(REQ, "#shares", "1" * 40 + ".0"), "shares_not_integer", "#shares"),
    Case("purchase shares 90.0", literal(PUR, "#shares", "90.0"), "shares_not_integer", "#shares"),
    # ---- shares_out_of_range
    Case("shares -1", enc(merged(REQ, shares=-1)), "shares_out_of_range", "#shares"),
    Case("shares -3", enc(merged(REQ, shares=-3)), "shares_out_of_range", "#shares"),
    Case("shares above max", enc(merged(REQ, shares=MAX + 1)), "shares_out_of_range", "#shares"),
    Case("shares bigint max", enc(merged(REQ, shares=2**63 - 1)), "shares_out_of_range", "#shares"),
    Case("shares beyond bigint", enc(merged(REQ, shares=2**63)), "shares_out_of_range", "#shares"),
    Case("shares 30 digits", enc(merged(REQ, shares=10**29 + 7)), "shares_out_of_range", "#shares"),
    Case("shares -30 digits", enc(merged(REQ, shares=-(10**29))), "shares_out_of_range", "#shares"),
    Case("shares 40 digits", enc(merged(REQ, shares=10**39 + 1)), "shares_out_of_range", "#shares"),
    Case("shares 1000 digits", literal(REQ, "#shares", "1" * 1000), "shares_out_of_range", "#shares"),
    Case("purchase shares -1", enc(merged(PUR, shares=-1)), "shares_out_of_range", "#shares"),
    Case("purchase shares -1 compact",
         b'{"id":"p-1","initial_order_id":"r-1","#shares":-1,"client":"Sendence","stock":"AAPL"}',
         "shares_out_of_range", "#shares"),
    # ---- invalid_id
    Case("id empty", enc(merged(REQ, id="")), "invalid_id", "id"),
    Case("id of 129 chars", enc(merged(REQ, id="i" * 129)), "invalid_id", "id"),
    Case("id of 129 emoji", enc(merged(REQ, id="😀" * 129), ensure_ascii=False), "invalid_id", "id"),
    Case("id with newline", enc(merged(REQ, id="r\n1")), "invalid_id", "id"),
    Case("id with NUL", enc(merged(REQ, id="r\x001")), "invalid_id", "id"),
    Case("id with unit separator", enc(merged(REQ, id="r\x1f")), "invalid_id", "id"),
    Case("id with DEL (escaped)", literal(REQ, "id", '"r\\u007f"'), "invalid_id", "id"),
    Case("id with DEL (raw)", enc(merged(REQ, id="r\x7f")), "invalid_id", "id"),
    Case("purchase id empty", enc(merged(PUR, id="")), "invalid_id", "id"),
    Case("order id empty", enc(merged(PUR, oid="")), "invalid_id", "initial_order_id"),
    Case("order id of 129 chars", enc(merged(PUR, oid="o" * 129)), "invalid_id", "initial_order_id"),
    Case("order id with NUL", enc(merged(PUR, oid="\x00")), "invalid_id", "initial_order_id"),
    Case("order id with tab", enc(merged(PUR, oid="a\tb")), "invalid_id", "initial_order_id"),
    # ---- first failing check wins
    Case("bad id before bad shares", enc(merged(REQ, id="", shares=-1)), "invalid_id", "id"),
    Case("bad order id before missing shares", enc(without(merged(PUR, oid=1.5), "#shares")), "ill_typed_field",
         "initial_order_id"),
    Case("shares before client", enc(merged(without(REQ, "client"), shares=1.5)), "shares_not_integer", "#shares"),
    Case("client before ts", enc(merged(REQ, client=1, ts="x")), "ill_typed_field", "client"),
]
