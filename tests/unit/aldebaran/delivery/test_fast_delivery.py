"""Fast delivery without services: the ``fast`` extra, the fast dispatcher's poll, the retraction's payload,
the reconciler's produce-then-record order (a fake producer, named so), its skipping of its own messages, and
which dispatchers the supervisor plans."""

from __future__ import annotations

import json

import pytest

from aldebaran.delivery.channels import Connection, channel_from_connection, sms_text
from aldebaran.delivery.fast import DISPATCHER_NAME, FastChannelDispatcher, fast_channel_names
from aldebaran.delivery.retraction import (
    REINSTATEMENT,
    RETRACTION,
    reinstatement,
    reinstatement_id,
    retraction,
    retraction_id,
)
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.exceptions import ConfigError
from aldebaran.lanes import reconciler
from aldebaran.platform.dispatch_supervisor import plan
from aldebaran.platform.settings import DispatchSupervisorSettings
from aldebaran.storage.store import LocalStore

WEBHOOK = {"conn_type": "http", "host": "http://127.0.0.1:9", "password": "s3cret"}


def conn(extra: dict, source: str = "AIRFLOW_CONN_ALDEBARAN_HOOK") -> Connection:
    return Connection.from_fields(source, {**WEBHOOK, "extra": extra})


# --- the opt-in -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, fast", [({}, False), ({"fast": True}, True), ({"fast": False}, False),
                                         ({"fast": "true"}, True), ({"fast": "no"}, False)])
def test_a_channel_opts_in_with_fast_in_its_extra(extra, fast):
    channel = channel_from_connection("hook", conn(extra))
    try:
        assert channel.fast is fast
    finally:
        channel.close()


@pytest.mark.parametrize("value", ["sometimes", 1.5, ["true"]])
def test_an_invalid_fast_extra_names_the_connection_and_the_field(value):
    with pytest.raises(ConfigError) as err:
        channel_from_connection("hook", conn({"fast": value}))
    assert str(err.value) == "AIRFLOW_CONN_ALDEBARAN_HOOK: field extra.fast must be true or false"


def test_the_builtin_log_channel_without_a_connection_is_not_fast():
    assert channel_from_connection("log", None).fast is False


def test_fast_channel_names_read_the_connections_only():
    conns = {"hook": conn({"fast": True}), "mail": conn({})}
    assert fast_channel_names(["hook", "mail", "log"], lookup=conns.get) == ["hook"]


# --- the fast dispatcher's poll ---------------------------------------------------------------------------
class FakeConsumer:
    """Records how it was asked (a failure-free stand-in for confluent_kafka.Consumer)."""

    def __init__(self, first, rest) -> None:
        self.first, self.rest, self.calls = first, rest, []

    def poll(self, timeout):
        self.calls.append(("poll", timeout))
        return self.first

    def consume(self, num_messages, timeout):
        self.calls.append(("consume", num_messages, timeout))
        return self.rest


def _fetcher(poll_max: int = 100) -> FastChannelDispatcher:
    worker = FastChannelDispatcher.__new__(FastChannelDispatcher)
    worker.settings = DeliverySettings(poll_max=poll_max)
    return worker


def test_the_fast_dispatcher_blocks_for_the_first_message_then_takes_what_is_there():
    c = FakeConsumer("m1", ["m2", "m3"])
    assert _fetcher().fetch(c) == ["m1", "m2", "m3"]
    assert c.calls == [("poll", 0.2), ("consume", 99, 0)]  # never waits to fill a batch
    idle = FakeConsumer(None, ["never read"])
    assert _fetcher().fetch(idle) == [] and idle.calls == [("poll", 0.2)]
    one = FakeConsumer("m1", ["never read"])
    assert _fetcher(poll_max=1).fetch(one) == ["m1"] and one.calls == [("poll", 0.2)]


def test_the_fast_dispatcher_reads_the_fast_topic_in_a_group_of_its_own():
    from aldebaran.settings import KafkaSettings

    kafka = KafkaSettings(alerts_topic="a", fast_alerts_topic="a.fast")
    assert FastChannelDispatcher.topic_of(kafka) == "a.fast" and FastChannelDispatcher.group_suffix == "-fast"


# --- the retraction ---------------------------------------------------------------------------------------
FAST_ALERT = {"alert_id": "0123456789abcdef0123456789abcdef", "kind": "OVERFILL", "order_id": "o-7",
              "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 130, "purchase_count": 2,
              "trigger_event_id": "p-2", "trigger_event_ts": 1_700_000_000_000, "detected_at": 1_700_000_000_005,
              "lane": "realtime"}
RECORD = {"alert_id": FAST_ALERT["alert_id"], "lane": "realtime", "fast_ts": 1_700_000_000_010,
          "reported_at": 1_700_000_300.5, "ttl_seconds": 300.0, "alert": FAST_ALERT,
          "why": "the exact lane raised no alert within 300s"}


def test_a_retraction_names_the_alert_it_retracts_and_why():
    out = retraction(RECORD).to_dict()  # every channel can send it: it is an Alert
    assert out["alert_id"] == "retract-0123456789abcdef0123456789abcdef" == retraction_id(FAST_ALERT["alert_id"])
    assert (out["kind"], out["order_id"], out["retracts"], out["retracted_kind"], out["lane"]) == (
        RETRACTION, "o-7", FAST_ALERT["alert_id"], "OVERFILL", "realtime")
    assert out["reason"] == "the exact lane raised no alert within 300s"
    assert (out["requested"], out["purchased"], out["client"], out["stock"]) == (100, 130, "Sendence", "AAPL")
    assert out["detected_at"] == 1_700_000_300_500
    assert out["message"].startswith("RETRACTED: the fast lane's OVERFILL alert 0123456789abcdef0123456789abcdef")
    assert retraction(RECORD).to_dict() == out  # the same record, the same retraction
    alert = retraction(RECORD)
    assert alert.extra["retracts"] == FAST_ALERT["alert_id"]
    assert sms_text(alert) == ("Aldebaran RETRACTION order o-7: alert 0123456789abcdef0123456789abcdef withdrawn "
                               "(not confirmed)")


def test_a_retraction_without_the_fast_alert_still_names_it():
    out = retraction({**RECORD, "alert": None})
    assert (out.extra["retracts"], out.order_id, out.extra["retracted_kind"]) == (FAST_ALERT["alert_id"], "unknown", "alert")


def test_a_reinstatement_withdraws_the_retraction():
    alert = reinstatement(retraction(RECORD), confirmed_at=1_700_000_400.0)
    out = alert.to_dict()
    assert (out["alert_id"], out["kind"], out["reinstates"]) == (
        reinstatement_id(FAST_ALERT["alert_id"]), REINSTATEMENT, FAST_ALERT["alert_id"])
    assert "retracts" not in out and out["detected_at"] == 1_700_000_400_000
    assert "the alert stands" in out["message"]
    assert sms_text(alert).endswith("stands (confirmed late)")


# --- the reconciler: produce the retraction (acknowledged), then record ------------------------------------
class ProducerFake:
    """A confluent-kafka Producer stand-in: keeps what was produced, acknowledges each at flush (or, with
    `fail_flush`, raises there: a broker gone before the acks), and notes what the store held at each flush."""

    def __init__(self, store=None, fail_flush: bool = False) -> None:
        self.store, self.fail_flush = store, fail_flush
        self.produced: list[tuple[str, bytes, dict]] = []
        self.flushes: list[list[str]] = []  # the store's lane keys at each flush
        self._pending: list = []

    def produce(self, topic, key=None, value=None, on_delivery=None, **_kw):
        self.produced.append((topic, key, json.loads(value)))
        self._pending.append(on_delivery)

    def flush(self, timeout=None):
        from confluent_kafka import KafkaError, KafkaException

        self.flushes.append([o["Key"] for o in self.store.list("lanes/")] if self.store else [])
        if self.fail_flush:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down (fake)"))
        pending, self._pending = self._pending, []
        for cb in pending:
            cb(None, None)
        return 0


def _reconciler(tmp_path, producer):
    from aldebaran.delivery.retraction import RetractionSink
    from aldebaran.settings import KafkaSettings

    store = LocalStore(str(tmp_path))
    kafka = KafkaSettings(alerts_topic="alerts", fast_alerts_topic="alerts.fast")
    rec = reconciler.Reconciler(kafka, store, "realtime", 1.0, "lanes",
                                retractor=RetractionSink(kafka, producer if not callable(producer) else producer(store)))
    return rec, store


def _judge_unconfirmed(rec, alert_id="a1"):
    rec.state.fast(alert_id, 1000)
    rec._fast_alerts[alert_id] = {**FAST_ALERT, "alert_id": alert_id}
    rec.state.caught_up(exact_at=5000)
    rec._apply(rec.state.judge())


def test_the_retraction_is_produced_to_the_fast_topic_keyed_by_its_own_id(tmp_path):
    rec, store = _reconciler(tmp_path, lambda store: ProducerFake(store))
    producer = rec.retractor._producer
    _judge_unconfirmed(rec)
    [(topic, key, value)] = producer.produced
    assert (topic, key) == ("alerts.fast", b"retract-a1")
    assert (value["alert_id"], value["kind"], value["retracts"], value["retracted_kind"], value["order_id"],
            value["lane"]) == ("retract-a1", RETRACTION, "a1", "OVERFILL", "o-7", "realtime")
    assert value["requested"] == 100 and "exact lane raised no alert a1" in value["reason"]


def test_the_retraction_is_acknowledged_before_the_record_is_written(tmp_path):
    rec, store = _reconciler(tmp_path, lambda store: ProducerFake(store))
    _judge_unconfirmed(rec)
    assert rec.retractor._producer.flushes == [[]]  # nothing written when it was flushed
    body = json.loads(store.get(reconciler.record_key("lanes", "realtime", "a1")).body)
    assert body["retraction"] == "retract-a1" and "retracted on the channels" in body["why"]


def test_a_retraction_kafka_did_not_acknowledge_writes_nothing_and_is_produced_again(tmp_path):
    failing = ProducerFake(fail_flush=True)
    rec, store = _reconciler(tmp_path, failing)
    _judge_unconfirmed(rec)
    assert reconciler.list_records(store, "lanes", "realtime") == []  # nothing recorded: judged again
    assert list(rec._held) == ["a1"] and rec.status()["retractions_waiting"] == 1
    rec.retractor._producer = ProducerFake(store)  # Kafka is back
    rec._held_at = 0.0  # its wait is over
    rec._apply(rec.state.judge())
    assert [k for _t, k, _v in rec.retractor._producer.produced] == [b"retract-a1"]  # the same id again
    assert [r["retraction"] for r in reconciler.list_records(store, "lanes", "realtime")] == ["retract-a1"]
    assert rec._held == {}


def test_a_late_confirmation_produces_a_reinstatement_then_deletes_the_record(tmp_path):
    rec, store = _reconciler(tmp_path, lambda store: ProducerFake(store))
    _judge_unconfirmed(rec)
    producer = rec.retractor._producer
    rec._apply(rec.state.exact("a1", "OVERFILL", 6000))
    topic, key, value = producer.produced[-1]
    assert (topic, key, value["kind"], value["reinstates"]) == ("alerts.fast", b"reinstate-a1", REINSTATEMENT, "a1")
    assert producer.flushes[-1] == [reconciler.record_key("lanes", "realtime", "a1")]  # still there at the flush
    assert reconciler.list_records(store, "lanes", "realtime") == []


def test_a_reinstatement_kafka_did_not_acknowledge_keeps_the_record(tmp_path):
    rec, store = _reconciler(tmp_path, lambda store: ProducerFake(store))
    _judge_unconfirmed(rec)
    rec.retractor._producer = ProducerFake(fail_flush=True)
    rec._apply(rec.state.exact("a1", "OVERFILL", 6000))
    assert [r["alert_id"] for r in reconciler.list_records(store, "lanes", "realtime")] == ["a1"]
    rec.retractor._producer = ProducerFake(store)
    rec._reinstate_at = 0.0
    rec._apply(rec.state.judge())
    assert [k for _t, k, _v in rec.retractor._producer.produced] == [b"reinstate-a1"]
    assert reconciler.list_records(store, "lanes", "realtime") == []


def test_without_a_fast_channel_nothing_is_produced(tmp_path):
    from aldebaran.settings import KafkaSettings

    store = LocalStore(str(tmp_path))
    rec = reconciler.Reconciler(KafkaSettings(), store, "realtime", 1.0, "lanes")  # retractor None
    _judge_unconfirmed(rec)
    body = json.loads(store.get(reconciler.record_key("lanes", "realtime", "a1")).body)
    assert "retraction" not in body and "not delivered by the dispatchers" in body["why"]
    rec._apply(rec.state.exact("a1", "OVERFILL", 6000))
    assert reconciler.list_records(store, "lanes", "realtime") == []


def test_the_reconciler_skips_its_own_retractions_on_the_fast_topic(tmp_path):
    from tests.unit.aldebaran.delivery.test_alert_decode import MessageFake

    rec, _store = _reconciler(tmp_path, lambda store: ProducerFake(store))
    for message in (retraction(RECORD), reinstatement(retraction(RECORD), 1_700_000_400.0)):
        rec._on_alert(MessageFake(message.to_json(), topic="alerts.fast", key=message.alert_id.encode()))
    assert rec.state.counts.fast == 0 and rec.state.pending_fast == {} and rec.status()["own_skipped"] == 2
    rec._on_alert(MessageFake(json.dumps(FAST_ALERT).encode(), topic="alerts.fast"))
    assert list(rec.state.pending_fast) == [FAST_ALERT["alert_id"]]  # a fast alert is still judged


def test_the_keeper_gets_a_retraction_sink_only_when_a_channel_is_fast(monkeypatch):
    from aldebaran.delivery.fast import lane_retractor
    from aldebaran.delivery.retraction import RetractionSink
    from aldebaran.settings import KafkaSettings

    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_LOG", raising=False)
    assert lane_retractor(KafkaSettings()) is None
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_LOG", json.dumps({"conn_type": "log", "extra": {"fast": True}}))
    sink = lane_retractor(KafkaSettings(fast_alerts_topic="f.fast"), ProducerFake())
    assert isinstance(sink, RetractionSink) and sink.topic == "f.fast"
    # As lane_supervisor names them (ALDEBARAN_LANES_FAST_CHANNELS): the names decide, not the connections.
    assert lane_retractor(KafkaSettings(), ProducerFake(), named="") is None
    assert isinstance(lane_retractor(KafkaSettings(), ProducerFake(), named="hook"), RetractionSink)
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_LOG")
    assert isinstance(lane_retractor(KafkaSettings(), ProducerFake(), named="log"), RetractionSink)


def test_lane_supervisor_names_the_fast_channels_to_the_keeper_without_their_connections(monkeypatch):
    from aldebaran.platform import lane_supervisor
    from aldebaran.platform import processes as procs

    secret = "s3cr3t-hmac"
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log,hook")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_HOOK", json.dumps({**WEBHOOK, "password": secret, "extra": {"fast": True}}))
    launched = {}
    monkeypatch.setattr(procs, "launch_detached", lambda name, argv, env: launched.update(name=name, env=env) or 1)
    lane_supervisor.launch()
    env = launched["env"]
    assert env["ALDEBARAN_LANES_FAST_CHANNELS"] == "hook"
    assert not any(k.startswith("AIRFLOW_CONN_ALDEBARAN_") for k in env) and secret not in json.dumps(env)


# --- supervision -------------------------------------------------------------------------------------------
def test_the_fast_dispatcher_is_planned_when_the_lane_is_enabled_and_a_channel_is_fast(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log,hook")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_HOOK", json.dumps({**WEBHOOK, "extra": {"fast": True}}))
    monkeypatch.setenv("ALDEBARAN_LANES_ENABLED", "false")
    assert plan(DispatchSupervisorSettings()) == {"log": ["log"], "hook": ["hook"]}
    monkeypatch.setenv("ALDEBARAN_LANES_ENABLED", "true")
    assert plan(DispatchSupervisorSettings()) == {"log": ["log"], "hook": ["hook"], DISPATCHER_NAME: ["hook"]}
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_HOOK", json.dumps(WEBHOOK))
    assert DISPATCHER_NAME not in plan(DispatchSupervisorSettings())


def test_a_fast_dispatcher_does_not_cover_the_alerts_topic_for_the_watcher():
    from aldebaran.delivery import wakeup

    fast, exact = {"status": "running", "at": 995.0, "fast": True}, {"status": "running", "at": 995.0}
    assert not wakeup.streaming_covers([fast], 1000.0, 30)  # it reads the fast topic: alert_dispatch is woken
    assert wakeup.streaming_covers([exact, {**fast, "status": "failed"}], 1000.0, 30)
