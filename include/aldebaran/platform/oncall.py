"""The platform pages when it is unwell: the on-call page of the platform DAGs (platform_health, the
supervisors, the replay), sent by their Airflow notifier (:mod:`aldebaran.platform.oncall_notifier`).

The target is one Airflow connection, named by ``ALDEBARAN_ONCALL_CONNECTION`` (unset: nobody is paged),
defined like a channel's (``conn_type`` alertmanager, pagerduty, opsgenie, http/webhook or smtp/email) and
built and sent by the channel classes themselves, straight to the provider: never through the platform's
own Kafka or dispatchers, which may be what is broken.

A failed run's **findings** each have a stable key: for platform_health one per failing check
(``aldebaran.platform-health.auditor-progress``, from the run's health record), for the other DAGs one per
DAG (``aldebaran.dispatch-supervisor``). The key is the provider's deduplication key: the alert id label on
Alertmanager, ``dedup_key`` on PagerDuty, ``alias`` on Opsgenie; so the same failure every 5 minutes is one
incident. A successful run resolves every finding of its DAG still open, a failed one those no longer found;
the open set is kept per DAG in the object store (:mod:`aldebaran.platform.oncall_state`).

Per kind: Alertmanager is re-posted on every failing run with ``endsAt`` ``ALDEBARAN_ONCALL_HOLD_SECONDS``
ahead (a firing alert that is not re-posted times out), and resolved with ``endsAt`` now; PagerDuty and
Opsgenie are triggered once per incident and resolved (closed) by key; a webhook or e-mail target gets one
message when a finding opens and one when it resolves (the incident's start in their ids, so a receiver
deduplicating by ``Idempotency-Key`` / ``Message-ID`` takes the next incident of the same finding).
"""

from __future__ import annotations

import logging
import time

from aldebaran.exceptions import ConfigError
from aldebaran.platform.settings import OnCallSettings

log = logging.getLogger(__name__)

# The kinds an on-call target may be: the providers that page people, and the two plain ones.
KINDS = ("alertmanager", "pagerduty", "opsgenie", "webhook", "email")
NATIVE_RESOLVE = ("alertmanager", "pagerduty", "opsgenie")  # the provider closes its own incident by key
FIRING, RECOVERED = "PLATFORM_UNHEALTHY", "PLATFORM_RECOVERED"
HEALTH_DAG = "platform_health"


# --- findings --------------------------------------------------------------------------------------
def finding_key(dag_id: str, check: str | None = None) -> str:
    """``aldebaran.<dag>[.<check>]``, ``_`` read as ``-`` (a key is an alert id: no ``_``)."""
    return ".".join(p.replace("_", "-") for p in ("aldebaran", dag_id, check) if p)


def health_findings(record: dict) -> dict[str, dict]:
    """One finding per failing check of a health record (the check's own problem line is the summary)."""
    return {finding_key(HEALTH_DAG, name): {"summary": check.get("problem", f"check {name} failed"), "check": name}
            for name, check in (record.get("checks") or {}).items() if not check.get("ok", True)}


def health_record(run_id: str) -> dict | None:
    """The health record the run `run_id` wrote (``latest.json``; None if another run's, or unreadable)."""
    from aldebaran.exceptions import ObjectStoreError
    from aldebaran.platform.settings import HealthSettings
    from aldebaran.settings import load
    from aldebaran.storage.store import open_store

    try:
        record = open_store().get(f"{load(HealthSettings).prefix.strip('/')}/latest.json").json()
    except (ObjectStoreError, ValueError) as exc:
        log.warning("on-call: no health record for run %s: %s", run_id, exc)
        return None
    return record if record.get("run_id") == run_id else None


def run_findings(dag_id: str, run_id: str, task_id: str | None, reason: str | None) -> dict[str, dict]:
    """A failed run's findings: platform_health's failing checks when its record names them, else one for
    the DAG (the supervisors, the replay, or a health run that failed before it could record)."""
    if dag_id == HEALTH_DAG:
        found = health_findings(health_record(run_id) or {})
        if found:
            return found
    where = f" in task {task_id}" if task_id else ""
    return {finding_key(dag_id): {"summary": f"DAG {dag_id} run {run_id} failed{where} ({reason or 'failed'}): "
                                             "see its task logs in Airflow"}}


# --- the target ------------------------------------------------------------------------------------
def target(settings: OnCallSettings):
    """The on-call channel, built by the channel classes from the connection (errors name it, never a secret)."""
    from aldebaran.storage import connections
    from aldebaran.delivery.channels import channel_from_connection

    conn = connections.lookup(settings.connection)
    if conn is None:
        raise ConfigError(f"ALDEBARAN_ONCALL_CONNECTION: {connections.missing(settings.connection)}")
    channel = channel_from_connection("oncall", conn)
    if channel.kind not in KINDS:
        channel.close()
        raise conn.error("field conn_type", f"is a {channel.kind} channel: the on-call target must be one of "
                                            f"{', '.join(KINDS)} (it pages people, outside the platform)")
    return channel


def page_alert(key: str, finding: dict, dag_id: str, run_id: str, opened_at: float, kind: str, *,
               recovered: bool = False):
    """A finding as an Alert, so every channel class can send it. On the providers that resolve by key the
    id is the finding's key and the labels never change; on a webhook or e-mail the incident's start is in
    the id (a new incident is a new message), and the recovery is a message of its own."""
    from aldebaran.model import Alert

    alert_id = key
    if kind not in NATIVE_RESOLVE:
        alert_id = f"{key}.{int(opened_at)}" + (".resolved" if recovered else "")
    state = "resolved" if recovered else "firing"
    message = f"{'RESOLVED: ' if recovered else ''}{finding.get('summary', '')}"
    return Alert.from_dict({
        "alert_id": alert_id, "kind": RECOVERED if recovered and kind not in NATIVE_RESOLVE else FIRING,
        "order_id": f"platform:{dag_id}", "client": "aldebaran-platform",
        "detected_at": int(opened_at * 1000), "message": message, "finding": key, "status": state,
        "dag_id": dag_id, "run_id": run_id,
    })


def _send(channel, alerts: list, settings: OnCallSettings, now: float) -> set[str]:
    """Page: the finding keys the provider took."""
    if not alerts:
        return set()
    if channel.kind == "alertmanager":
        outcomes = channel.send_many(alerts, ends_at=now + settings.hold_seconds)
    else:
        outcomes = channel.send_many(alerts)
    return _taken(alerts, outcomes, "page")


def _resolve(channel, alerts: list, now: float) -> set[str]:
    """Resolve: the finding keys the provider took the resolve for."""
    if not alerts:
        return set()
    if channel.kind == "alertmanager":
        return _taken(alerts, channel.send_many(alerts, ends_at=now), "resolve")
    if channel.kind in NATIVE_RESOLVE:
        from aldebaran.delivery.channels import Outcome
        from aldebaran.delivery.exceptions import PermanentError, RetryableError

        outcomes = []
        for alert in alerts:
            try:
                outcomes.append(Outcome.delivered(alert.alert_id, channel.resolve(alert)))
            except (RetryableError, PermanentError) as exc:
                outcomes.append(Outcome.failed(alert.alert_id, exc))
        return _taken(alerts, outcomes, "resolve")
    return _taken(alerts, channel.send_many(alerts), "resolve")


def _taken(alerts: list, outcomes: list, what: str) -> set[str]:
    taken = set()
    for alert, outcome in zip(alerts, outcomes):
        if outcome.status == "delivered":
            taken.add(alert.extra["finding"])
        else:  # the channel's error names the target and status, never a secret
            log.error("on-call %s of %s not taken (%s): %s", what, alert.extra["finding"], outcome.status,
                      outcome.error)
    return taken


# --- one run -----------------------------------------------------------------------------------------
def page(dag_id: str, run_id: str, findings: dict[str, dict], settings: OnCallSettings | None = None,
         now: float | None = None) -> dict:
    """Page the run's `findings` (none: the run is green) and resolve the DAG's open ones no longer found.
    What it did, by finding key; nothing when no on-call connection is set."""
    from aldebaran.exceptions import ObjectStoreError
    from aldebaran.platform import oncall_state
    from aldebaran.settings import load
    from aldebaran.storage.store import open_store

    settings = settings or load(OnCallSettings)
    now = time.time() if now is None else now
    if not settings.connection:
        if findings:
            log.warning("on-call: %s failed but ALDEBARAN_ONCALL_CONNECTION is not set: nobody is paged", dag_id)
        return {"paged": [], "resolved": [], "target": None}
    key = oncall_state.state_key(settings.state_prefix, dag_id)
    store, etag, stored = None, None, True
    try:
        store = open_store()
        open_findings, etag = oncall_state.load(store, key)
    except ObjectStoreError as exc:  # page anyway: the providers deduplicate by key; nothing known to resolve
        log.error("on-call: open findings unreadable (%s): paging without them", exc)
        open_findings, stored = {}, False
    the_plan = oncall_state.plan(open_findings, findings)
    if not (the_plan.new or the_plan.still or the_plan.gone or the_plan.dropped):
        return {"target": None, "paged": [], "resolved": []}  # green and nothing open: no target, no write
    channel = target(settings)
    try:
        def opened(k: str) -> float:
            return float((open_findings.get(k) or {}).get("opened_at", now))

        to_send = the_plan.new + (the_plan.still if channel.kind == "alertmanager" else [])
        sent = _send(channel, [page_alert(k, findings[k], dag_id, run_id, opened(k), channel.kind)
                               for k in to_send], settings, now)
        resolved = _resolve(channel, [page_alert(k, open_findings[k], dag_id, run_id, opened(k), channel.kind,
                                                 recovered=True) for k in the_plan.gone], now)
    finally:
        channel.close()
    if stored:
        try:
            oncall_state.save(store, key, oncall_state.settle(open_findings, findings, the_plan, sent, resolved, now),
                              etag)
        except ObjectStoreError as exc:
            log.error("on-call: open findings not saved (%s): the next run pages and resolves without them", exc)
    result = {"target": channel.kind, "paged": sorted(sent & set(the_plan.new)), "refreshed":
              sorted(sent & set(the_plan.still)), "still_open": sorted(set(the_plan.still) - sent),
              "resolved": sorted(resolved), "unsent": sorted(set(to_send) - sent),
              "unresolved": sorted(set(the_plan.gone) - resolved)}
    log.log(logging.ERROR if findings else logging.INFO, "on-call %s %s: %s", dag_id, run_id, result)
    return result


def page_from_context(context, failed: bool) -> dict:
    """The notifier's entry: the DAG run's findings (none when it succeeded), paged and resolved."""
    from aldebaran.settings import load

    dag = context.get("dag")
    dag_id = getattr(dag, "dag_id", None) or context.get("dag_id") or "unknown"
    run_id = context.get("run_id") or getattr(context.get("dag_run"), "run_id", None) or "unknown"
    settings = load(OnCallSettings)
    if failed and not settings.connection:  # no target: the run's findings are not even read
        log.warning("on-call: %s failed but ALDEBARAN_ONCALL_CONNECTION is not set: nobody is paged", dag_id)
        return {"paged": [], "resolved": [], "target": None}
    findings = {}
    if failed:
        ti = context.get("ti") or context.get("task_instance")
        findings = run_findings(dag_id, run_id, getattr(ti, "task_id", None), context.get("reason"))
    return page(dag_id, run_id, findings, settings)
