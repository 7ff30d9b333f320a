"""Platform health: what the `platform_health` DAG checks, records and fails on.

Checks (each independent: one failing probe never hides the others):

- **kafka** — the broker answers (metadata within ``ALDEBARAN_HEALTH_TIMEOUT_SECONDS``) and the
  platform's topics exist;
- **auditor_lag** — trades on the topic the auditor has not read yet: log end offsets minus the end
  offsets of its last micro-batch (Spark's Kafka source keeps its offsets in the checkpoint, not in a
  consumer group, so they come from the auditor's heartbeat);
- **dispatch_lag** — per channel, alerts its dispatcher's consumer group
  (``aldebaran-dispatcher-<channel>``) has not settled;
- **object_store** — MinIO/S3 answers for the bucket;
- **auditor_progress** — the heartbeat exists, its query is not terminated, and its last progress is
  younger than ``ALDEBARAN_HEALTH_MAX_PROGRESS_AGE_SECONDS``;
- **deliveries** — per channel, DEAD and IN_DOUBT delivery records (operators must settle them:
  ``aldebaran deliveries list --state IN_DOUBT``) and those waiting to be retried;
- **dispatchers** — each streaming dispatcher the dispatch supervisor runs
  (aldebaran.platform.dispatch_supervisor.plan) has a heartbeat, ``running`` and younger than
  ``ALDEBARAN_HEALTH_MAX_DISPATCHER_HEARTBEAT_AGE_SECONDS``, and no partition ``broken`` in it (fenced,
  or an unreadable ledger object: that partition is not delivered). ``ALDEBARAN_HEALTH_CHECK_DISPATCHERS``
  turns it off where only the alert_dispatch DAG delivers. Each one's ``rejected`` count (messages it
  dead-lettered to ``alerts.dlq``) is shown, not failed on; so is the lane reconciler's.
- **quarantine** — corrupt delivery-ledger objects set aside (a bounded count of
  ``<ALDEBARAN_DELIVERY_PREFIX>-quarantine/``) and the alerts dead-lettered to ``alerts.dlq`` (the
  ``rejected`` above, summed): a warning, never a failure.
- **lane** (with ``ALDEBARAN_LANES_ENABLED``) — the low-latency lane's keeper has a heartbeat, ``running``
  and younger than ``ALDEBARAN_LANES_STALE_AFTER_SECONDS``, and no fast-lane alert is unconfirmed: one the
  exact lane did not raise within ``ALDEBARAN_LANES_CONFIRM_TTL_SECONDS`` (held back from delivery; an
  operator settles it with ``aldebaran lanes resolve``). Read from the keeper's heartbeat (the
  reconciler's counts), never by listing the unconfirmed records.

Every check reads bounded state (heartbeats, consumer-group offsets, the ledger's small index, a capped
quarantine count): the run takes the same time after a day of history as after a minute.

Every run writes one record, ``<prefix>/runs/<run id>.json``, and ``<prefix>/latest.json``; then
fails naming every problem if there is one.
"""

from __future__ import annotations

import json
import logging
import re
import time

from aldebaran.exceptions import AldebaranError, PlatformUnhealthy
from aldebaran.platform.settings import HealthSettings

log = logging.getLogger(__name__)


def _offsets(end_offsets, topic: str) -> dict[int, int] | None:
    """The auditor's processed end offsets for `topic` from its heartbeat (Spark progress format)."""
    for item in end_offsets or []:
        if isinstance(item, str):
            try:
                item = json.loads(item)
            except ValueError:
                continue
        if isinstance(item, dict) and topic in item:
            return {int(p): int(o) for p, o in item[topic].items()}
    return None


def check_kafka(kafka, timeout: float) -> dict:
    from aldebaran.kafka.admin import admin, list_topics
    from aldebaran.kafka.conn import resolve

    t0 = time.monotonic()
    cluster = resolve(kafka)  # the brokers and the connection they came from (named, never a secret)
    where = cluster.describe()
    try:
        meta = list_topics(kafka, timeout=timeout, client=admin(kafka, log_level=0))
    except AldebaranError as exc:  # unreachable, or the connection's credentials refused: it says which
        return {"ok": False, "problem": f"Kafka {cluster.bootstrap_servers} unreachable: {exc}"}
    missing = [t for t in kafka.topics() if t not in meta.topics]
    out = {"ok": not missing, "brokers": len(meta.brokers), "ms": round((time.monotonic() - t0) * 1000, 1)}
    if missing:
        out["problem"] = f"Kafka {where}: topic(s) missing: {', '.join(missing)}"
    return out


def check_auditor_lag(kafka, heartbeat: dict | None, limit: int) -> dict:
    from confluent_kafka import KafkaException

    from aldebaran.kafka.io import end_offsets

    try:
        ends = end_offsets(kafka, kafka.trades_topic)
    except (KafkaException, KeyError, AldebaranError) as exc:
        return {"ok": False, "problem": f"auditor lag unknown: end offsets of {kafka.trades_topic}: {exc}"}
    done = _offsets((heartbeat or {}).get("kafka_end_offsets"), kafka.trades_topic)
    if done is None:
        total = sum(ends.values())
        return {"ok": total == 0, "lag": None, "topic_end": ends,
                **({} if total == 0 else {"problem": f"auditor lag unknown: no processed offsets for "
                                                     f"{kafka.trades_topic} in its heartbeat ({total} trades on the topic)"})}
    lag = sum(max(0, end - done.get(p, 0)) for p, end in ends.items())
    out = {"ok": lag <= limit, "lag": lag, "limit": limit}
    if lag > limit:
        out["problem"] = (f"auditor lags {lag} trades behind {kafka.trades_topic} "
                          f"(limit {limit}, ALDEBARAN_HEALTH_MAX_AUDITOR_LAG)")
    return out


def check_dispatch_lag(kafka, channels: list[str], limit: int) -> dict:
    from confluent_kafka import KafkaException

    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.kafka.admin import consumer_lag
    from aldebaran.settings import load

    group_prefix = load(DeliverySettings).group

    out: dict = {"ok": True, "channels": {}}
    problems = []
    for channel in channels:
        group = f"{group_prefix}-{channel}"
        try:
            lag = consumer_lag(kafka, group, kafka.alerts_topic)
        except (KafkaException, AldebaranError) as exc:
            problems.append(f"dispatch lag of {channel} unknown: {exc}")
            continue
        out["channels"][channel] = {"group": group, "lag": lag["lag"], "committed": lag["committed"]}
        if lag["lag"] > limit:
            problems.append(f"channel {channel}: {lag['lag']} alerts not dispatched yet (group {group}, limit {limit}, "
                            "ALDEBARAN_HEALTH_MAX_DISPATCH_BACKLOG)")
    if problems:
        out.update(ok=False, problem="; ".join(problems))
    return out


def check_object_store(store) -> dict:
    from botocore.exceptions import BotoCoreError, ClientError

    t0 = time.monotonic()
    try:
        store.client.head_bucket(Bucket=store.bucket)
    except (BotoCoreError, ClientError) as exc:
        return {"ok": False, "problem": f"object store {store.access.describe()} bucket {store.bucket}: {exc}"}
    return {"ok": True, "ms": round((time.monotonic() - t0) * 1000, 1)}


def check_auditor_progress(store, query: str, heartbeat: dict | None, max_age: float, now: float) -> dict:
    from aldebaran.runtime.heartbeat import AUDITOR, key

    uri = store.uri(key(AUDITOR, query))
    if heartbeat is None:
        return {"ok": False, "problem": f"auditor {query!r}: no heartbeat at {uri} — is it running? "
                                        "(the auditor_supervisor DAG starts it)"}
    age = now - float(heartbeat.get("updated_at_ms") or 0) / 1000
    out = {"ok": True, "status": heartbeat.get("status"), "age_seconds": round(age, 1),
           "batch_id": heartbeat.get("batch_id")}
    if heartbeat.get("status") in ("failed", "stopped"):
        out.update(ok=False, problem=f"auditor {query!r}: query {heartbeat.get('status')} {age:.0f}s ago "
                                     f"{str(heartbeat.get('error') or '')[:300]}".rstrip())
    elif age > max_age:
        out.update(ok=False, problem=f"auditor {query!r}: last progress {age:.0f}s ago at {uri} (limit {max_age:.0f}s, "
                                     "ALDEBARAN_HEALTH_MAX_PROGRESS_AGE_SECONDS)")
    return out


def check_keying(heartbeat: dict | None, max_share: float) -> dict:
    """The producer keying contract as the auditor sees it: a warning (the verdict stays green: misrouted
    events are audited correctly, one batch later) when the recent misrouted share is high."""
    books = (heartbeat or {}).get("books") or {}
    share = books.get("misrouted_share_recent")
    out = {"ok": True, "misrouted_share_recent": share, "partitioner": books.get("partitioner")}
    if share is not None and share > max_share:
        out["warning"] = (
            f"auditor: {share:.0%} of the recent events reached a partition that does not own their order "
            f"(the checkpoint's partitioner: {books.get('partitioner')}). Producers must key each trade by its "
            f"order id and keep one partitioner (README 'Producing trades'); misrouted events are re-produced to "
            f"their owner and cost a batch of latency (limit {max_share:.0%}, ALDEBARAN_HEALTH_MAX_MISROUTED_SHARE)")
    return out


def check_deliveries(channels: list[str], settings: HealthSettings) -> dict:
    from aldebaran.delivery.dispatcher import default_ledger

    ledger = default_ledger()
    out: dict = {"ok": True, "channels": {}}
    problems = []
    for channel in channels:
        stats = ledger.stats(channel)
        out["channels"][channel] = {k: stats[k] for k in ("retrying", "dead", "in_doubt")}
        if stats["dead"] > settings.max_dead:
            problems.append(f"channel {channel}: {stats['dead']} DEAD deliveries (limit {settings.max_dead}, "
                            f"ALDEBARAN_HEALTH_MAX_DEAD; see `aldebaran deliveries list --channel {channel} --state DEAD`)")
        if stats["in_doubt"] > settings.max_in_doubt:
            problems.append(f"channel {channel}: {stats['in_doubt']} IN_DOUBT deliveries need an operator (limit "
                            f"{settings.max_in_doubt}, ALDEBARAN_HEALTH_MAX_IN_DOUBT; see `aldebaran deliveries "
                            f"list --channel {channel} --state IN_DOUBT`)")
    if problems:
        out.update(ok=False, problem="; ".join(problems))
    return out


def check_quarantine(ledger, rejected: list[int | None]) -> dict:
    """The delivery ledger's quarantine (corrupt objects set aside, aldebaran.delivery.corrupt: a bounded
    listing) and the alerts dead-lettered to alerts.dlq (the dispatchers' and the lane reconciler's
    `rejected`, read by the other checks). A warning, never a failure: each one is kept, not lost, and
    the processes went on; a partition a corrupt run stopped fails under "dispatchers" (broken)."""
    from aldebaran.delivery.corrupt import quarantined
    from aldebaran.exceptions import ObjectStoreError

    known = [n for n in rejected if n is not None]
    out: dict = {"ok": True, "alerts_dlq_rejected": sum(known) if known else None}
    try:
        out.update(quarantined(ledger))
    except ObjectStoreError as exc:  # object_store says whether the store is down; this is a count
        out["warning"] = f"delivery quarantine not counted: {exc}"
        return out
    if out["count"]:
        out["warning"] = (f"{'≥ ' if out['capped'] else ''}{out['count']} corrupt ledger object(s) in the quarantine "
                          f"{out['where']}: see `aldebaran deliveries quarantine` (docs/operations.md, Quarantine)")
    return out


def check_dispatchers(settings: HealthSettings, now: float) -> dict:
    from aldebaran.exceptions import ObjectStoreError
    from aldebaran.runtime.heartbeat import DISPATCHER, key, read
    from aldebaran.platform import dispatch_supervisor, processes

    store = dispatch_supervisor.delivery_store()
    out: dict = {"ok": True, "dispatchers": {}}
    problems = []
    for name, channels in dispatch_supervisor.plan().items():
        uri = store.uri(key(DISPATCHER, name))
        try:
            hb = read(store, DISPATCHER, name)
        except ObjectStoreError as exc:
            problems.append(f"dispatcher {name!r}: heartbeat unreadable: {exc}")
            continue
        if hb is None:
            problems.append(f"dispatcher {name!r} ({', '.join(channels)}): no heartbeat at {uri} — is it running? "
                            "(the dispatch_supervisor DAG starts it)")
            continue
        age = now - float(hb.get("at") or 0)
        broken = processes.broken_partitions(hb)
        # rejected: alerts it dead-lettered to alerts.dlq since it started (shown, not failed on: each one is
        # settled, and the DLQ record names why; docs/operations.md "Rejected alerts").
        out["dispatchers"][name] = {"status": hb.get("status"), "age_seconds": round(age, 1), "host": hb.get("host"),
                                    "pid": hb.get("pid"), "broken": broken, "rejected": hb.get("malformed", 0)}
        if hb.get("status") != "running":
            problems.append(f"dispatcher {name!r}: {hb.get('status')} {age:.0f}s ago "
                            f"{str(hb.get('error') or '')[:300]}".rstrip())
        elif age > settings.max_dispatcher_heartbeat_age_seconds:
            problems.append(f"dispatcher {name!r}: last heartbeat {age:.0f}s ago at {uri} (limit "
                            f"{settings.max_dispatcher_heartbeat_age_seconds:.0f}s, "
                            "ALDEBARAN_HEALTH_MAX_DISPATCHER_HEARTBEAT_AGE_SECONDS)")
        for where, why in broken.items():
            channel, partition = where.rsplit("/", 1)
            problems.append(f"dispatcher {name!r}: channel {channel} partition {partition} broken, not delivered: {why}")
    if problems:
        out.update(ok=False, problem="; ".join(problems))
    return out


def check_lane(now: float, lanes=None, exact: tuple[str, dict | None] | None = None) -> dict:
    """`lanes` (the LaneSettings) and `exact` (the auditor's query and heartbeat): what :func:`check` has
    read already (read again when not given)."""
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.lanes.status import collect
    from aldebaran.settings import load

    lanes = lanes or load(LaneSettings)
    fast = collect(now, lanes, exact)["fast"]
    out = {"ok": True, "lane": fast["lane"], "status": fast.get("status"), "age_seconds": fast.get("age_seconds"),
           "reconcile": (fast.get("reconcile") or {}).get("counts"), "unconfirmed": fast["unconfirmed_count"],
           "rejected": (fast.get("reconcile") or {}).get("rejected", 0)}  # dead-lettered to alerts.dlq, shown
    problems = []
    stale = lanes.stale_after_seconds
    if not fast["heartbeat"]:
        problems.append(f"lane {fast['lane']!r}: no heartbeat at {fast['heartbeat_uri']} — is it running? "
                        "(the lane_supervisor DAG starts it)")
    elif fast.get("status") not in ("running", "rotating"):  # rotating: a new generation starts (keeper)
        problems.append(f"lane {fast['lane']!r}: {fast.get('status')} {fast.get('age_seconds')}s ago "
                        f"{str(fast.get('error') or '')[:300]}".rstrip())
    elif fast["age_seconds"] > stale:
        problems.append(f"lane {fast['lane']!r}: last heartbeat {fast['age_seconds']:.0f}s ago (limit {stale:.0f}s, "
                        "ALDEBARAN_LANES_STALE_AFTER_SECONDS)")
    count = fast["unconfirmed_count"] or 0  # the reconciler's count in the heartbeat, not a listing
    if count:
        ids = ", ".join(r["alert_id"] for r in fast["unconfirmed"][:5])
        problems.append(f"lane {fast['lane']!r}: {count} fast-lane alert(s) the exact lane never "
                        f"confirmed, held back from delivery ({ids}{' …' if count > 5 else ''}; "
                        "see `aldebaran lanes status`, settle with `aldebaran lanes resolve ALERT_ID --reason …`)")
    if problems:
        out.update(ok=False, problem="; ".join(problems))
    return out


def check(run_id: str, query_name: str | None = None, overrides: dict | None = None) -> dict:
    """Run every check, write the health record, return it (the verdict is :func:`raise_if_unhealthy`)."""
    from aldebaran.runtime import heartbeat as hbmod
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.delivery.channels import channel_names
    from aldebaran.exceptions import ObjectStoreError
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.storage.store import open_store
    from aldebaran.settings import KafkaSettings, load

    settings = load(HealthSettings, **{k: v for k, v in (overrides or {}).items() if v not in (None, "")})
    query = load(AuditorSettings, query_name=query_name or None).query_name
    kafka = load(KafkaSettings)
    store = open_store()
    now = time.time()
    channels = channel_names()

    checks: dict[str, dict] = {"object_store": check_object_store(store)}
    heartbeat = None
    if checks["object_store"]["ok"]:
        try:
            heartbeat = hbmod.read(store, hbmod.AUDITOR, query)
        except ObjectStoreError as exc:
            checks["object_store"] = {"ok": False, "problem": f"heartbeat unreadable: {exc}"}
    checks["kafka"] = check_kafka(kafka, settings.timeout_seconds)
    if checks["kafka"]["ok"]:
        checks["auditor_lag"] = check_auditor_lag(kafka, heartbeat, settings.max_auditor_lag)
        checks["dispatch_lag"] = check_dispatch_lag(kafka, channels, settings.max_dispatch_backlog)
    if checks["object_store"]["ok"]:
        checks["auditor_progress"] = check_auditor_progress(store, query, heartbeat,
                                                            settings.max_progress_age_seconds, now)
        checks["keying"] = check_keying(heartbeat, settings.max_misrouted_share)
        checks["deliveries"] = check_deliveries(channels, settings)
        if settings.check_dispatchers:
            checks["dispatchers"] = check_dispatchers(settings, now)
        lanes = load(LaneSettings)
        if lanes.enabled:
            checks["lane"] = check_lane(now, lanes, (query, heartbeat))
        from aldebaran.delivery.dispatcher import default_ledger

        rejected = [d.get("rejected") for d in checks.get("dispatchers", {}).get("dispatchers", {}).values()]
        checks["quarantine"] = check_quarantine(default_ledger(), [*rejected, checks.get("lane", {}).get("rejected")])

    problems = [c["problem"] for c in checks.values() if not c["ok"]]
    warnings = [c["warning"] for c in checks.values() if c.get("warning")]
    record = {"run_id": run_id, "at": now, "at_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
              "healthy": not problems, "problems": problems, "warnings": warnings, "auditor_query": query,
              "channels": channels, "checks": checks}
    if checks["object_store"]["ok"]:
        prefix = settings.prefix.strip("/")
        run_key = f"{prefix}/runs/{time.strftime('%Y-%m-%d', time.gmtime(now))}/{_segment(run_id)}.json"
        record["record_uri"] = store.uri(run_key)
        body = json.dumps(record, indent=1, default=str).encode()
        store.put(run_key, body)
        store.put(f"{prefix}/latest.json", body)
    else:
        record["record_uri"] = None  # nowhere to write it: the log and the failure carry it
    level = logging.INFO if not problems else logging.ERROR
    log.log(level, "platform %s: %s", "healthy" if not problems else "UNHEALTHY",
            json.dumps({k: {kk: vv for kk, vv in v.items() if kk not in ("problem", "warning")}
                        for k, v in checks.items()}, default=str))
    for problem in problems:
        log.error("  problem: %s", problem)
    for warning in warnings:
        log.warning("  warning: %s", warning)
    return record


def check_from_params(run_id: str, params: dict) -> dict:
    """The DAG's Params → :func:`check` (empty = the ALDEBARAN_HEALTH_* setting)."""
    given = {k: v for k, v in dict(params).items() if v not in ("", None)}
    return check(run_id, given.get("query_name"), {k: given[k] for k in HealthSettings.model_fields if k in given})


def raise_if_unhealthy(record: dict) -> None:
    if record["problems"]:
        where = f" (record {record['record_uri']})" if record.get("record_uri") else ""
        raise PlatformUnhealthy(f"platform unhealthy — {len(record['problems'])} problem(s){where}:\n- "
                                + "\n- ".join(record["problems"]))


def _segment(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]", "_", run_id)[:200] or "run"
