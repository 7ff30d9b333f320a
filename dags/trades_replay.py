"""
### trades_replay — re-run the audit over a range of the trades topic (replay / backfill)

**Triggered from the UI** (or `airflow dags trigger trades_replay --conf '{...}'`); a backfill of a
date range is a run with `start`/`end` set to times (the DAG has no schedule, so Airflow's own
`dags backfill` does not apply). `plan` resolves the
range once into exact per-partition offsets; `replay_audit` runs the auditor as a **bounded job**
(`Trigger.AvailableNow`) with the Spark provider's SparkSubmitOperator (`spark_default`), on a
**fresh checkpoint of its own** (never the live auditor's); `report` logs what was new.

The replay publishes its alerts to the alerts topic with the same deterministic ids as the live
auditor, so the delivery records suppress everything already delivered: only alerts that are new
(no delivery record on any channel) reach anyone, on the next `alert_dispatch` run.

Range Params: `earliest` / `latest`; JSON offsets per partition (`{"0": 120, "1": 95}`, end
exclusive); or a time (ISO-8601 or epoch ms, via Kafka's offsets-for-times). Logic:
`aldebaran.platform.replay`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, task

from aldebaran.platform.oncall_notifier import oncall_callbacks
from aldebaran.platform.replay import export_kafka_connection
from aldebaran.platform.spark_submit import AUDITOR_APP
from aldebaran.runtime.spark import SUBMIT_CONF


@dag(
    **oncall_callbacks(),  # pages the on-call target when a run fails, resolves when it succeeds
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    doc_md=__doc__,
    tags=["aldebaran", "platform", "replay"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30), "owner": "aldebaran"},
    params={
        "topic": Param(None, type=["null", "string"], pattern=r"^[A-Za-z0-9._-]*$",
                       description="Trades topic to replay. Empty: ALDEBARAN_KAFKA_TRADES_TOPIC ('trades')."),
        "start": Param("earliest", type="string",
                       description="First message: 'earliest', JSON offsets per partition {\"0\": 120, \"1\": 95}, "
                                   "or a time (ISO-8601 like 2026-11-22T09:00:00Z, or epoch ms)."),
        "end": Param("latest", type="string",
                     description="End of the range, exclusive: 'latest' (the topic's end when the replay starts), "
                                 "JSON offsets per partition, or a time (ISO-8601 or epoch ms)."),
        "rules": Param(None, type=["null", "string"],
                       description="Audit rules, comma-separated (overfill, mismatch). Empty: ALDEBARAN_AUDIT_RULES."),
        "expire_at_end": Param(False, type="boolean",
                               description="Also report the books still open at the range's end as if their time had "
                                           "run out (ORPHANs). Off (default): the replay equals the live alerts."),
        "checkpoint_root": Param(None, type=["null", "string"],
                                 description="Where the replay's fresh checkpoint is created. Empty: "
                                             "ALDEBARAN_REPLAY_CHECKPOINT_ROOT, else next to the auditor's checkpoint."),
    },
)
def trades_replay():
    @task
    def plan(params=None, run_id=None) -> dict:
        from aldebaran.platform.replay import plan_from_params

        return plan_from_params(run_id, params)

    @task
    def report(replay: dict) -> dict:
        from aldebaran.platform.replay import report as summarize

        return summarize(replay)

    replay = plan()
    audit = SparkSubmitOperator(
        task_id="replay_audit",
        application=AUDITOR_APP,
        application_args=replay["auditor_args"],
        env_vars=replay["env_vars"],
        jars=replay["jars"],
        conn_id="spark_default",
        conf=SUBMIT_CONF,
        name="aldebaran-replay",
        # The driver runs outside Airflow: it gets the platform's Kafka connection as Airflow resolved it.
        pre_execute=export_kafka_connection,
    )
    audit >> report(replay)


trades_replay()
