"""The input contract (../shared/BRIEF.md §2) in plain Python.

This module is the *reference* validator: the auditor validates in the JVM (aldebaran.audit.parse)
with column expressions, and tests hold the two to the same verdict and reason code on the same
bytes. The reference model, the load generator and the DLQ tooling use this one.

Reason codes (the `aldebaran.reason_code` header of a `trades.dlq` record):
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

MAX_MESSAGE_BYTES = 1024 * 1024
MAX_ID_LENGTH = 128
MAX_SHARES = 10**12
# Integer ids are accepted while they fit a DECIMAL(38,0), as in Spark's variant type.
MAX_INT_ID = 10**38

REASONS = {
    "message_too_large": "message is larger than the configured maximum",
    "invalid_utf8": "message is not valid UTF-8",
    "invalid_json": "message is not valid JSON (or repeats a key)",
    "not_an_object": "message is JSON but not an object",
    "missing_field": "a required field is missing or null",
    "ill_typed_field": "a field has the wrong JSON type",
    "shares_not_integer": "#shares is not an integer",
    "shares_out_of_range": "#shares must be between 1 and the configured maximum",
    "invalid_id": "an id is empty, too long or contains control characters",
}
__doc__ += "\n".join(f"- ``{k}``: {v}" for k, v in REASONS.items())

REQUEST, PURCHASE = "PR", "P"


@dataclass(frozen=True)
class Event:
    kind: str  # "PR" or "P"
    event_id: str
    order_id: str  # PR: its own id; P: initial_order_id
    shares: int
    client: str | None
    stock: str | None
    ts: int | None  # event time (epoch ms) if the message carries one


@dataclass(frozen=True)
class Invalid:
    code: str
    detail: str

    @property
    def reason(self) -> str:
        return f"{self.code}: {self.detail}"


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _parse_float(text: str):
    return float(text)


def _id(obj: dict, field: str, max_len: int) -> str | Invalid:
    value = obj.get(field)
    if value is None:
        return Invalid("missing_field", f"{field!r} is required")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return Invalid("ill_typed_field", f"{field!r} must be a string or an integer, got {_json_type(value)}")
    if isinstance(value, int):
        if abs(value) >= MAX_INT_ID:
            return Invalid("ill_typed_field", f"{field!r} must be a string or an integer, got number")
        value = str(value)
    if value == "":
        return Invalid("invalid_id", f"{field!r} is empty")
    if len(value) > max_len:
        return Invalid("invalid_id", f"{field!r} is longer than {max_len} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return Invalid("invalid_id", f"{field!r} contains control characters")
    return value


def validate(
    raw: bytes,
    *,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    max_id_length: int = MAX_ID_LENGTH,
    max_shares: int = MAX_SHARES,
) -> Event | Invalid:
    """Validate one Kafka message value; return the Event or why it is invalid (first failing check)."""
    if raw is None:
        return Invalid("invalid_json", "message has no value")
    if len(raw) > max_message_bytes:
        return Invalid("message_too_large", f"{len(raw)} bytes > {max_message_bytes}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Invalid("invalid_utf8", "message is not valid UTF-8")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_float=_parse_float)
    except (ValueError, RecursionError):
        return Invalid("invalid_json", "message is not valid JSON")
    if isinstance(obj, float) and not math.isfinite(obj):
        return Invalid("invalid_json", "message is not valid JSON")
    if not isinstance(obj, dict):
        return Invalid("not_an_object", f"message is a JSON {_json_type(obj)}, not an object")

    event_id = _id(obj, "id", max_id_length)
    if isinstance(event_id, Invalid):
        return event_id
    is_purchase = obj.get("initial_order_id") is not None
    if is_purchase:
        order_id = _id(obj, "initial_order_id", max_id_length)
        if isinstance(order_id, Invalid):
            return order_id
    else:
        order_id = event_id

    shares = obj.get("#shares")
    if shares is None:
        return Invalid("missing_field", "'#shares' is required")
    if isinstance(shares, bool) or isinstance(shares, (str, list, dict)):
        return Invalid("ill_typed_field", f"'#shares' must be an integer, got {_json_type(shares)}")
    if isinstance(shares, float):
        return Invalid("shares_not_integer", f"'#shares' is {text_of(shares)}, not an integer")
    if not 1 <= shares <= max_shares:
        return Invalid("shares_out_of_range", f"'#shares' is {shares}, must be between 1 and {max_shares}")

    strings: dict[str, str | None] = {}
    for field in ("client", "stock"):
        value = obj.get(field)
        if value is None:
            if not is_purchase:
                return Invalid("missing_field", f"{field!r} is required")
            strings[field] = None
        elif not isinstance(value, str):
            return Invalid("ill_typed_field", f"{field!r} must be a string, got {_json_type(value)}")
        else:
            strings[field] = value

    ts = obj.get("ts")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts < 2**63):
        return Invalid("ill_typed_field", f"'ts' must be an integer (epoch ms), got {_json_type(ts)}")

    return Event(
        kind=PURCHASE if is_purchase else REQUEST,
        event_id=event_id,
        order_id=order_id,
        shares=shares,
        client=strings["client"],
        stock=strings["stock"],
        ts=ts,
    )


def text_of(value: float) -> str:
    return repr(value)


def request(order_id, shares: int, client: str = "Sendence", stock: str = "AAPL", ts: int | None = None) -> dict:
    out = {"id": order_id, "#shares": shares, "client": client, "stock": stock}
    if ts is not None:
        out["ts"] = ts
    return out


def purchase(event_id, order_id, shares: int, client: str = "Sendence", stock: str = "AAPL", ts: int | None = None) -> dict:
    out = {"id": event_id, "initial_order_id": order_id, "#shares": shares, "client": client, "stock": stock}
    if ts is not None:
        out["ts"] = ts
    return out


def encode(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()
