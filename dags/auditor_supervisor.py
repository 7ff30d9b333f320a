"""
### auditor_supervisor — keep the streaming auditor alive

**Every minute** (one run at a time): is the auditor healthy? Unhealthy means its driver process is
gone, its query terminated, nobody holds its checkpoint lease, or its heartbeat shows no progress for
longer than `stale_after_seconds`. Then it is restarted on the **same checkpoint**, so it resumes
where it stopped: with exponential backoff between the restarts of one incident, and a page through
the alert channels (one operational alert per incident) after `page_after_restarts` restarts.

Tasks: `assess` (lease + heartbeat + local driver processes → none / wait / restart; its XCom `decision`
says which and why; a branch, so the tasks below run only when the decision needs them: a healthy
auditor without a standby runs `assess` alone) → `page` (only when due) and `prepare_restart` (short-circuit: stops what is left of the old auditor, breaks the
lease of a dead holder, revokes a remote one) → `submit_auditor` (the Spark provider's
SparkSubmitOperator, master and deploy mode from the `spark_default` connection; the driver is
started detached and the task returns once the new auditor holds the lease and its query started).

**Warm standby** (`ALDEBARAN_SUPERVISOR_STANDBY=true` or the `standby` Param; off by default): then
`prepare_standby` (short-circuit: a standby is due when the slot is empty, its process gone or stuck,
and a live auditor holds the lease) → `submit_standby` (spark-submit `--standby true`, returns once it
waits on the lease). `assess` promotes the standby once it holds the lease (the holder's session is
the standby's spark-submit), so a takeover is not taken for a dead auditor; with a usable standby a
`restart` becomes a `failover`: `prepare_restart` stops the old auditor, the standby takes over and
nothing is submitted (a standby that fails to take over is stopped and the restart goes cold).

Never two auditors on one checkpoint: the auditor itself takes a lease object in the object store
(conditional create, renewed with If-Match every ttl/3) and refuses to start, or stops, without it.
State: `supervisor/auditor/<query>.json`; the heartbeat: `heartbeats/auditor/<query>.json`
(`aldebaran auditor status`). Logic: `aldebaran.platform.supervisor`. Pause this DAG to keep a stopped
auditor stopped.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import CronTriggerTimetable, Param, dag, task

from aldebaran.platform.oncall_notifier import oncall_callbacks
from aldebaran.platform.spark_submit import AuditorSubmitOperator, StandbySubmitOperator


@dag(
    **oncall_callbacks(),  # pages the on-call target when a run fails, resolves when it succeeds
    schedule=CronTriggerTimetable("* * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["aldebaran", "platform", "auditor"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "owner": "aldebaran"},
    params={
        "query_name": Param(None, type=["null", "string"], pattern=r"^[A-Za-z0-9_-]*$",
                            description="Streaming query name of the auditor (its heartbeat and state are keyed by "
                                        "it). Empty: ALDEBARAN_AUDIT_QUERY_NAME, default 'auditor'."),
        "checkpoint": Param(None, type=["null", "string"],
                            description="The auditor's checkpoint (s3a://bucket/prefix or a local path); a restart "
                                        "resumes from it. Empty: ALDEBARAN_AUDIT_CHECKPOINT."),
        "stale_after_seconds": Param(None, type=["null", "number"], minimum=1,
                                     description="No heartbeat for longer than this = unhealthy. Empty: "
                                                 "ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS (120)."),
        "start_timeout_seconds": Param(None, type=["null", "number"], minimum=1,
                                       description="A (re)started auditor must hold its lease and report 'started' "
                                                   "within this. Empty: ALDEBARAN_SUPERVISOR_START_TIMEOUT_SECONDS (180)."),
        "page_after_restarts": Param(None, type=["null", "integer"], minimum=1,
                                     description="Page the alert channels once an incident needed this many restarts. "
                                                 "Empty: ALDEBARAN_SUPERVISOR_PAGE_AFTER_RESTARTS (3)."),
        "standby": Param(None, type=["null", "boolean"],
                         description="Keep a warm standby auditor and fail over to it instead of a cold restart. "
                                     "Empty: ALDEBARAN_SUPERVISOR_STANDBY (false)."),
    },
)
def auditor_supervisor():
    # A branch: the decision goes to XCom under "decision", and only the tasks it needs run (a healthy
    # auditor: none). Skipped tasks start no process.
    @task.branch
    def assess(params=None, ti=None) -> list[str]:
        from aldebaran.platform.supervisor import assess_from_params, route

        decision = assess_from_params(params)
        ti.xcom_push(key="decision", value=decision)
        return route(decision)

    @task
    def page(decision: dict) -> dict:
        from aldebaran.platform.supervisor import page_if_needed

        return page_if_needed(decision)

    # Skips only submit_auditor: the standby tasks run after a restart and after no restart alike.
    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def prepare_restart(decision: dict) -> bool:
        from aldebaran.platform.supervisor import prepare_restart as prepare

        return prepare(decision)

    @task.short_circuit(trigger_rule="none_failed")
    def prepare_standby(decision: dict) -> bool:
        from aldebaran.platform.standby_slot import standby_due

        return standby_due(decision)

    decision = assess()["decision"]
    page(decision)
    submit = AuditorSubmitOperator(
        task_id="submit_auditor",
        decision=decision,
        conn_id="spark_default",
        retry_exponential_backoff=True,
    )
    standby = StandbySubmitOperator(
        task_id="submit_standby",
        decision=decision,
        conn_id="spark_default",
        retry_exponential_backoff=True,
    )
    prepare_restart(decision) >> submit >> prepare_standby(decision) >> standby


auditor_supervisor()
