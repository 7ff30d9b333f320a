"""The input contract (docs/design.md § Contracts, "Input events"): its one validator, and the messages it describes.

Everything that decides whether a trades message is valid goes through this module: the auditor's shard
tasks (:class:`Parser`, a batch at a time), the reference model (aldebaran.audit.reference), `aldebaran explain`,
the load generator and the DLQ tooling (:func:`validate`, one message). Both return the typed
:class:`aldebaran.model.Event`, or an :class:`Invalid` whose code is the DLQ record's reason.

Reason codes (the `aldebaran.reason_code` header of a `trades.dlq` record):
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Iterable

import msgspec

from aldebaran.audit.jsontext import json_type as _json_type
from aldebaran.audit.jsontext import loads as _loads
from aldebaran.model import Event

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
    "shares_out_of_range": "#shares must be between 0 and the configured maximum",
    "invalid_id": "an id is empty, too long or contains control characters",
}
__doc__ += "\n".join(f"- ``{k}``: {v}" for k, v in REASONS.items())

REQUEST, PURCHASE = "PR", "P"


@dataclass(frozen=True)
class Limits:
    """The configured limits of the contract (ALDEBARAN_AUDIT_MAX_*), as the parsers take them."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_id_length: int = MAX_ID_LENGTH
    max_shares: int = MAX_SHARES


@dataclass(frozen=True)
class Invalid:
    code: str
    detail: str

    @property
    def reason(self) -> str:
        return f"{self.code}: {self.detail}"


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
    raw: bytes | None,
    *,
    kafka_ts: int | None = None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    max_id_length: int = MAX_ID_LENGTH,
    max_shares: int = MAX_SHARES,
) -> Event | Invalid:
    """Validate one Kafka message value; return the Event or why it is invalid (first failing check).
    `kafka_ts`: the message's Kafka timestamp, its event time when it carries no ``ts``. This is the
    general path: every check, every reason; :class:`Parser` takes a faster one where it can."""
    if raw is None:
        return Invalid("invalid_json", "message has no value")
    if len(raw) > max_message_bytes:
        return Invalid("message_too_large", f"{len(raw)} bytes > {max_message_bytes}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Invalid("invalid_utf8", "message is not valid UTF-8")
    try:
        obj = _loads(text)
    except (ValueError, RecursionError):
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
        return Invalid("shares_not_integer", f"'#shares' is {shares!r}, not an integer")
    # Zero is valid (BRIEF §2): the original publisher sends int(limit / 2 * random()) shares per
    # purchase, 0 for ~2 % of them; such an event is audited and counts 0. JSON's -0 is the integer 0.
    if not 0 <= shares <= max_shares:
        return Invalid("shares_out_of_range", f"'#shares' is {shares}, must be between 0 and {max_shares}")

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

    return Event(PURCHASE if is_purchase else REQUEST, event_id, order_id, shares, strings["client"],
                 strings["stock"], kafka_ts if ts is None else ts)


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


# --- the fast path: the auditor's batch parse ---------------------------------------------------------
class _Fields(msgspec.Struct, gc=False):
    id: str | int
    shares: int = msgspec.field(name="#shares")
    initial_order_id: str | int | None = None
    client: str | None = None
    stock: str | None = None
    ts: int | None = None


_FIELDS = msgspec.json.Decoder(_Fields)
_TS_LIMIT = 2**63


class Parser:
    """:func:`validate` for a batch of Kafka values, as the auditor's shard tasks call it: the same
    verdicts, at a fraction of the cost per message.

    **Fast path.** msgspec decodes a message into a typed struct of the contract's fields in one pass of
    C, and already refuses what the contract refuses there: invalid UTF-8, an unpaired surrogate escape,
    trailing content, a float or a boolean where an integer belongs, a wrong type. What it does not check
    is checked after, cheaply:

    - no repeated, unknown or null-valued key: the message holds exactly as many ``:`` bytes as the struct
      has fields set. Every key occurrence has a colon, so equality leaves no room for a second occurrence,
      an extra key, a null value or a colon inside a string (each of which sends the message to the slow path);
    - the size limit, the id rules (non-empty, within the length limit, printable; an integer id below
      ``MAX_INT_ID``), ``#shares`` within 0..max, ``ts`` within 0..2**63, and a request's client and stock.

    **Slow path.** Every message the fast path does not accept goes to :func:`validate` for its verdict and
    reason. So the fast path never decides that a message is invalid; its only obligation is soundness:
    what it accepts, :func:`validate` accepts with the same fields (tests/unit/aldebaran/audit/test_parse_fast.py holds it
    to that on the event corpus and on random messages). It is hand-written for the hot path: the loop
    below is the auditor's per-event parse cost (docs/benchmarks.md, "Plans and parsers side by side").
    """

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self.fast = self.slow = 0  # messages each path decided (for the bench and the batch figures)

    def parse(self, values: Iterable[bytes | None], kafka_ts: Iterable[int],
              invalid: list[tuple[int, Invalid]], partition: int = -1,
              offsets: Iterable[int] | None = None) -> list[Event]:
        """The valid events of `values` (in order); each invalid one appends (its index, its Invalid) to
        `invalid`. `kafka_ts`: each message's Kafka timestamp (its event time without ``ts``);
        `partition` and `offsets`: where the messages were read (-1: unknown)."""
        decode = _FIELDS.decode
        max_bytes, max_id, max_shares = self.limits.max_message_bytes, self.limits.max_id_length, self.limits.max_shares
        max_int_id = MAX_INT_ID
        request, purchase = REQUEST, PURCHASE
        make = Event
        out: list[Event] = []
        append = out.append
        slow, n = 0, -1
        offsets = itertools.repeat(-1) if offsets is None else offsets
        for n, (raw, kts, off) in enumerate(zip(values, kafka_ts, offsets)):
            try:
                if raw is None or len(raw) > max_bytes:
                    raise ValueError
                t = decode(raw)
                event_id, oid, client, stock, ts = t.id, t.initial_order_id, t.client, t.stock, t.ts
                fields = 2 + (oid is not None) + (client is not None) + (stock is not None) + (ts is not None)
                if raw.count(b":") != fields or not 0 <= t.shares <= max_shares:
                    raise ValueError
                if ts is None:
                    ts = kts
                elif not 0 <= ts < _TS_LIMIT:
                    raise ValueError
                if event_id.__class__ is int:
                    event_id = str(event_id)  # an integer id counts against the length limit by its text
                    if len(event_id) > max_id or not -max_int_id < t.id < max_int_id:
                        raise ValueError
                elif not (0 < len(event_id) <= max_id and event_id.isprintable()):
                    raise ValueError
                if oid is None:
                    if client is None or stock is None:
                        raise ValueError
                    append(make(request, event_id, event_id, t.shares, client, stock, ts, partition, off))
                    continue
                if oid.__class__ is int:
                    if not -max_int_id < oid < max_int_id:
                        raise ValueError
                    oid = str(oid)
                    if len(oid) > max_id:
                        raise ValueError
                elif not (0 < len(oid) <= max_id and oid.isprintable()):
                    raise ValueError
                append(make(purchase, event_id, oid, t.shares, client, stock, ts, partition, off))
            except (msgspec.DecodeError, ValueError, RecursionError):
                slow += 1
                verdict = validate(raw, kafka_ts=kts, max_message_bytes=max_bytes, max_id_length=max_id,
                                   max_shares=max_shares)
                if isinstance(verdict, Invalid):
                    invalid.append((n, verdict))
                else:
                    append(verdict._replace(partition=partition, offset=off))
        self.slow += slow
        self.fast += n + 1 - slow
        return out


__all__ = ["Event", "Invalid", "Limits", "MAX_ID_LENGTH", "MAX_INT_ID", "MAX_MESSAGE_BYTES", "MAX_SHARES", "PURCHASE",
           "Parser", "REASONS", "REQUEST", "encode", "purchase", "request", "validate"]
