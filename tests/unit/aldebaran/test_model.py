"""The typed alert (aldebaran.model.Alert): what it accepts, what it rejects and what it gives back."""

from __future__ import annotations

import json
import pickle

import pytest

from aldebaran.delivery.exceptions import AlertError as DeliveryAlertError
from aldebaran.model import Alert, AlertError

CONTRACT = {
    "alert_id": "5f0c6c3f9b8a4e0e9f1d2c3b4a596877", "kind": "OVERFILL", "order_id": "1", "client": "Sendence",
    "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 3, "trigger_event_id": "3",
    "trigger_event_ts": 1_700_000_000_000, "detected_at": 1_700_000_001_234,
}
WITH_EXTRAS = {**CONTRACT, "rule": "overfill", "message": "purchased 120 shares of a 100-share request",
               "nested": {"a": [1, 2.5, None]}}


def test_fields_are_typed_attributes():
    alert = Alert.from_json(json.dumps(CONTRACT))
    assert (alert.alert_id, alert.kind, alert.order_id) == ("5f0c6c3f9b8a4e0e9f1d2c3b4a596877", "OVERFILL", "1")
    assert (alert.client, alert.stock) == ("Sendence", "AAPL")
    assert (alert.requested, alert.purchased, alert.purchase_count) == (100, 120, 3)
    assert (alert.trigger_event_id, alert.trigger_event_ts, alert.detected_at) == ("3", 1_700_000_000_000, 1_700_000_001_234)
    assert alert.extra == {}


def test_round_trip_is_lossless_and_stable():
    raw = json.dumps(WITH_EXTRAS).encode()
    alert = Alert.from_json(raw)
    assert alert.to_dict() == WITH_EXTRAS
    assert list(alert.to_dict())[:11] == list(CONTRACT)  # contract order first, extras after
    assert alert.to_json() == json.dumps(WITH_EXTRAS, separators=(",", ":"), sort_keys=True).encode()
    assert Alert.from_json(alert.to_json()) == alert
    assert Alert.from_dict(alert.to_dict()) == alert
    assert Alert.from_json(alert.to_json().decode()) == alert  # str as well as bytes


def test_the_same_alert_in_another_key_order_gives_the_same_bytes():
    shuffled = dict(reversed(list(WITH_EXTRAS.items())))
    assert Alert.from_dict(shuffled).to_json() == Alert.from_dict(WITH_EXTRAS).to_json()


def test_extras_are_kept_verbatim():
    alert = Alert.from_dict(WITH_EXTRAS)
    assert alert.extra == {"rule": "overfill", "message": "purchased 120 shares of a 100-share request",
                           "nested": {"a": [1, 2.5, None]}}


def test_missing_optional_fields_are_none_and_come_back_as_null():
    alert = Alert.from_json(b'{"alert_id": "a1", "kind": "ORPHAN", "order_id": "7"}')
    assert (alert.client, alert.requested, alert.purchased, alert.detected_at) == (None, None, None, None)
    assert alert.to_dict() == {"alert_id": "a1", "kind": "ORPHAN", "order_id": "7", "client": None, "stock": None,
                               "requested": None, "purchased": None, "purchase_count": None,
                               "trigger_event_id": None, "trigger_event_ts": None, "detected_at": None}


@pytest.mark.parametrize(("field", "value"), [
    ("requested", "100"), ("purchased", 1.5), ("purchase_count", True), ("detected_at", "yesterday"),
    ("trigger_event_ts", [1]), ("client", 42), ("trigger_event_id", 3),
])
def test_an_ill_typed_optional_field_is_none_but_kept_for_serialisation(field, value):
    alert = Alert.from_dict({**CONTRACT, field: value})
    assert getattr(alert, field) is None
    assert alert.extra == {field: value}
    assert alert.to_dict() == {**CONTRACT, field: value}
    assert list(alert.to_dict()) == list(CONTRACT)  # still in its contract position


def test_kind_is_any_non_empty_string():
    # Operational pages (the supervisor's AUDITOR_DOWN) travel in the same shape.
    assert Alert.from_dict({**CONTRACT, "kind": "AUDITOR_DOWN"}).kind == "AUDITOR_DOWN"


@pytest.mark.parametrize(("raw", "message"), [
    (None, "not JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"", "not JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"{not json", "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (b'{"a": "\xff"}', "not JSON: 'utf-8' codec can't decode byte 0xff in position 7: invalid start byte"),
    (b"[1, 2]", "not a JSON object"),
    (b'"alert"', "not a JSON object"),
    (b'{"kind": "OVERFILL", "order_id": "1"}', "field 'alert_id' missing or not a string"),
    (b'{"alert_id": 12, "kind": "OVERFILL", "order_id": "1"}', "field 'alert_id' missing or not a string"),
    (b'{"alert_id": "", "kind": "OVERFILL", "order_id": "1"}', "field 'alert_id' missing or not a string"),
    (b'{"alert_id": "a1", "order_id": "1"}', "field 'kind' missing or not a string"),
    (b'{"alert_id": "a1", "kind": null, "order_id": "1"}', "field 'kind' missing or not a string"),
    (b'{"alert_id": "a1", "kind": "OVERFILL"}', "field 'order_id' missing or not a string"),
    (b'{"alert_id": "a1", "kind": "OVERFILL", "order_id": 1}', "field 'order_id' missing or not a string"),
    (b'{"alert_id": "../x", "kind": "OVERFILL", "order_id": "1"}', "unsafe alert id for an object key: '../x'"),
    (b'{"alert_id": "a/b", "kind": "OVERFILL", "order_id": "1"}', "unsafe alert id for an object key: 'a/b'"),
    (b'{"alert_id": "a..b", "kind": "OVERFILL", "order_id": "1"}', "unsafe alert id for an object key: 'a..b'"),
    (b'{"alert_id": "a\\nb", "kind": "OVERFILL", "order_id": "1"}', "unsafe alert id for an object key: 'a\\nb'"),
])
def test_each_rejection_reason(raw, message):
    with pytest.raises(AlertError) as exc:
        Alert.from_json(raw)
    assert str(exc.value) == message
    assert isinstance(exc.value, ValueError) and DeliveryAlertError is AlertError


def test_from_dict_rejects_what_is_not_a_mapping():
    with pytest.raises(AlertError, match="not a JSON object"):
        Alert.from_dict(["alert_id"])


def test_json_the_stdlib_accepts_is_accepted():
    # jiter (the fast parser) rejects a lone surrogate; the stdlib, which decode_alert used, does not.
    alert = Alert.from_json(b'{"alert_id": "a1", "kind": "OVERFILL", "order_id": "\\ud800"}')
    assert alert.order_id == "\ud800"


def test_frozen_hashable_and_picklable():
    alert = Alert.from_dict(WITH_EXTRAS)
    with pytest.raises(AttributeError):
        alert.kind = "ORPHAN"  # type: ignore[misc]
    assert not hasattr(alert, "__dict__")  # slotted
    assert hash(alert) == hash(Alert.from_dict(WITH_EXTRAS))
    assert pickle.loads(pickle.dumps(alert)) == alert


# --- the fast decode path (msgspec) gives what the lenient path gives, or steps aside ---------------------
FAST_CASES = [
    b'{"alert_id":"a1","kind":"OVERFILL","rule":"overfill","order_id":"1","client":"Sendence","stock":"AAPL",'
    b'"requested":100,"purchased":120,"purchase_count":3,"trigger_event_id":"p3","trigger_event_ts":1700000000000,'
    b'"detected_at":1700000000123,"message":"bought 120 of 100"}',
    b'{"alert_id":"a1","kind":"ORPHAN","order_id":"1","requested":null,"purchased":0}',
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"1","requested":true}',  # a bool is not an int
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"1","requested":100.0}',  # a float is not an int
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"1","requested":123456789012345678901234567890}',
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"1","unknown":{"x":[1,2]}}',
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"1","client":7}',
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"1","rule":null,"message":{"m":1}}',
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"1","alert_id":"a2"}',  # a repeated key
    b'{"alert_id":"a\\u00e9","kind":"OVERFILL","order_id":"1"}',
    b'{"alert_id":"","kind":"OVERFILL","order_id":"1"}',
    b'{"alert_id":"../x","kind":"OVERFILL","order_id":"1"}',
    b'{"alert_id":"a..b","kind":"OVERFILL","order_id":"1"}',
    b'{"alert_id":"a1","kind":"","order_id":"1"}',
    b'{"alert_id":"a1","kind":"OVERFILL"}',
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"1"',
    b'[1,2]', b'null', b'', b'\xff\xfe',
    b'{"alert_id":"a1","kind":"OVERFILL","order_id":"\\ud800"}',
]


@pytest.mark.parametrize("raw", FAST_CASES)
def test_the_fast_path_agrees_with_the_lenient_one(raw):
    """bytes take the fast path first; a bytearray goes straight to the lenient one (pydantic_core, then the
    stdlib, then from_dict). Both must give the same alert, field for field, or the same error."""

    def outcome(value):
        try:
            alert = Alert.from_json(value)
        except AlertError as exc:
            return ("error", str(exc))
        return ("alert", alert, alert.to_dict(), list(alert.to_dict()), alert.extra)

    assert outcome(raw) == outcome(bytearray(raw))
