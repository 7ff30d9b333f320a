"""The local platform as the demo drives it: its DAGs, the processes its supervisors start, its state.

The demo runs the platform on its local defaults (topics ``trades``/``alerts``/``trades.dlq``, the
auditor's default checkpoint, the ledger under ``deliveries/``), exactly what Airflow's DAGs use, so that
the Airflow UI and the Deliveries page show the demo's runs and records as they are. A fresh demo
therefore resets those: it is for the local services of ``aldebaran services up`` only, and refuses a
Kafka or S3 endpoint that is not on this host.

:func:`stop` is also what ``aldebaran services down`` runs first: the auditor and the streaming
dispatchers run outside Airflow (detached by the supervisors), so stopping Airflow alone leaves them.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from aldebaran.exceptions import AldebaranError
from aldebaran.kafka import admin as kadmin
from aldebaran.settings import KafkaSettings, ObjectStoreSettings, load

log = logging.getLogger(__name__)

# The DAGs the demo runs, in the order it runs them.
SUPERVISOR, DISPATCH, DISPATCH_SUPERVISOR, HEALTH = (
    "auditor_supervisor", "alert_dispatch", "dispatch_supervisor", "platform_health")
DAGS = (SUPERVISOR, DISPATCH, DISPATCH_SUPERVISOR, HEALTH)
LANE_SUPERVISOR = "lane_supervisor"  # part of the demo only with ALDEBARAN_LANES_ENABLED; paused at `services down`
LANE_HEARTBEAT_MAX_AGE_S = 30.0
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


class DemoError(AldebaranError):
    """The demo cannot run here (not the local services, a DAG run failed, a timeout)."""


@dataclass(frozen=True)
class Platform:
    """Where the platform's defaults point, as the DAGs' tasks and the auditor resolve them."""

    kafka: KafkaSettings
    bucket: str
    checkpoint: str
    query: str
    archive_prefix: str
    ledger_prefix: str
    channels: list[str]
    group_prefix: str

    @classmethod
    def load(cls) -> "Platform":
        from aldebaran.audit.settings import AuditorSettings
        from aldebaran.delivery.airflow_tasks import channel_names
        from aldebaran.delivery.settings import DeliverySettings

        audit, delivery = load(AuditorSettings), load(DeliverySettings)
        return cls(kafka=load(KafkaSettings), bucket=load(ObjectStoreSettings).bucket, checkpoint=audit.checkpoint,
                   query=audit.query_name, archive_prefix=audit.archive_prefix, ledger_prefix=delivery.prefix,
                   channels=channel_names(), group_prefix=delivery.group)

    def require_local(self) -> None:
        """Refuse to reset anything but this host's services."""
        s3 = load(ObjectStoreSettings)
        hosts = {"ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS": [b.rsplit(":", 1)[0] for b in
                                                       self.kafka.bootstrap_servers.split(",")],
                 "ALDEBARAN_S3_ENDPOINT_URL": [urlsplit(s3.endpoint_url or "https://s3.amazonaws.com").hostname]}
        for setting, names in hosts.items():
            if not all(name in LOCAL_HOSTS for name in names):
                raise DemoError(f"the demo resets the platform's topics and state, so it runs only on this host's "
                                f"services: {setting} points at {', '.join(map(str, names))}")

    def state_prefixes(self) -> list[str]:
        """Every object-store prefix the platform's defaults write under (checkpoint, archive, ledger,
        heartbeats, supervisors' state, health records, the checkpoint's lease)."""
        from aldebaran.runtime import lease
        from aldebaran.runtime.heartbeat import AUDITOR, DISPATCHER, key, prefix
        from aldebaran.platform.settings import DispatchSupervisorSettings, HealthSettings, SupervisorSettings

        prefixes = [self.archive_prefix, self.ledger_prefix, prefix(DISPATCHER), key(AUDITOR, self.query),
                    load(SupervisorSettings).state_prefix, load(DispatchSupervisorSettings).state_prefix,
                    load(HealthSettings).prefix, lease.lease_key(self.checkpoint)]
        checkpoint = urlsplit(self.checkpoint)
        if checkpoint.scheme == "s3a":
            if checkpoint.netloc != self.bucket:
                raise DemoError(f"ALDEBARAN_AUDIT_CHECKPOINT {self.checkpoint} is not in the bucket {self.bucket}")
            prefixes.append(checkpoint.path.strip("/") + "/")
        return [p.strip("/") + ("/" if not p.endswith(".json") else "") for p in prefixes]


def api_from_env():
    """The local Airflow's REST API as the generated admin user (.env)."""
    from aldebaran_lab.airflow_api import AirflowApi
    from aldebaran_lab.services.airflow import Airflow

    airflow = Airflow()
    return AirflowApi(f"http://{airflow.address}", airflow.admin_password())


def stop(platform: Platform | None = None, reason: str = "demo reset") -> list[str]:
    """Stop the auditor (its supervised standby first), the streaming dispatchers and the low-latency lane
    this host runs for the platform's defaults.
    Returns what was stopped. The supervisors must be paused first, or they start them again."""
    from aldebaran.platform import dispatch_supervisor, standby_slot, supervisor
    from aldebaran.storage.store import open_store

    platform = platform or Platform.load()
    stopped = []
    store = open_store()
    sup = supervisor.settings_with(None)
    # The supervised standby first: stopping the active alone would hand it the lease.
    if standby_slot.stop(store, platform.query, sup, reason):
        stopped.append(f"standby auditor {platform.query}")
    if supervisor.stop_local(store, platform.query, platform.checkpoint, sup.stop_timeout_seconds, reason):
        stopped.append(f"auditor {platform.query}")
    cfg = dispatch_supervisor.settings()
    dstore = dispatch_supervisor.delivery_store()
    for name in dispatch_supervisor.plan(cfg):
        if dispatch_supervisor.stop(dstore, name, cfg, reason):
            stopped.append(f"dispatcher {name}")
    from aldebaran.platform import lane_supervisor

    if lane_supervisor.stop(reason):  # the low-latency lane's keeper, if this host runs one
        stopped.append(f"lane {lane_supervisor.settings().name}")
    return stopped


def lane_running(fast: dict, max_age: float = LANE_HEARTBEAT_MAX_AGE_S) -> bool:
    """Whether the fast lane's state (aldebaran.lanes.status.collect()["fast"]) says it runs now: the keeper beats
    ``running`` once its driver reports an active query."""
    age = fast.get("age_seconds")
    return bool(fast.get("heartbeat")) and fast.get("status") == "running" and \
        (age if age is not None else max_age + 1) <= max_age


def wait_lane_running(timeout: float, say=log.info) -> float:
    """Wait until the lane keeper's heartbeat says ``running`` (after ``lane_supervisor`` was triggered);
    the seconds waited. DemoError after `timeout`, with the keeper's status and error."""
    from aldebaran.lanes import status

    t0, said = time.monotonic(), 0.0
    while True:
        fast = status.collect()["fast"]
        waited = time.monotonic() - t0
        if lane_running(fast):
            say("the lane is running after %.0f s", waited)
            return waited
        if waited > timeout:
            raise DemoError(f"the lane is not running {timeout:.0f} s after {LANE_SUPERVISOR} was triggered (status "
                            f"{fast.get('status')!r}, error {str(fast.get('error'))[:300]!r}; `aldebaran lanes "
                            "status` and the DAG's task log say why)")
        if waited - said >= 15:
            said = waited
            say("waiting for the lane: %.0f s, heartbeat %s, status %s", waited, fast.get("heartbeat"),
                fast.get("status"))
        time.sleep(2.0)


def shut_down() -> None:
    """Before the services stop (``aldebaran services down``): pause the platform's DAGs, so that nothing
    is started again, and stop the auditor and dispatchers this host runs. Each part is skipped when
    the service it needs is not running (a partial ``services up``)."""
    from aldebaran_lab import services

    healthy = {s.name for s in services.status(services.CORE) if s.healthy}
    if "airflow" in healthy:
        api = api_from_env()
        for dag_id in (*DAGS, LANE_SUPERVISOR):
            if api.dag(dag_id) is not None:
                api.set_paused(dag_id, True)
    if "minio" in healthy:
        stopped = stop(reason="services down")
        if stopped:
            log.info("stopped %s", ", ".join(stopped))


def reset(platform: Platform) -> dict:
    """Fresh topics, consumer groups and object-store state for the platform's defaults. The DAGs must be
    paused and the processes stopped (:func:`stop`) first."""
    from aldebaran.storage.store import open_store

    platform.require_local()
    kafka = platform.kafka
    # The low-latency lane's topic too: its old alerts would be judged unconfirmed against a fresh exact lane.
    topics = [*kafka.topics(), kafka.fast_alerts_topic]
    kadmin.delete_topics(kafka, topics)
    groups = [f"{platform.group_prefix}-{c}" for c in platform.channels]
    _delete_groups(kafka, groups)
    _wait_gone(kafka, topics)
    kadmin.ensure_topics(kafka, topics)
    store = open_store()
    removed = sum(store.delete_prefix(p) for p in platform.state_prefixes())
    removed += _reset_lane()
    if urlsplit(platform.checkpoint).scheme in ("", "file"):
        shutil.rmtree(urlsplit(platform.checkpoint).path, ignore_errors=True)
    return {"topics": topics, "groups": groups, "objects_removed": removed}


def _reset_lane() -> int:
    """The low-latency lane's state: its checkpoint generations (abandoned ones too: they name the old
    topic's offsets), its keeper's heartbeat (which names the generation to resume and where the reconciler
    resumes), its supervisor's state and the reconciler's records. Returns the objects removed."""
    from aldebaran.runtime.heartbeat import LANE, key
    from aldebaran.lanes import keeper
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.storage.store import open_prefix

    lanes = load(LaneSettings)
    store = keeper.lane_store()
    removed = sum(store.delete_prefix(p) for p in (
        key(LANE, lanes.name), lanes.state_prefix.strip("/") + "/",
        f"{lanes.records_prefix.strip('/')}/{lanes.name}/"))
    root = keeper.checkpoint_root(lanes)
    if urlsplit(root).scheme in ("", "file"):
        shutil.rmtree(urlsplit(root).path, ignore_errors=True)
    else:
        cstore, prefix = open_prefix(root)
        if not prefix:
            raise DemoError(f"ALDEBARAN_LANES_CHECKPOINT {root} is a whole bucket: the demo will not empty it")
        removed += cstore.delete_prefix(prefix)
    return removed


def _wait_gone(kafka: KafkaSettings, topics: list[str], timeout: float = 30.0) -> None:
    """A deleted topic stays in the metadata for a moment; creating it then would be a no-op."""
    client = kadmin.admin(kafka)
    deadline = time.monotonic() + timeout
    while set(topics) & set(client.list_topics(timeout=10).topics):
        if time.monotonic() > deadline:
            raise DemoError(f"topics {', '.join(topics)} still listed {timeout:.0f}s after their deletion")
        time.sleep(0.5)


def _delete_groups(kafka: KafkaSettings, groups: list[str], timeout: float = 45.0) -> None:
    """Delete the dispatchers' consumer groups. A streaming dispatcher is a static member of its group
    (ALDEBARAN_DELIVERY_STATIC_MEMBERSHIP): stopped, it stays a member until its session times out
    (ALDEBARAN_DELIVERY_SESSION_TIMEOUT_MS), so a group still "not empty" is asked again until then."""
    from confluent_kafka import KafkaError, KafkaException

    client = kadmin.admin(kafka)
    existing = {g.group_id for g in client.list_consumer_groups(request_timeout=10).result().valid}
    doomed = [g for g in groups if g in existing]
    deadline = time.monotonic() + timeout
    while doomed:
        busy = []
        for group, fut in client.delete_consumer_groups(doomed, request_timeout=10).items():
            try:
                fut.result()
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.NON_EMPTY_GROUP and time.monotonic() < deadline:
                    busy.append(group)
                    continue
                raise DemoError(f"could not delete consumer group {group} (is a dispatcher still running?): "
                                f"{exc}") from exc
        doomed = busy
        if doomed:
            time.sleep(1.0)
