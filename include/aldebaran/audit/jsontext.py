"""What counts as JSON for the input contract: a decoder bounded in depth, digits, key length and surrogates.

A message is JSON here exactly when a JVM consumer of the topic reads it too (Spark's parse_json, i.e.
Jackson with its default StreamReadConstraints), so a message is never valid here and unreadable there.
Decoding is bounded: a hostile message cannot exhaust the recursion limit (aldebaran.audit.parse calls
:func:`loads`; alerts have bounds of their own, in ``model.Alert.from_json``)."""

from __future__ import annotations

import json
import re
import sys

# What counts as JSON is what a JVM consumer of the topic accepts too (Spark's parse_json, i.e. Jackson
# with its default StreamReadConstraints), so a message is never valid here and unreadable there:
# - a number literal of more than 1000 digits (sign, point and exponent marker not counted);
# - an object key longer than 50,000 UTF-16 code units (a character beyond U+FFFF counts twice);
# - nesting deeper than 1000 levels, less one for the array a JVM parse wraps a message in to detect
#   trailing content: at most 999 levels here;
# - strings with an unpaired UTF-16 surrogate escape ("\ud800"): not Unicode, so never text downstream;
# - NaN, Infinity, -Infinity (not JSON). A number that overflows (1e400) is valid JSON: it parses.
MAX_JSON_DEPTH = 999
MAX_NUMBER_DIGITS = 1000
MAX_KEY_LENGTH = 50_000


def json_type(value) -> str:
    """The JSON type name of a decoded value (for a DLQ reason)."""
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


def _checked_object(pairs):
    out = _no_duplicates(pairs)
    for key in out:
        # Counted as the JVM does, in UTF-16 code units: a character beyond U+FFFF counts twice.
        if len(key) > MAX_KEY_LENGTH // 2 and len(key.encode("utf-16-le")) // 2 > MAX_KEY_LENGTH:
            raise ValueError(f"an object key is longer than {MAX_KEY_LENGTH} UTF-16 code units")
    return out


def _digits(literal: str) -> int:
    return sum(c.isdigit() for c in literal) if len(literal) > MAX_NUMBER_DIGITS else len(literal)


def _checked_int(literal: str) -> int:
    if _digits(literal) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number has more than {MAX_NUMBER_DIGITS} digits")
    return int(literal)


def _checked_float(literal: str) -> float:
    if _digits(literal) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number has more than {MAX_NUMBER_DIGITS} digits")
    return float(literal)


def _not_json(literal: str):
    raise ValueError(f"{literal} is not JSON")


# Short messages cannot hold an overlong number or key: they take the decoder without per-number hooks.
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_not_json)
_LONG_DECODER = json.JSONDecoder(object_pairs_hook=_checked_object, parse_constant=_not_json,
                                 parse_int=_checked_int, parse_float=_checked_float)
# Up to this many brackets, nesting stays well within Python's default recursion limit: no depth scan.
_SHALLOW = 200
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]|[\]}]', re.DOTALL)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _nesting_depth(text: str) -> int:
    """Deepest bracket nesting outside strings (exact for valid JSON; any answer does for the rest)."""
    depth = deepest = 0
    for match in _TOKEN.finditer(text):
        c = match.group()[0]
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _ensure_recursion_headroom(depth: int) -> None:
    """json's C decoder spends one recursion level per nesting level: make room for `depth` levels
    on top of the current stack. Raises the interpreter's limit (never lowers it); deep messages only."""
    frame, used = sys._getframe(), 0
    while frame is not None:
        used += 1
        frame = frame.f_back
    needed = used + depth + 100
    if sys.getrecursionlimit() < needed:
        sys.setrecursionlimit(needed)


def _has_lone_surrogate(value) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def loads(text: str):
    """The JSON value of `text`, or ValueError if the contract (and the JVM parser) would not call it JSON."""
    if len(text) > 2 * _SHALLOW and text.count("[") + text.count("{") > _SHALLOW:
        depth = _nesting_depth(text)
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nesting deeper than {MAX_JSON_DEPTH}")
        _ensure_recursion_headroom(depth)
    decoder = _LONG_DECODER if len(text) > MAX_NUMBER_DIGITS else _DECODER
    value = decoder.decode(text)
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
        raise ValueError("a string holds an unpaired surrogate")
    return value
