"""The checks of platform health, one function each (the list and what each checks: health.py's
docstring). Each reads bounded state and returns a dict: ``ok``, the figures it read, and a ``problem``
(fails the run) or a ``warning`` (shown only). health.py runs them, writes the record and gives the
verdict; the checks live apart so that each can be read, and called by a test, on its own.
"""

from __future__ import annotations

import json
import time

from aldebaran.exceptions import AldebaranError
from aldebaran.platform.settings import HealthSettings


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
