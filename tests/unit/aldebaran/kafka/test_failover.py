"""Failover settings of every Kafka client (aldebaran.kafka.failover): each builder carries them, the
dispatchers' group hands a dead member's partitions over within the failover target, the Kafka connection's
extra wins over them (there is no second name for them as settings), and the group settings fail at start
naming the variable. The expected values are written out, never read back from the builders. No broker needed."""

from __future__ import annotations

import threading

import pytest

from aldebaran.delivery.settings import DeliverySettings
from aldebaran.exceptions import ConfigError
from aldebaran.kafka import admin as kadmin, failover, io as kio
from aldebaran.kafka.conn import spark_kafka_options
from aldebaran.settings import KafkaSettings, load

FAILOVER_TARGET_MS = 10_000  # detection + takeover for any single fault (the design brief's target)

# Our values, written out.
LIBRDKAFKA_COMMON = {
    "topic.metadata.refresh.interval.ms": 5_000, "metadata.max.age.ms": 15_000,
    "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1_000,
    "retry.backoff.ms": 100, "retry.backoff.max.ms": 1_000,
    "socket.timeout.ms": 10_000, "socket.connection.setup.timeout.ms": 10_000,
}
LIBRDKAFKA_PRODUCER = {"enable.idempotence": True, "message.timeout.ms": 300_000}
JAVA_COMMON = {
    "kafka.metadata.max.age.ms": "5000", "kafka.reconnect.backoff.ms": "100", "kafka.reconnect.backoff.max.ms": "1000",
    "kafka.retry.backoff.ms": "100", "kafka.retry.backoff.max.ms": "1000", "kafka.request.timeout.ms": "10000",
    "kafka.socket.connection.setup.timeout.ms": "10000", "kafka.socket.connection.setup.timeout.max.ms": "10000",
}


@pytest.fixture
def clean(monkeypatch):
    for var in ("AIRFLOW_CONN_ALDEBARAN_KAFKA", "ALDEBARAN_KAFKA_CONNECTION", "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS",
                "ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS",
                "ALDEBARAN_DELIVERY_ASSIGNMENT_STRATEGY", "ALDEBARAN_DELIVERY_MAX_POLL_INTERVAL_MS"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


class Captured(Exception):
    """Raised by a fake client constructor once it has the configuration."""


def capture(monkeypatch, target, name: str) -> list[dict]:
    seen: list[dict] = []

    def fake(conf, *args, **kwargs):
        seen.append(dict(conf))
        raise Captured

    monkeypatch.setattr(target, name, fake)
    return seen


def subset(conf: dict, expected: dict) -> dict:
    return {k: conf.get(k) for k in expected}


# --- librdkafka clients ----------------------------------------------------------------------------------
def test_producers_carry_the_common_and_the_producer_keys(clean):
    seen = capture(clean, kio, "Producer")
    settings = load(KafkaSettings)
    for build in (lambda: kio.producer(settings), lambda: kio.AlertSink(settings).send([("a", b"{}")]),
                  lambda: kio.DlqSink(settings).add([(b"k", b"v", [])])):
        with pytest.raises(Captured):
            build()
    assert len(seen) == 3
    for conf in seen:
        assert subset(conf, {**LIBRDKAFKA_COMMON, **LIBRDKAFKA_PRODUCER}) == {**LIBRDKAFKA_COMMON, **LIBRDKAFKA_PRODUCER}


def test_consumers_and_admin_clients_carry_the_common_keys_and_no_producer_key(clean):
    import confluent_kafka

    consumers = capture(clean, kio, "Consumer")
    admins = capture(clean, kadmin, "AdminClient")
    lag = capture(clean, confluent_kafka, "Consumer")
    settings = load(KafkaSettings)
    for build in (lambda: kio.consumer(settings, "g"), lambda: kadmin.admin(settings),
                  lambda: kadmin.consumer_lag(settings, "g", "alerts")):
        with pytest.raises(Captured):
            build()
    for conf in (*consumers, *admins, *lag):
        assert subset(conf, LIBRDKAFKA_COMMON) == LIBRDKAFKA_COMMON
        assert not set(conf) & set(LIBRDKAFKA_PRODUCER)
    assert (len(consumers), len(admins), len(lag)) == (1, 1, 1)


def test_the_connection_extra_wins_over_the_failover_keys_and_the_caller_over_both(clean):
    clean.setenv("AIRFLOW_CONN_ALDEBARAN_KAFKA", '{"conn_type": "kafka", "extra": {"bootstrap.servers": "b:9092", '
                                                 '"socket.timeout.ms": 30000}}')
    seen = capture(clean, kio, "Consumer")
    with pytest.raises(Captured):
        kio.consumer(load(KafkaSettings), "g", **{"reconnect.backoff.max.ms": 2000})
    assert (seen[0]["socket.timeout.ms"], seen[0]["reconnect.backoff.max.ms"]) == (30000, 2000)
    assert seen[0]["retry.backoff.max.ms"] == 1_000


def test_the_bus_channels_producer_carries_the_failover_keys_under_its_own(clean):
    from aldebaran.delivery.channels.kafka import KafkaChannel

    ch = KafkaChannel("bus", "t", {"bootstrap.servers": "x:1", "socket.timeout.ms": 20000})
    expected = {**LIBRDKAFKA_COMMON, **LIBRDKAFKA_PRODUCER, "socket.timeout.ms": 20000}
    assert subset(ch.config, expected) == expected


def test_a_kind_the_module_does_not_know_is_refused(clean):
    with pytest.raises(ValueError, match="kind"):
        failover.librdkafka("streams")
    with pytest.raises(ValueError, match="role"):
        failover.java("both")


# --- the dispatchers' group --------------------------------------------------------------------------------
def group_of(settings: DeliverySettings) -> dict[str, object]:
    """The group keys of these delivery settings, passed in as the dispatcher passes them."""
    return failover.dispatcher_group(session_timeout_ms=settings.session_timeout_ms,
                                     assignment_strategy=settings.assignment_strategy,
                                     max_poll_interval_ms=settings.max_poll_interval_ms)


def test_the_dispatcher_group_defaults_hand_a_dead_members_partitions_over_within_the_target(clean):
    group = group_of(load(DeliverySettings))
    assert group == {"session.timeout.ms": 6_000, "heartbeat.interval.ms": 1_200,
                     "partition.assignment.strategy": "cooperative-sticky", "max.poll.interval.ms": 300_000}
    # The coordinator expires the dead member after the session; the survivor hears of it at its next heartbeat.
    assert group["session.timeout.ms"] + group["heartbeat.interval.ms"] <= FAILOVER_TARGET_MS


def test_the_heartbeat_is_a_fifth_of_the_session_and_never_below_half_a_second():
    assert [failover.heartbeat_ms(s) for s in (1_000, 6_000, 10_000, 45_000)] == [500, 1_200, 2_000, 9_000]


def test_a_dispatchers_consumer_is_built_with_the_group_keys(clean, tmp_path):
    from aldebaran.delivery.channels.log import LogChannel
    from aldebaran.delivery.decode import AlertDeadLetters
    from aldebaran.delivery.dispatcher import ChannelDispatcher
    from aldebaran.delivery.stats import DispatchStats
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.storage.store import LocalStore

    clean.setenv("ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS", "7000")
    seen = capture(clean, kio, "Consumer")
    ledger = Ledger(LocalStore(tmp_path / "ledger"))
    worker = ChannelDispatcher(LogChannel("log", tmp_path / "alerts.jsonl"), ledger, load(DeliverySettings),
                               load(KafkaSettings), "g", "me", DispatchStats(), AlertDeadLetters(load(KafkaSettings)))
    with pytest.raises(Captured):
        worker.run(threading.Event(), idle_timeout=0.1)
    expected = {**LIBRDKAFKA_COMMON, "group.id": "g-log", "session.timeout.ms": 7_000, "heartbeat.interval.ms": 1_400,
                "partition.assignment.strategy": "cooperative-sticky", "max.poll.interval.ms": 300_000}
    assert subset(seen[0], expected) == expected


# --- Spark's Kafka source and sink --------------------------------------------------------------------------
class _Conf:
    def __init__(self) -> None:
        self.values: dict = {}

    def set(self, key, value) -> None:
        self.values[key] = value


class Session:
    def __init__(self) -> None:
        self.conf = _Conf()


def test_the_spark_source_and_sink_carry_their_failover_options(clean):
    settings = load(KafkaSettings)
    source = spark_kafka_options(Session(), settings, "source")
    sink = spark_kafka_options(Session(), settings, "sink")
    assert subset(source, JAVA_COMMON) == JAVA_COMMON and subset(sink, JAVA_COMMON) == JAVA_COMMON
    assert (source["kafka.default.api.timeout.ms"], sink["kafka.delivery.timeout.ms"]) == ("60000", "300000")
    assert "kafka.delivery.timeout.ms" not in source and "kafka.default.api.timeout.ms" not in sink
    assert source["kafka.bootstrap.servers"] == "127.0.0.1:9092"


def test_the_connections_spark_options_win_and_plaintext_is_not_redacted(clean):
    clean.setenv("AIRFLOW_CONN_ALDEBARAN_KAFKA", '{"conn_type": "kafka", "extra": {"bootstrap.servers": "b:9092", '
                                                 '"spark_kafka_options": {"kafka.request.timeout.ms": 40000}}}')
    session = Session()
    options = spark_kafka_options(session, load(KafkaSettings), "source")
    assert options["kafka.request.timeout.ms"] == "40000"
    assert options["kafka.retry.backoff.max.ms"] == "1000"


class Chain:
    """A DataStreamReader/Writer stand-in that records its options."""

    def __init__(self) -> None:
        self.options_seen: dict = {}

    def format(self, _name):
        return self

    def options(self, **kv):
        self.options_seen.update(kv)
        return self

    def option(self, key, value):
        self.options_seen[key] = value
        return self

    def load(self):
        return self

    def queryName(self, _name):  # noqa: N802 - Spark's name
        return self

    def outputMode(self, _mode):  # noqa: N802 - Spark's name
        return self

    def trigger(self, **_kw):
        return self

    def start(self):
        return self


def test_the_auditors_source_reads_with_the_source_options(clean):
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.audit.sparkjob.job import kafka_source

    reader = Chain()
    session = Session()
    session.readStream = reader
    kafka_source(session, load(AuditorSettings), load(KafkaSettings))
    expected = {**JAVA_COMMON, "kafka.default.api.timeout.ms": "60000"}
    assert subset(reader.options_seen, expected) == expected


def test_the_lanes_sink_writes_with_the_sink_options(clean):
    from aldebaran.lanes import realtime

    reader, writer, session = Chain(), Chain(), Session()
    session.readStream = reader
    reader.writeStream = writer
    settings = load(KafkaSettings)
    realtime.start(session, trades_topic="t", alerts_topic="a", checkpoint="/tmp/x", transform=lambda rows: rows,
                   kafka_options=spark_kafka_options(session, settings, "source"),
                   sink_kafka_options=spark_kafka_options(session, settings, "sink"))
    assert reader.options_seen["kafka.default.api.timeout.ms"] == "60000"
    assert "kafka.delivery.timeout.ms" not in reader.options_seen
    assert (writer.options_seen["kafka.delivery.timeout.ms"], writer.options_seen["kafka.linger.ms"]) == ("300000", "0")
    assert subset(writer.options_seen, JAVA_COMMON) == JAVA_COMMON


# --- no second name: the connection's extra is the configuration ------------------------------------------
def test_the_failover_keys_are_no_settings_of_ours_and_the_extra_changes_them(clean):
    clean.setenv("ALDEBARAN_KAFKA_REQUEST_TIMEOUT_MS", "30000")  # a name this platform once read: ignored now
    assert "request_timeout_ms" not in KafkaSettings.model_fields
    seen = capture(clean, kio, "Producer")
    with pytest.raises(Captured):
        kio.producer(load(KafkaSettings))
    assert seen[0]["socket.timeout.ms"] == 10_000
    clean.setenv("AIRFLOW_CONN_ALDEBARAN_KAFKA", '{"conn_type": "kafka", "extra": {"bootstrap.servers": "b:9092", '
                                                 '"socket.timeout.ms": 30000, "message.timeout.ms": 600000}}')
    with pytest.raises(Captured):
        kio.producer(load(KafkaSettings))
    assert (seen[1]["socket.timeout.ms"], seen[1]["message.timeout.ms"]) == (30000, 600000)


# --- the group settings validate ------------------------------------------------------------------------------
@pytest.mark.parametrize("env, message", [
    ({"ALDEBARAN_DELIVERY_ASSIGNMENT_STRATEGY": "sticky"}, "ALDEBARAN_DELIVERY_ASSIGNMENT_STRATEGY: Input should be"),
    ({"ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS": "20000", "ALDEBARAN_DELIVERY_MAX_POLL_INTERVAL_MS": "10000"},
     r"ALDEBARAN_DELIVERY_MAX_POLL_INTERVAL_MS: Value error, must be at least ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS \(20000\)"),
])
def test_a_bad_group_setting_fails_at_start_naming_it(clean, env, message):
    for name, value in env.items():
        clean.setenv(name, value)
    with pytest.raises(ConfigError, match="^invalid settings: .*" + message):
        load(DeliverySettings)


def test_an_eager_strategy_can_be_chosen(clean):
    clean.setenv("ALDEBARAN_DELIVERY_ASSIGNMENT_STRATEGY", "range,roundrobin")
    assert group_of(load(DeliverySettings))["partition.assignment.strategy"] == "range,roundrobin"
