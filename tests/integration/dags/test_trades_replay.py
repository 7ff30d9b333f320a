"""trades_replay run for real with dag.test(): a live auditor run over a range of the trades topic,
its alerts dispatched (log channel, S3 ledger); then the replay DAG over the same range — with more
trades already past its end — yields exactly the live run's alerts, reports none of them as new, and
the next dispatch delivers nothing."""

from __future__ import annotations

import json

from aldebaran.audit import reference
from aldebaran.audit.archive import Archive
from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob import job
from aldebaran.delivery.channels import LogChannel
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.kafka import io as kio
from aldebaran.settings import load
from aldebaran_capacity import loadgen


def _xcom(run, task_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id,
                                                 key="return_value")).first()
        return XComModel.deserialize_value(row)


def test_replay_yields_the_live_alerts_and_no_new_deliveries(airflow_db, dagbag, spark, kafka_topics, store,
                                                             s3_prefix, tmp_path, monkeypatch, unique):
    log_file = tmp_path / "alerts.jsonl"
    for key, value in {
        "ALDEBARAN_CHANNELS": "log",
        "AIRFLOW_CONN_ALDEBARAN_LOG": json.dumps({"conn_type": "log", "extra": {"path": str(log_file)}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        "ALDEBARAN_REPLAY_ARCHIVE_PREFIX": f"{s3_prefix}/replays",
        "ALDEBARAN_REPLAY_CHECKPOINT_ROOT": str(tmp_path / "replays"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]",
                                                  "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"}}),
    }.items():
        monkeypatch.setenv(key, value)
    producer = kio.producer(kafka_topics)
    in_range = list(loadgen.records(loadgen.original_mix(50, seed=11)))
    kio.produce_all(producer, kafka_topics.trades_topic, [(r.key, r.value) for r in in_range])
    range_end = kio.end_offsets(kafka_topics, kafka_topics.trades_topic)

    # The live run over the range, and its alerts delivered.
    live_query = f"live-{unique}"
    job.run(load(AuditorSettings, checkpoint=str(tmp_path / "live"), trigger="available-now", query_name=live_query,
                 archive_prefix=f"{s3_prefix}/archive"), spark=spark)
    live = [json.loads(line) for line in Archive(store, f"{s3_prefix}/archive", live_query).read_all()]
    trades = [(m.value(), m.timestamp()[1]) for m in kio.read_topic(kafka_topics, kafka_topics.trades_topic)]
    assert sorted(reference.key(a) for a in live) == sorted(reference.key(a) for a in reference.expected_alerts(trades))
    assert live, "the mix produces overfills"
    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")
    dispatcher = Dispatcher(ledger, [LogChannel("log", log_file)], kafka=kafka_topics, group=f"g-{unique}")
    assert dispatcher.run_once(idle_timeout=2.0).sent == {"log": len(live)}

    # Trades past the range's end: the replay must not see them.
    later = list(loadgen.records(loadgen.original_mix(20, seed=12)))
    kio.produce_all(producer, kafka_topics.trades_topic, [(r.key, r.value) for r in later])

    run = dagbag.dags["trades_replay"].test(run_conf={
        "start": "earliest", "end": json.dumps({str(p): o for p, o in range_end.items()}),
        "topic": None, "rules": None, "checkpoint_root": None})
    assert run.state == "success"
    plan, summary = _xcom(run, "plan"), _xcom(run, "report")
    assert plan["messages"] == len(in_range) and plan["checkpoint"].startswith(str(tmp_path / "replays"))
    replayed = [json.loads(line) for line in Archive(store, f"{s3_prefix}/replays", plan["query_name"]).read_all()]
    assert sorted(reference.key(a) for a in replayed) == sorted(reference.key(a) for a in live)
    assert summary["alerts"] == len(live) and summary["new_count"] == 0 and summary["new"] == []
    assert summary["already_recorded"] == len(live)

    # The replayed alerts reached the alerts topic again; their delivery records suppress them all.
    again = Dispatcher(ledger, [LogChannel("log", log_file)], kafka=kafka_topics, group=f"g-{unique}").run_once(
        idle_timeout=2.0)
    assert again.sent == {} and again.already == {"log": len(live)}
    assert len(log_file.read_text().splitlines()) == len(live)
