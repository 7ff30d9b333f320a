"""The typed model: one :class:`Event` (a valid trade) and one :class:`Alert` (the alert contract,
docs/design.md § Contracts), shared by the validator, the auditor, the reference model, explain, delivery,
the channels and the Airflow plugin.

An :class:`Alert` is what travels on the ``alerts`` topic, in the archive and in delivery records:

    {"alert_id", "kind", "order_id", "client", "stock", "requested", "purchased", "purchase_count",
     "trigger_event_id", "trigger_event_ts", "detected_at"}

Validation is exactly the dispatcher's historical ``decode_alert``: the JSON must be an object whose
``alert_id``, ``kind`` and ``order_id`` are non-empty strings and whose ``alert_id`` is a safe object-key
segment; anything else raises :class:`AlertError` (a ValueError). The other fields are read leniently:
a missing one is None, and one of the wrong type is None as an attribute while its value is kept,
like every unknown field (``rule``, ``message``, ...), in ``extra``. So ``to_dict``/``to_json`` give
back everything that came in: a re-serialised alert loses nothing. ``kind`` is any non-empty string
(audit alerts are OVERFILL or ORPHAN; the platform pages operators with AUDITOR_DOWN in the same shape).

A frozen, slotted dataclass rather than a pydantic model, though not for speed: a pydantic model
coerces ``"100"`` to 100 (lax) or rejects it (strict) where this one keeps it verbatim, and its JSON
(unsorted, not ASCII-escaped) is other bytes than the signed bodies receivers get. The same-run
comparison is in docs/design.md §9 (trade-off 12). pydantic-core's jiter parses first, the stdlib only
what jiter rejects (for its exact errors).

Any bytes may arrive where an alert is expected (BRIEF §2), so :meth:`Alert.from_json` is bounded before a
parser sees them: at most ``MAX_ALERT_BYTES`` and ``MAX_ALERT_DEPTH`` levels of arrays/objects (one array
nested 5,000 deep made the stdlib's parser raise RecursionError and killed the dispatcher on that offset
for good). Every failure is an :class:`AlertError` with a reason ``code``; consumers of the alert topics
go through :mod:`aldebaran.delivery.decode`, which turns it into an ``alerts.dlq`` record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import msgspec

from pydantic_core import from_json

from aldebaran.storage.store import safe_segment

class Event(NamedTuple):
    """One valid trade event (BRIEF §2 "Input"): what the input contract's validator
    (:func:`aldebaran.audit.parse.validate`, :class:`aldebaran.audit.parse.Parser`) returns and the books apply.

    A NamedTuple, not a dataclass: the auditor builds one per event on its hot path, and a tuple is the
    cheapest object CPython builds from positional fields (no per-instance dict, no Python ``__init__``);
    the Spark glue builds them straight from Arrow columns with ``Event._make``."""

    kind: str  # aldebaran.audit.parse.REQUEST ("PR") or PURCHASE ("P")
    event_id: str
    order_id: str  # a request's own id, a purchase's initial_order_id (ids compare as strings)
    shares: int
    client: str | None  # a purchase may leave out client and stock
    stock: str | None
    event_ts: int | None  # epoch ms: the message's ts, else its Kafka timestamp (None: neither was given)
    # Where it was read on the trades topic, kept in its book for `aldebaran explain` (aldebaran.audit.provenance).
    partition: int = -1  # -1: unknown (an event built by hand, the reference model)
    offset: int = -1


class AlertError(ValueError):
    """An alert that does not follow the contract (not JSON, not an object, a required field missing).
    ``code``: too_large | too_deep | not_json | not_object | invalid (the ``alerts.dlq`` reason code)."""

    def __init__(self, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.code = code


# The bounds of one alert's bytes, checked before any parser runs. An auditor's alert is ~400 bytes
# and one level deep; a page (AUDITOR_DOWN) a few KB: both limits leave room for extras.
MAX_ALERT_BYTES = 1024 * 1024
MAX_ALERT_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert. Construct it with :meth:`from_json` / :meth:`from_dict` (they validate)."""

    alert_id: str
    kind: str
    order_id: str
    client: str | None = None
    stock: str | None = None
    requested: int | None = None
    purchased: int | None = None
    purchase_count: int | None = None
    trigger_event_id: str | None = None
    trigger_event_ts: int | None = None  # epoch ms
    detected_at: int | None = None  # epoch ms
    # Unknown fields, and contract fields of the wrong type, verbatim (do not mutate: shared by copies).
    extra: dict[str, Any] = field(default_factory=dict, hash=False, repr=False)
    # The bytes it was read from (from_json of bytes), forwarded unchanged by body(): re-encoding was
    # the largest cost of a Kafka-bus delivery (docs/design.md §9, trade-off 12).
    raw: bytes | None = field(default=None, compare=False, hash=False, repr=False)

    REQUIRED: ClassVar[tuple[str, ...]] = ("alert_id", "kind", "order_id")
    # The optional contract fields, in contract order, with the exact type each must have (what
    # JSON decodes to: `type(v) is int` also keeps booleans out).
    OPTIONAL: ClassVar[tuple[tuple[str, type], ...]] = (
        ("client", str), ("stock", str), ("requested", int), ("purchased", int), ("purchase_count", int),
        ("trigger_event_id", str), ("trigger_event_ts", int), ("detected_at", int),
    )
    FIELDS: ClassVar[tuple[str, ...]] = REQUIRED + tuple(name for name, _ in OPTIONAL)

    # --- reading ---------------------------------------------------------------------------------
    @classmethod
    def from_json(cls, raw: bytes | str | None) -> "Alert":
        """Parse and validate one alert (a Kafka message value, an archived line). AlertError for anything
        else, whatever the input: nothing larger or deeper than the bounds reaches a parser."""
        raw = raw or b""
        if not isinstance(raw, (bytes, bytearray, str)):
            raise AlertError(f"not JSON: a {type(raw).__name__}, not bytes", "not_json")
        check_bounds(raw)
        if isinstance(raw, bytes):
            fast = _fast(raw)
            if fast is not None:
                return fast
        try:
            data = from_json(raw)
        except ValueError:  # jiter is stricter in corners (lone surrogates, UTF-16): the stdlib decides
            try:
                data = json.loads(raw)
            # UnicodeDecodeError is a ValueError. RecursionError: the depth bound keeps it out, unless a
            # thread's stack is far smaller than the interpreter's recursion limit assumes.
            except (ValueError, RecursionError) as exc:
                raise AlertError(f"not JSON: {exc}", "not_json") from None
        alert = cls.from_dict(data)
        if isinstance(raw, bytes):
            object.__setattr__(alert, "raw", raw)
        return alert

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Alert":
        """Validate an already decoded alert (e.g. the copy a delivery record keeps)."""
        if not isinstance(data, Mapping):
            raise AlertError("not a JSON object", "not_object")
        for name in cls.REQUIRED:
            value = data.get(name)
            if not isinstance(value, str) or not value:
                raise AlertError(f"field {name!r} missing or not a string")
        try:
            safe_segment(data["alert_id"], "alert id")
        except ValueError as exc:
            raise AlertError(str(exc)) from None
        values: list[Any] = []
        extra: dict[str, Any] = {}
        for name, expected in cls.OPTIONAL:
            value = data.get(name)
            if value is None or type(value) is expected:
                values.append(value)
            else:  # the attribute stays None; the value goes back out as it came in
                values.append(None)
                extra[name] = value
        for name, value in data.items():
            if name not in _FIELD_SET:
                extra[name] = value
        return cls(data["alert_id"], data["kind"], data["order_id"], *values, extra)

    # --- writing ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The contract fields in contract order (missing ones as None), then the extras."""
        out = {name: getattr(self, name) for name in self.FIELDS}
        out.update(self.extra)
        return out

    def body(self) -> bytes:
        """What channels send to machines: the bytes the alert arrived as (the auditor's compact JSON
        in contract order, validated by from_json), else :meth:`to_json`."""
        return self.raw if self.raw is not None else self.to_json()

    def to_json(self) -> bytes:
        """Compact ASCII JSON with sorted keys: the same alert always gives the same bytes (signed
        webhook bodies, Kafka values)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True).encode()


_FIELD_SET = frozenset(Alert.FIELDS)


class _Wire(msgspec.Struct, forbid_unknown_fields=True):
    """The auditor's own alert shape, strictly typed, for a fast decode of the common case; anything else
    (unknown fields, a wrong type, invalid JSON) takes from_dict's lenient path, which decides."""

    alert_id: str
    kind: str
    order_id: str
    client: str | None = None
    stock: str | None = None
    requested: int | None = None
    purchased: int | None = None
    purchase_count: int | None = None
    trigger_event_id: str | None = None
    trigger_event_ts: int | None = None
    detected_at: int | None = None
    rule: Any = msgspec.UNSET  # the auditor's two non-contract fields, kept in `extra`
    message: Any = msgspec.UNSET


_DECODE = msgspec.json.Decoder(_Wire).decode
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,254}$")


# What the depth scan looks at: brackets, and what opens, escapes or closes a string.
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')


def check_bounds(raw: bytes | bytearray | str) -> None:
    """AlertError unless `raw` fits MAX_ALERT_BYTES and MAX_ALERT_DEPTH. Two C-speed counts decide for
    every ordinary alert (its brackets, strings included, bound its depth from above); only a message with
    more brackets than the depth limit is scanned, in one pass that stops at the limit (linear whatever the
    bytes: a regex for JSON strings backtracks quadratically on a long unterminated one)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > MAX_ALERT_BYTES:
        raise AlertError(f"too large: {len(data)} bytes (at most {MAX_ALERT_BYTES})", "too_large")
    if data.count(b"[") + data.count(b"{") <= MAX_ALERT_DEPTH:
        return
    depth, in_string, escaped = 0, False, -1
    for match in _STRUCTURE.finditer(data):
        pos = match.start()
        if pos == escaped:
            continue
        byte = data[pos]
        if in_string:
            if byte == 0x5C:  # backslash: the next byte is escaped
                escaped = pos + 1
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_ALERT_DEPTH:
                raise AlertError(f"too deep: arrays/objects nested more than {MAX_ALERT_DEPTH} levels", "too_deep")
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1


def _fast(raw: bytes) -> Alert | None:
    """from_json's fast path (msgspec, ~5x less time than pydantic_core.from_json + from_dict for the
    auditor's alerts; tests/unit/aldebaran/test_model.py holds both paths to the same results), or None."""
    try:
        w = _DECODE(raw)
    # UnicodeDecodeError: msgspec raises it, not a DecodeError, for invalid UTF-8 inside a string.
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None
    if not (w.alert_id and w.kind and w.order_id) or ".." in w.alert_id or not _SAFE_ID.match(w.alert_id):
        return None  # the slow path raises the exact error
    extra = {}
    if w.rule is not msgspec.UNSET:
        extra["rule"] = w.rule
    if w.message is not msgspec.UNSET:
        extra["message"] = w.message
    alert = Alert(w.alert_id, w.kind, w.order_id, w.client, w.stock, w.requested, w.purchased, w.purchase_count,
                  w.trigger_event_id, w.trigger_event_ts, w.detected_at, extra, raw)
    return alert

__all__ = ["MAX_ALERT_BYTES", "MAX_ALERT_DEPTH", "Alert", "AlertError", "Event", "check_bounds"]
