"""Structure-aware hostile JSON for `aldebaran chaos fuzz`: documents that look like what a reader expects.

A reader's first parse rejects random bytes at once; the bugs hide one step later, where a field is used.
So each input starts from a valid document of the kind (an alert, a run, a lease, a connection extra...)
and breaks it the way a bad writer, an old version or an attacker would: a field of the wrong type,
missing or extra fields, huge or deep values, overlong and odd unicode strings, NaN/Infinity literals,
duplicate keys, truncation, trailing garbage, a top level that is not an object, invalid UTF-8.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable


class Raw(str):
    """JSON text spliced in as is (deep nesting, NaN, numbers too big for a float)."""


def encode(value, ascii_only: bool = False) -> str:
    """`value` as JSON text; a list of (key, value) pairs is an object (so keys may repeat), Raw is verbatim."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, tuple) and value and value[0] == "__pairs__":
        return "{" + ",".join(f"{encode(k, ascii_only)}:{encode(v, ascii_only)}" for k, v in value[1]) + "}"
    if isinstance(value, list):
        return "[" + ",".join(encode(v, ascii_only) for v in value) + "]"
    if isinstance(value, dict):
        return encode(("__pairs__", list(value.items())), ascii_only)
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=True)


def to_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # lone surrogates survive as the bytes a bad writer sends


def hostile_values():
    """Values of every wrong kind a field may hold."""
    from hypothesis import strategies as st

    odd_text = st.one_of(
        st.text(min_size=1, max_size=40),
        st.text(alphabet=st.characters(blacklist_categories=()), min_size=1, max_size=40),  # surrogates, controls
        st.integers(300, 70_000).map(lambda n: "x" * n),  # overlong
        st.sampled_from(["", "\x00", "../../etc", "/abs", "a/b", "\u202eevil", "é" * 100, "\ud800", "\U0001F4A5" * 50,
                         "null", "NaN", "1e999", " ", "\n"]))
    numbers = st.one_of(
        st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**63, -(2**63) - 1, 10**400]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999"), Raw("-0"), Raw("1" * 5000)]))
    deep = st.integers(200, 3000).map(lambda n: Raw("[" * n + "]" * n))
    deep_obj = st.integers(200, 3000).map(lambda n: Raw('{"a":' * n + "1" + "}" * n))
    flat = st.one_of(st.none(), st.booleans(), odd_text, numbers)
    nested = st.one_of(st.lists(flat, max_size=4), st.dictionaries(st.text(max_size=5), flat, max_size=3))
    return st.one_of(flat, nested, deep, deep_obj)


def hostile_documents(template: dict, extras: list | None = None):
    """A strategy of hostile variants (bytes) of the valid JSON object `template`. `extras`: more
    strategies of whole documents (bytes) for a kind's own oddities."""
    from hypothesis import strategies as st

    fields = sorted(template)
    values = hostile_values()

    def with_field(name, value):
        return {**template, name: value}

    def pairs(doc: dict, dup: str, value) -> tuple:
        return ("__pairs__", [*doc.items(), (dup, value)])  # the duplicate comes last: json keeps it

    documents = st.one_of(
        st.builds(with_field, st.sampled_from(fields), values),                                # wrong type
        st.builds(lambda drop: {k: v for k, v in template.items() if k not in drop},           # missing
                  st.sets(st.sampled_from(fields), min_size=1)),
        st.builds(lambda k, v: {**template, k: v}, st.text(max_size=300), values),             # extra field
        st.builds(lambda k, v: pairs(template, k, v), st.sampled_from(fields), values),        # duplicate key
        st.builds(lambda n: {**template, **{f"extra{i}": i for i in range(n)}}, st.integers(100, 3000)),
        st.builds(lambda v: v, values),                                                        # not an object
    )
    clean = st.tuples(documents, st.booleans()).map(lambda d: to_bytes(encode(d[0], ascii_only=d[1])))
    # Weighted to documents that parse: those reach the code past the parser, where the bugs hide.
    raw = st.one_of(
        clean, clean, clean, clean, clean, clean,
        st.tuples(documents, st.integers(0, 200)).map(                                         # truncated
            lambda d: to_bytes(encode(d[0]))[: max(0, len(encode(d[0])) - 1 - d[1])]),
        documents.map(lambda d: to_bytes(encode(d)) + b" {trailing"),
        documents.map(lambda d: to_bytes(encode(d)).replace(b'"', b'"\xff', 1)),               # invalid UTF-8
        st.binary(max_size=200),
        st.sampled_from([b"", b"null", b"[]", b"{}", b"\xef\xbb\xbf{}", b"{" * 5000, b"[" * 100_000]),
        *(extras or []),
    )
    return raw


def draw(strategy, n: int, keep: Callable[[bytes], bool] | None = None, seed: int = 1) -> tuple[list[bytes], int]:
    """`n` examples of `strategy` (hypothesis, derandomized: the same inputs each run), those `keep` accepts,
    shuffled by `seed`; and how many `keep` dropped (draws that happened to be valid)."""
    from hypothesis import HealthCheck, Phase, given, settings

    out: list[bytes] = []
    dropped = [0]

    @settings(max_examples=int(n * 1.3) + 20, database=None, deadline=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example) -> None:
        if keep is None or keep(example):
            out.append(example)
        else:
            dropped[0] += 1

    collect()
    random.Random(seed).shuffle(out)
    return out[:n], dropped[0]


__all__ = ["Raw", "draw", "encode", "hostile_documents", "hostile_values", "to_bytes"]
