"""The alert contract's one decoder (aldebaran.delivery.decode, the bounds in aldebaran.model): any bytes on
`alerts` / `alerts.fast` give an Alert or a rejection with a reason, never an exception; rejected messages are
dead-lettered before a consumer moves past them (the dispatcher's run settle, the lane reconciler).

Kafka messages and the alerts.dlq writer are fakes, named so; the ledger is the real LocalStore backend and
the channel the real log channel."""

from __future__ import annotations

import json
import threading
import time

import pytest

from aldebaran.delivery.channels.log import LogChannel
from aldebaran.delivery.decode import AlertDeadLetters, Rejected, decode
from aldebaran.delivery.dispatcher import ChannelDispatcher
from aldebaran.delivery.stats import DispatchStats
from aldebaran.delivery.exceptions import RetryableError
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.runs import CLAIMED, MALFORMED, RECORDED
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.delivery.settle import Partition, RunSettler
from aldebaran.exceptions import AldebaranError
from aldebaran.lanes import reconciler
from aldebaran.model import MAX_ALERT_BYTES, MAX_ALERT_DEPTH, Alert, AlertError
from aldebaran.settings import KafkaSettings
from aldebaran.storage.store import LocalStore

TOPIC = "alerts"
GOOD = {"alert_id": "a-1", "kind": "OVERFILL", "order_id": "1", "client": "c", "stock": "s", "requested": 1,
        "purchased": 2, "purchase_count": 1, "trigger_event_id": "e1", "trigger_event_ts": 1, "detected_at": 1}
DEEP_ARRAY = b"[" * 5000 + b"]" * 5000  # valid JSON: the stdlib's parser raised RecursionError on it


class MessageFake:
    """A polled confluent-kafka message (no error): what the consumers read."""

    def __init__(self, value, offset: int = 0, topic: str = TOPIC, partition: int = 0, key: bytes | None = b"k",
                 ts: int = 1_700_000_000_000) -> None:
        self._value, self._offset, self._topic, self._partition, self._key, self._ts = \
            value, offset, topic, partition, key, ts

    def value(self):
        return self._value

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def key(self):
        return self._key

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)

    def error(self):
        return None


class DeadLettersFake:
    """alerts.dlq, in memory; `fail` makes the next sends raise as the real writer does when Kafka is away."""

    def __init__(self, on_send=None) -> None:
        self.sent: list[tuple[Rejected, str]] = []
        self.fail = 0
        self.on_send = on_send

    def send(self, rejected, consumer: str) -> int:
        if self.fail:
            self.fail -= 1
            raise RetryableError("dead-lettering to alerts.dlq: broker down (simulated)")
        if self.on_send is not None:
            self.on_send()
        self.sent += [(r, consumer) for r in rejected]
        return len(rejected)


# --- the decoder --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "code"), [
    (DEEP_ARRAY, "too_deep"),
    (b'{"a":' * 3000 + b"1" + b"}" * 3000, "too_deep"),
    (b"[" * 5000, "too_deep"),  # not even JSON: the bound decides before a parser runs
    (b'{"alert_id":"a","kind":"K","order_id":"1","x":' + b"[" * (MAX_ALERT_DEPTH + 1) + b"]" * (MAX_ALERT_DEPTH + 1)
     + b"}", "too_deep"),
    (b" " * (MAX_ALERT_BYTES + 1), "too_large"),
    (b"not json", "not_json"),
    (b"", "not_json"),
    (None, "not_json"),
    (b"\xff\xfe", "not_json"),
    (b'{"alert_id": "a\xff", "kind": "K", "order_id": "1"}', "not_json"),
    (b"[1, 2]", "not_object"),
    (b"42", "not_object"),
    (b'{"kind": "OVERFILL", "order_id": "1"}', "invalid"),
    (b'{"alert_id": "../x", "kind": "OVERFILL", "order_id": "1"}', "invalid"),
    (b'{"alert_id": "a", "kind": "K", "order_id": "1", "n": ' + b"9" * 5000 + b"}", "not_json"),
])
def test_every_bad_message_is_a_rejection_with_a_reason(raw, code):
    got = decode(MessageFake(raw, offset=7, partition=1))
    assert isinstance(got, Rejected)
    assert (got.code, got.topic, got.partition, got.offset, got.value) == (code, TOPIC, 1, 7, raw)
    assert got.reason and str(got) == got.reason


def test_a_valid_alert_round_trips_byte_for_byte():
    raw = json.dumps(GOOD, separators=(",", ":")).encode()
    got = decode(MessageFake(raw))
    assert isinstance(got, Alert) and got.alert_id == "a-1" and got.body() == raw
    assert Alert.from_json(got.to_json()) == got


def test_brackets_inside_strings_do_not_count_towards_the_depth():
    raw = json.dumps({**GOOD, "message": "[{" * 1000 + '\\"[' * 100}).encode()
    got = decode(MessageFake(raw))
    assert isinstance(got, Alert) and got.extra["message"].startswith("[{[{")


def test_nesting_up_to_the_bound_is_accepted():
    nested = json.loads("[" * (MAX_ALERT_DEPTH - 1) + "]" * (MAX_ALERT_DEPTH - 1))
    assert decode(MessageFake(json.dumps({**GOOD, "x": nested}).encode())).extra["x"] == nested


@pytest.mark.parametrize("raw", [DEEP_ARRAY, DEEP_ARRAY.decode(), bytearray(DEEP_ARRAY), b"\xff" * 10, 12, 1.5,
                                 b"[" * 5000 + b'"' + b"]" * 5000, b'"' + b"\\" * 10_000])
def test_from_json_raises_only_alert_errors(raw):
    with pytest.raises(AlertError):
        Alert.from_json(raw)


def test_an_ordinary_alert_is_not_scanned_for_depth():
    """The bound costs two counts for an alert with few brackets: the scan only runs past the depth limit."""
    raw = json.dumps(GOOD).encode()
    t0 = time.perf_counter()
    for _ in range(2000):
        Alert.from_json(raw)
    assert (time.perf_counter() - t0) / 2000 < 0.001  # generous: ~5 µs on the bench box


def test_the_depth_scan_is_linear_on_hostile_strings():
    """Past the bracket shortcut, a megabyte of escaped quotes in one unterminated string is one pass."""
    raw = b"[]" * 20 + b'"' + b'\\"' * 300_000
    t0 = time.perf_counter()
    assert decode(MessageFake(raw)).code == "not_json"
    assert time.perf_counter() - t0 < 5.0  # ~0.3 s; a backtracking string regex took minutes


def test_the_dead_letter_record_carries_the_bytes_reason_origin_and_consumer():
    got = decode(MessageFake(DEEP_ARRAY, offset=9, partition=1, key=b"bad", ts=123))
    key, value, headers = got.dlq_record("dispatcher:log")
    assert (key, value) == (b"bad", DEEP_ARRAY)
    h = dict(headers)
    assert h["aldebaran.reason_code"] == b"too_deep" and h["aldebaran.reason"].startswith(b"too deep")
    assert (h["aldebaran.source.topic"], h["aldebaran.source.partition"], h["aldebaran.source.offset"],
            h["aldebaran.source.timestamp"], h["aldebaran.consumer"]) == (b"alerts", b"1", b"9", b"123", b"dispatcher:log")


def test_a_failed_dead_letter_send_is_retryable(monkeypatch):
    class SinkFake:
        def deliver(self, records):
            raise AldebaranError("producing to alerts.dlq: 1 of 1 not acknowledged")

    letters = AlertDeadLetters(KafkaSettings())
    monkeypatch.setattr(letters, "_ready", SinkFake)
    with pytest.raises(RetryableError, match="alerts.dlq"):
        letters.send([decode(MessageFake(b"nope"))], "dispatcher:log")
    assert letters.send([], "dispatcher:log") == 0  # nothing to send: no connection at all


# --- the dispatcher: dead-lettered before the run is recorded and its offset committed ------------------
@pytest.fixture
def ledger(tmp_path):
    return Ledger(LocalStore(tmp_path / "ledger"), prefix="deliveries")


def _polled(values) -> Partition:
    part = Partition(0, 1)
    part.buffer = [ChannelDispatcher._decode(MessageFake(v, offset=i)) for i, v in enumerate(values)]
    return part


def test_the_dispatcher_dead_letters_poison_and_commits_past_it(ledger, tmp_path):
    good = json.dumps(GOOD).encode()
    states_at_send = []
    letters = DeadLettersFake(on_send=lambda: states_at_send.append([r.state for r in ledger.runs("log", TOPIC, 0)]))
    channel = LogChannel("log", tmp_path / "alerts.jsonl")
    settler = RunSettler(channel, ledger, DeliverySettings(), TOPIC, "me", DispatchStats(), letters)
    part = _polled([DEEP_ARRAY, b"not json", good])

    assert settler.settle(part, threading.Event()) == 3  # the next offset to commit: past all three
    assert [(r.code, r.offset, consumer) for r, consumer in letters.sent] == [
        ("too_deep", 0, "dispatcher:log"), ("not_json", 1, "dispatcher:log")]
    assert states_at_send == [[CLAIMED]]  # dead-lettered before the run was recorded
    (run,) = ledger.runs("log", TOPIC, 0)
    assert run.state == RECORDED and [e[2] for e in run.entries] == [MALFORMED, MALFORMED, "D"]
    assert run.entries[0][3]["reason"].startswith("too deep")
    assert [json.loads(line)["alert"]["alert_id"] for line in (tmp_path / "alerts.jsonl").read_text().splitlines()] \
        == ["a-1"]
    assert settler.stats.malformed == 2


def test_no_offset_moves_past_poison_the_dead_letter_queue_did_not_take(ledger, tmp_path):
    letters = DeadLettersFake()
    letters.fail = 1
    channel = LogChannel("log", tmp_path / "alerts.jsonl")
    settler = RunSettler(channel, ledger, DeliverySettings(), TOPIC, "me", DispatchStats(), letters)
    part = _polled([b"[]", json.dumps(GOOD).encode()])
    with pytest.raises(RetryableError):
        settler.settle(part, threading.Event())
    assert not (tmp_path / "alerts.jsonl").exists() or not (tmp_path / "alerts.jsonl").read_text()
    assert [r.state for r in ledger.runs("log", TOPIC, 0)] == [CLAIMED]
    assert settler.settle(part, threading.Event()) == 2  # the next turn: the same run, dead-lettered, sent once
    assert [r.code for r, _ in letters.sent] == ["not_object"]
    assert len((tmp_path / "alerts.jsonl").read_text().splitlines()) == 1


# --- the lane reconciler --------------------------------------------------------------------------------
def test_the_reconciler_skips_poison_dead_letters_it_and_reads_on(tmp_path):
    letters = DeadLettersFake()
    kafka = KafkaSettings()
    rec = reconciler.Reconciler(kafka, LocalStore(str(tmp_path)), "realtime", 1.0, "lanes", dead_letters=letters)
    fast = [MessageFake(DEEP_ARRAY, offset=0, topic=kafka.fast_alerts_topic),
            MessageFake(json.dumps({**GOOD, "alert_id": "../x"}).encode(), offset=1, topic=kafka.fast_alerts_topic),
            MessageFake(json.dumps(GOOD).encode(), offset=2, topic=kafka.fast_alerts_topic)]
    letters.fail = 1
    for msg in fast:
        rec._on_alert(msg)
    rec._dead_letter()  # Kafka away: kept for the next step
    assert letters.sent == [] and rec.rejected == 2
    rec._on_alert(MessageFake(b"\xff", offset=5, topic=kafka.alerts_topic))
    rec._dead_letter()
    assert [(r.topic, r.offset, r.code, c) for r, c in letters.sent] == [
        (kafka.fast_alerts_topic, 0, "too_deep", "reconciler:realtime"),
        (kafka.fast_alerts_topic, 1, "invalid", "reconciler:realtime"),
        (kafka.alerts_topic, 5, "not_json", "reconciler:realtime")]
    assert rec._rejected == [] and rec.status()["rejected"] == 3
    assert "a-1" in rec.state.pending_fast and rec._fast_alerts["a-1"]["kind"] == "OVERFILL"  # the good one counts


def test_retractions_and_reinstatements_decode_as_alerts_on_the_fast_topic():
    """The reconciler produces them to alerts.fast (aldebaran.delivery.retraction): the fast dispatcher must
    take them as alerts, not dead-letter them."""
    from aldebaran.delivery.retraction import REINSTATEMENT, RETRACTION, reinstatement, retraction

    record = {"alert_id": "a-1", "lane": "realtime", "reported_at": 1_700_000_300.0, "why": "not confirmed",
              "alert": GOOD}
    for message in (retraction(record), reinstatement(retraction(record), 1_700_000_400.0)):
        got = decode(MessageFake(message.to_json(), topic="alerts.fast", key=message.alert_id.encode()))
        assert isinstance(got, Alert) and got.kind in (RETRACTION, REINSTATEMENT)
        assert got.to_dict() == message.to_dict() and got.order_id == "1"
