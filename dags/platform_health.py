"""
### platform_health — is the platform working? Fails loudly, naming what is wrong

**Every 5 minutes.** Checks, each independently: Kafka reachable and the platform's topics present;
the auditor's lag behind the trades topic (from its heartbeat's processed offsets); each channel's
dispatcher lag on the alerts topic (consumer group `aldebaran-dispatcher-<channel>`); MinIO/S3
reachable; the auditor's last progress (heartbeat age, query not terminated); DEAD and IN_DOUBT
delivery records per channel; each streaming dispatcher's heartbeat (running, fresh, no partition
`broken`).

`check` writes a health record to the object store (`health/platform/runs/<day>/<run>.json` and
`health/platform/latest.json`, prefix `ALDEBARAN_HEALTH_PREFIX`) and returns it; `verdict` fails the
run, without retrying, with one line per problem. Thresholds: `ALDEBARAN_HEALTH_*` settings, or the
Params of a manual run. Logic: `aldebaran.platform.health`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import CronTriggerTimetable, Param, dag, task

from aldebaran.platform.oncall_notifier import oncall_callbacks


@dag(
    **oncall_callbacks(),  # pages the on-call target when a run fails, resolves when it succeeds
    schedule=CronTriggerTimetable("*/5 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["aldebaran", "platform", "health"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "owner": "aldebaran"},
    params={
        "query_name": Param(None, type=["null", "string"], pattern=r"^[A-Za-z0-9_-]*$",
                            description="Auditor query whose heartbeat is checked. Empty: ALDEBARAN_AUDIT_QUERY_NAME."),
        "max_progress_age_seconds": Param(None, type=["null", "number"], minimum=1,
                                          description="Oldest acceptable auditor heartbeat. Empty: "
                                                      "ALDEBARAN_HEALTH_MAX_PROGRESS_AGE_SECONDS (180)."),
        "max_auditor_lag": Param(None, type=["null", "integer"], minimum=0,
                                 description="Trades the auditor may be behind. Empty: ALDEBARAN_HEALTH_MAX_AUDITOR_LAG."),
        "max_dispatch_backlog": Param(None, type=["null", "integer"], minimum=0,
                                      description="Alerts a channel may have waiting. Empty: "
                                                  "ALDEBARAN_HEALTH_MAX_DISPATCH_BACKLOG."),
        "max_dead": Param(None, type=["null", "integer"], minimum=0,
                          description="DEAD deliveries tolerated per channel. Empty: ALDEBARAN_HEALTH_MAX_DEAD (0)."),
        "max_in_doubt": Param(None, type=["null", "integer"], minimum=0,
                              description="IN_DOUBT deliveries tolerated per channel. Empty: "
                                          "ALDEBARAN_HEALTH_MAX_IN_DOUBT (0)."),
    },
)
def platform_health():
    @task
    def check(params=None, run_id=None) -> dict:
        from aldebaran.platform.health import check_from_params

        return check_from_params(run_id, params)

    @task
    def verdict(record: dict) -> None:
        from aldebaran.platform.task_outcomes import health_verdict

        health_verdict(record)

    verdict(check())


platform_health()
