"""
### lane_supervisor — keep the low-latency lane running

**Every minute** (one run at a time), for platforms that run the low-latency lane (Spark 4.3 real-time
mode, alerts in milliseconds on `ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC`; set `ALDEBARAN_LANES_ENABLED=true` so
that `platform_health` checks it too). The lane runs as one process, the lane keeper
(`aldebaran lanes run`): it submits the real-time query, reconciles its alerts against the exact lane's
and writes a heartbeat at `heartbeats/lane/<name>.json`.

Task `supervise`: unhealthy means no heartbeat, status `failed`/`stopped` (the keeper names why: the lane
exited, its query stopped, or its driver went silent, with the lane's log tail), a heartbeat older than
`ALDEBARAN_LANES_STALE_AFTER_SECONDS`, or its process on this host is gone. Then what is left is stopped
(SIGTERM, SIGKILL to its process group after `ALDEBARAN_LANES_STOP_TIMEOUT_SECONDS`) and the keeper is
launched detached, with exponential backoff between the restarts of one incident; the task returns once
the new heartbeat says `running` (the lane's query is active), with the decision and its reason in XCom.

The lane costs about two cores' worth of long-running tasks (`local[4]`: one per trades partition plus
one per stateful operator); docs/operations.md says how to size it. State:
`supervisor/lane/<name>.json`. Logic: `aldebaran.platform.lane_supervisor`.
**Pause this DAG to keep a stopped lane stopped** (`aldebaran lanes stop`).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import CronTriggerTimetable, dag, task

from aldebaran.platform.oncall_notifier import oncall_callbacks


@dag(
    **oncall_callbacks(),  # pages the on-call target when a run fails, resolves when it succeeds
    schedule=CronTriggerTimetable("* * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=True,
    doc_md=__doc__,
    tags=["aldebaran", "platform", "lanes"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "owner": "aldebaran"},
)
def lane_supervisor():
    @task
    def supervise() -> dict:
        from aldebaran.platform.lane_supervisor import supervise as supervise_lane

        return supervise_lane()

    supervise()


lane_supervisor()
