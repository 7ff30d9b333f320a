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
fails naming every problem if there is one. The checks themselves are in health_checks.py; this module
runs them, writes the record and gives the verdict.
"""

from __future__ import annotations

import json
import logging
import re
import time

from aldebaran.exceptions import PlatformUnhealthy
from aldebaran.platform.health_checks import (check_auditor_lag, check_auditor_progress, check_deliveries,
                                              check_dispatch_lag, check_dispatchers, check_keying, check_kafka,
                                              check_lane, check_object_store, check_quarantine)
from aldebaran.platform.settings import HealthSettings

log = logging.getLogger(__name__)


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
