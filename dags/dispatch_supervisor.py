"""
### dispatch_supervisor — keep the streaming dispatchers running

**Every minute** (one run at a time). The streaming dispatchers (`aldebaran dispatch --follow`) are
the normal delivery path: one per configured channel (the Variable `aldebaran_channels`, else
`ALDEBARAN_CHANNELS`), named after it, unless
`ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS` runs several channels in one. Each writes a heartbeat every
`ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS` at `heartbeats/dispatcher/<name>.json`. A dispatcher runs outside
Airflow: it is started with its channels' connections as Airflow resolves them (`aldebaran_<name>`).

One task, `supervise`: every dispatcher side by side in one task process (a task per dispatcher cost a
process each, every minute); its XCom maps each dispatcher to its decision. Unhealthy means no heartbeat, status `failed`/`stopped`, a heartbeat older than
`ALDEBARAN_DISPATCH_SUPERVISOR_STALE_AFTER_SECONDS` (30), or its process on this host is gone. Then
what is left of it is stopped (SIGTERM, SIGKILL to its process group after the stop timeout) and
`aldebaran dispatch --follow --channel … --name <name>` is launched detached, with exponential
backoff between the restarts of one incident; the task returns once the new heartbeat says
`running`, with the decision and its reason.

`alert_dispatch` stays for catch-up, backfill and manual runs: it shares each channel's consumer
group, and the delivery ledger's partition epochs fence whichever of the two loses a partition.
State: `supervisor/dispatcher/<name>.json`. Logic: `aldebaran.platform.dispatch_supervisor`.
**Pause this DAG to keep a stopped dispatcher stopped.**
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
    tags=["aldebaran", "platform", "delivery"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "owner": "aldebaran"},
)
def dispatch_supervisor():
    @task
    def supervise() -> dict:
        from aldebaran.platform.dispatch_supervisor import supervise_all

        return supervise_all()

    supervise()


dispatch_supervisor()
