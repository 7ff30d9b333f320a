"""
### alert_dispatch — catch-up delivery: every waiting alert to every configured channel, exactly once

**The normal path is streaming**: one `aldebaran dispatch --follow` per channel, kept running by the
`dispatch_supervisor` DAG. This DAG stays for catch-up, backfill (e.g. after `trades_replay`) and
manual runs, and as a safety net while a streaming dispatcher is down.

**Triggered by new alerts** (Airflow 3 event-driven scheduling: an Asset whose AssetWatcher runs the
Kafka provider's `AwaitMessageTrigger` on the alerts topic, in its own consumer group) **or every
5 minutes** (`ALDEBARAN_DISPATCH_SWEEP_CRON`; sweeps expired leases and due retries even when no alert
arrives).

The watcher is only a wake-up signal: one run drains what is waiting, in batches, through the
channel's own consumer group (`aldebaran-dispatcher-<channel>`), so a burst of 100k alerts means a
few runs, not 100k. That group is **shared with the channel's streaming dispatcher**: while both run
they split the partitions, and the delivery ledger's partition epochs fence whichever of them loses
one, so an alert is still delivered once. One mapped task per channel (the Variable
`aldebaran_channels`, else `ALDEBARAN_CHANNELS`; channel `<name>` is the connection `aldebaran_<name>`,
wherever Airflow keeps it: UI, API, environment, secrets backend), so a failing SMS provider never
holds back the webhook.

Exactly once per channel comes from the group-commit delivery ledger in S3/MinIO (under
`ALDEBARAN_DELIVERY_PREFIX`: runs of alerts claimed per channel and partition with a conditional
create, per-alert records for retries and doubts); see `aldebaran deliveries stats` or the Aldebaran
page in the Airflow UI. The same logic runs outside Airflow as `aldebaran dispatch`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum

# The watcher's trigger is the provider's own class and must exist at parse time; it imports
# confluent-kafka (the one heavy import this DAG allows, see tests/dags/test_dag_integrity.py).
from airflow.providers.apache.kafka.triggers.await_message import AwaitMessageTrigger
from airflow.sdk import Asset, AssetOrTimeSchedule, AssetWatcher, CronTriggerTimetable, dag, task

from aldebaran.delivery.settings import WatcherSettings
from aldebaran.settings import KafkaSettings, load

ALERTS_TOPIC = load(KafkaSettings).alerts_topic
SWEEP_CRON = load(WatcherSettings).sweep_cron

new_alerts = Asset(
    name="aldebaran_alerts",
    watchers=[
        AssetWatcher(
            name="aldebaran_alerts_watcher",
            trigger=AwaitMessageTrigger(
                topics=[ALERTS_TOPIC],
                apply_function="aldebaran.delivery.wakeup.wake_up",
                kafka_config_id="kafka_alerts_watcher",
                poll_interval=1,
            ),
        )
    ],
)


@dag(
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable(SWEEP_CRON, timezone="UTC"), assets=new_alerts),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["aldebaran", "delivery"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "owner": "aldebaran"},
)
def alert_dispatch():
    @task
    def channels() -> list[str]:
        from aldebaran.delivery.airflow_tasks import channel_names

        return channel_names()

    @task(max_active_tis_per_dagrun=4)
    def dispatch(channel: str) -> dict:
        from aldebaran.delivery.airflow_tasks import dispatch_channel

        return dispatch_channel(channel)

    dispatch.expand(channel=channels())


alert_dispatch()
