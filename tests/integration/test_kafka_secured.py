"""The platform's Kafka connection against the local broker's secured listener (SASL_SSL; SCRAM-SHA-512 and
PLAIN; its CA made at start; aldebaran_lab.services.kafka_tls): the product's confluent-kafka clients produce
and consume through it, a wrong password fails naming the connection (never echoing the password), Spark's
Kafka source and sink (the Java client) work with the translated options, and inside a real Airflow task
(dag.test()) the connection created through Airflow's REST API is the one the dispatcher's consumer uses.

The listener is found the way the services describe it: ``<run dir>/kafka/secure-listener.json`` (address,
CA, user) and the password in .env (ALDEBARAN_KAFKA_SECURE_PASSWORD)."""

from __future__ import annotations

import json
import logging

import pytest

from aldebaran.runtime import paths
from aldebaran.exceptions import ConfigError
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran.kafka.conn import resolve, spark_kafka_options
from aldebaran.settings import KafkaSettings, load
from aldebaran_lab.services import kafka_tls
from tests.airflow_home import airflow_db, dagbag  # noqa: F401  (fixtures)
from tests.conftest import assert_eventually
from tests.integration.dags.test_alert_dispatch_airflow_connection import (  # noqa: F401  (fixtures)
    _alert,
    airflow_api,
    api_objects,
)
from tests.integration.dags.test_dispatch_supervisor import dispatcher_env  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

CONN_VAR = "AIRFLOW_CONN_ALDEBARAN_KAFKA"


@pytest.fixture(scope="session")
def secure_listener(services_up) -> kafka_tls.SecureListener:
    listener = kafka_tls.read_description(paths.run_dir() / "kafka")
    if listener is None:
        pytest.fail("the local broker has no secured listener (ALDEBARAN_KAFKA_SECURE_PORT=0?): restart it with "
                    "`aldebaran services down kafka && aldebaran services up kafka`", pytrace=False)
    return listener


@pytest.fixture
def secured(secure_listener, kafka_topics, monkeypatch):
    """Point the platform at the secured listener through the connection (outside Airflow: its env var);
    ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS names a closed port, so nothing reaches Kafka around the connection."""
    def use(mechanism: str = "SCRAM-SHA-512", password: str | None = None) -> KafkaSettings:
        monkeypatch.setenv(CONN_VAR, json.dumps(secure_listener.connection(mechanism, password)))
        monkeypatch.setenv("ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
        return load(KafkaSettings)
    yield use
    monkeypatch.delenv(CONN_VAR, raising=False)  # kafka_topics deletes the topics over the plaintext listener


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_produce_and_consume_through_the_connection(secured, mechanism, unique):
    settings = secured(mechanism)
    cluster = resolve(settings)
    assert (cluster.bootstrap_servers, cluster.protocol) == (settings_listener_address(), "SASL_SSL")
    records = [(f"o-{i}".encode(), json.dumps({"id": f"o-{i}", "n": i}).encode()) for i in range(20)]
    assert kio.produce_all(kio.producer(settings), settings.trades_topic, records) == 20
    got = kio.read_topic(settings, settings.trades_topic)
    assert sorted((m.key(), m.value()) for m in got) == sorted(records)
    assert kio.end_offsets(settings, settings.trades_topic) and kadmin.partition_count(
        settings, settings.trades_topic) == settings.partitions
    lag = kadmin.consumer_lag(settings, f"g-{unique}", settings.trades_topic)
    assert lag == {"lag": 20, "partitions": lag["partitions"], "committed": False}


def settings_listener_address() -> str:
    return kafka_tls.read_description(paths.run_dir() / "kafka").bootstrap_servers


def test_a_wrong_password_fails_naming_the_connection(secured, caplog):
    settings = secured(password="not-the-password-" + "x" * 8)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ConfigError) as exc:
            kadmin.ensure_topics(settings)
    message = str(exc.value)
    assert f"refused the credentials of {CONN_VAR}" in message, message
    assert "Authentication failed" in message
    assert "not-the-password" not in message and "not-the-password" not in caplog.text


def test_spark_source_and_sink_through_the_secured_listener(secured, spark):
    settings = secured("SCRAM-SHA-512")
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)]
    kio.produce_all(kio.producer(settings), settings.trades_topic, records)
    options = spark_kafka_options(spark, settings)
    assert options["kafka.security.protocol"] == "SASL_SSL" and "kafka.sasl.jaas.config" in options
    rows = (spark.read.format("kafka").options(**options).option("subscribe", settings.trades_topic)
            .option("startingOffsets", "earliest").load().select("key", "value").collect())
    assert sorted((bytes(r.key), bytes(r.value)) for r in rows) == sorted(records)
    # The sink: the same options, then read back with confluent-kafka through the connection.
    (spark.createDataFrame([("a1", "alert one"), ("a2", "alert two")], "key string, value string")
     .write.format("kafka").options(**options).option("topic", settings.alerts_topic).save())
    assert sorted(m.value() for m in kio.read_topic(settings, settings.alerts_topic)) == [b"alert one", b"alert two"]
    # The password stays out of what Spark shows of the source.
    plan = (spark.read.format("kafka").options(**options).option("subscribe", settings.trades_topic).load()
            ._jdf.queryExecution().toString())
    assert kafka_tls.secure_password() not in plan


def test_the_auditors_kafka_source_reads_through_the_connection(secured, spark, tmp_path):
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.audit.sparkjob.job import kafka_source

    settings = secured("PLAIN")
    kio.produce_all(kio.producer(settings), settings.trades_topic, [(b"o-1", b'{"id": "o-1"}')])
    auditor = AuditorSettings(starting_offsets="earliest", checkpoint=str(tmp_path / "cp"))
    query = (kafka_source(spark, auditor, settings).select("value").writeStream.format("memory")
             .queryName("secured_source").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    assert [bytes(r.value) for r in spark.sql("select value from secured_source").collect()] == [b'{"id": "o-1"}']


def test_inside_an_airflow_task_the_connection_comes_from_airflow(
        airflow_db, dagbag, kafka_topics, secure_listener, api_objects, monkeypatch, tmp_path):  # noqa: F811
    """alert_dispatch under dag.test(): the Kafka connection exists only in Airflow's metadata DB (created
    through the REST API); the environment has none and its broker list is a closed port. The dispatcher
    reads the alerts, so its consumer went through the connection Airflow resolved."""
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.storage.store import LocalStore

    alerts = [_alert(f"secured-{i}") for i in range(3)]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(a["alert_id"], json.dumps(a)) for a in alerts])
    log_file = tmp_path / "alerts.jsonl"
    monkeypatch.delenv(CONN_VAR, raising=False)
    monkeypatch.setenv("ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    monkeypatch.delenv("AIRFLOW_VAR_ALDEBARAN_CHANNELS", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_LOG", json.dumps({"conn_type": "log", "extra": {"path": str(log_file)}}))
    monkeypatch.setenv("ALDEBARAN_DELIVERY_STORE", (tmp_path / "ledger").as_uri())
    monkeypatch.setenv("ALDEBARAN_DELIVERY_IDLE_SECONDS", "2")
    extra = secure_listener.connection("SCRAM-SHA-512")["extra"]
    api_objects("connections", {"connection_id": "aldebaran_kafka", "conn_type": "kafka", "extra": json.dumps(extra)})

    run = dagbag.dags["alert_dispatch"].test()

    assert run.state == "success", run.state
    delivered = sorted(json.loads(line)["alert"]["alert_id"] for line in log_file.read_text().splitlines())
    assert delivered == sorted(a["alert_id"] for a in alerts)
    assert Ledger(LocalStore(tmp_path / "ledger"), prefix="deliveries").states("log") == {
        a["alert_id"]: "DELIVERED" for a in alerts}


def test_a_streaming_dispatcher_gets_the_connection_airflow_resolved(
        airflow_db, dagbag, dispatcher_env, kafka_topics, secure_listener, api_objects, monkeypatch):  # noqa: F811
    """dispatch_supervisor starts `aldebaran dispatch --follow` outside Airflow, where only the environment
    counts, and that environment's broker list is a closed port: the dispatcher reaches the alerts through the
    Kafka connection the task handed it (AIRFLOW_CONN_ALDEBARAN_KAFKA), created through the REST API."""
    name, log_file = dispatcher_env
    alerts = [_alert(f"secured-stream-{i}") for i in range(3)]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(a["alert_id"], json.dumps(a)) for a in alerts])
    monkeypatch.delenv(CONN_VAR, raising=False)
    monkeypatch.setenv("ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    extra = secure_listener.connection("PLAIN")["extra"]
    api_objects("connections", {"connection_id": "aldebaran_kafka", "conn_type": "kafka", "extra": json.dumps(extra)})

    run = dagbag.dags["dispatch_supervisor"].test()

    assert run.state == "success", run.state
    assert_eventually(lambda: sorted(json.loads(line)["alert"]["alert_id"] for line in log_file.read_text().splitlines())
                      == sorted(a["alert_id"] for a in alerts) if log_file.exists() else False,
                      timeout=90, message="the streaming dispatcher reads the alerts through the handed connection")


@pytest.mark.parametrize("plan", ["copartitioned", "shuffle"])
def test_the_auditor_runs_through_the_secured_listener(secured, spark, checkpoint, s3_prefix, unique, plan):
    """The whole auditor on the connection alone (its environment's broker list is a closed port): Spark's
    Kafka source (the Java client), and the alert and DLQ producers in the driver and the executors (they get
    the driver's resolution with the settings)."""
    from aldebaran.audit import reference
    from aldebaran.audit import parse
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.audit.sparkjob import job
    from aldebaran_capacity import loadgen

    settings = secured("SCRAM-SHA-512")
    trades = [parse.request("C", 10), parse.purchase("c-1", "C", 20), parse.request("D", 5)]
    recs = list(loadgen.records(iter(trades)))
    kio.produce_all(kio.producer(settings), settings.trades_topic,
                         [(r.key, r.value) for r in recs] + [(b"bad", b"not json")])
    auditor = load(AuditorSettings, checkpoint=checkpoint, trigger="available-now", plan=plan,
                   archive_prefix=f"{s3_prefix}/archive", query_name=f"secured-{unique}")
    job.run(auditor, spark=spark, kafka=settings)

    alerts = [json.loads(m.value()) for m in kio.read_topic(settings, settings.alerts_topic)]
    assert sorted(map(reference.key, alerts)) == sorted(map(reference.key, reference.expected_alerts(
        [r.value for r in recs])))
    assert [(a["kind"], a["order_id"]) for a in alerts] == [("OVERFILL", "C")]
    assert [m.value() for m in kio.read_topic(settings, settings.dlq_topic)] == [b"not json"]


def test_the_low_latency_lane_runs_through_the_secured_listener(secured, tmp_path):
    """spark_apps/realtime_lane.py on the Spark 4.3 runtime (real-time mode), its source and sink on the
    connection it finds in its environment (AIRFLOW_CONN_ALDEBARAN_KAFKA, as lane_supervisor hands it)."""
    import subprocess

    from aldebaran.audit import parse
    from aldebaran.lanes.launch import Lane
    from aldebaran.lanes.launch import stop as stop_lane
    from aldebaran_capacity import loadgen
    from tests.conftest import assert_eventually

    settings = secured("SCRAM-SHA-512")
    trades = [parse.request("L", 10), parse.purchase("l-1", "L", 20)]
    kio.produce_all(kio.producer(settings), settings.trades_topic,
                         [(r.key, r.value) for r in loadgen.records(iter(trades))])
    spec = Lane(checkpoint=str(tmp_path / "lane"), trades_topic=settings.trades_topic,
                alerts_topic=settings.alerts_topic, starting_offsets="earliest", checkpoint_interval="10 seconds")
    log_path = tmp_path / "lane.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(spec.argv(), env=spec.env(), stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        def alerted():
            assert proc.poll() is None, log_path.read_text(errors="replace")[-4000:]
            got = [json.loads(m.value()) for m in kio.read_topic(settings, settings.alerts_topic, idle=1.0)]
            assert [(a["kind"], a["order_id"]) for a in got] == [("OVERFILL", "L")], got
        assert_eventually(alerted, timeout=150, interval=2, message="the lane's alert through the secured listener")
    finally:
        stop_lane(proc)
    assert kafka_tls.secure_password() not in log_path.read_text(errors="replace")


def test_a_replays_spark_submit_gets_the_connection_airflow_resolved(
        airflow_db, dagbag, kafka_topics, secure_listener, api_objects, store, s3_prefix, tmp_path,  # noqa: F811
        monkeypatch):
    """trades_replay under dag.test(): its plan task reads the offsets and its spark-submit driver (outside
    Airflow) the trades through the Kafka connection created through the REST API; the environment's broker
    list is a closed port."""
    from aldebaran.audit import reference
    from aldebaran.audit.archive import Archive
    from aldebaran_capacity import loadgen
    from tests.integration.dags.test_trades_replay import _xcom

    recs = list(loadgen.records(loadgen.original_mix(30, seed=5)))
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in recs])
    stamped = [(m.value(), m.timestamp()[1]) for m in kio.read_topic(kafka_topics, kafka_topics.trades_topic)]
    for key, value in {
        "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "ALDEBARAN_REPLAY_ARCHIVE_PREFIX": f"{s3_prefix}/replays",
        "ALDEBARAN_REPLAY_CHECKPOINT_ROOT": str(tmp_path / "replays"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]",
                                                  "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"}}),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(CONN_VAR, raising=False)  # the task's pre_execute sets it in this process: undone after
    extra = secure_listener.connection("SCRAM-SHA-512")["extra"]
    api_objects("connections", {"connection_id": "aldebaran_kafka", "conn_type": "kafka", "extra": json.dumps(extra)})

    run = dagbag.dags["trades_replay"].test(run_conf={
        "start": "earliest", "end": "latest", "topic": None, "rules": None, "checkpoint_root": None})

    assert run.state == "success", run.state
    plan = _xcom(run, "plan")
    assert plan["messages"] == len(recs)
    assert CONN_VAR not in json.dumps(plan)  # the connection went through the environment, not an XCom
    replayed = [json.loads(line) for line in Archive(store, f"{s3_prefix}/replays", plan["query_name"]).read_all()]
    assert replayed, "the mix produces overfills"
    assert sorted(map(reference.key, replayed)) == sorted(map(reference.key, reference.expected_alerts(stamped)))
