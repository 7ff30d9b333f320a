"""The platform's on-call page: the open-findings logic (one incident per finding key, resolved once when
it is gone, a failed page or resolve retried by the next run) and what each kind of target is sent, with a
recording channel and a local store."""

from __future__ import annotations

import json

import pytest

from aldebaran.delivery.channels import Outcome
from aldebaran.exceptions import ConfigError
from aldebaran.platform import oncall, oncall_state
from aldebaran.platform.oncall import OnCallSettings
from aldebaran.storage.local import LocalStore

A, B = "aldebaran.platform-health.kafka", "aldebaran.platform-health.auditor-progress"


def test_plan_new_still_gone_and_dropped():
    held = {A: {"sent": True, "opened_at": 1.0}, B: {"sent": False, "opened_at": 2.0}}
    the_plan = oncall_state.plan(held, {A: {"summary": "a"}, "c": {"summary": "c"}})
    assert (the_plan.new, the_plan.still, the_plan.gone, the_plan.dropped) == (["c"], [A], [], [B])
    green = oncall_state.plan(held, {})
    assert (green.new, green.still, green.gone, green.dropped) == ([], [], [A], [B])


def test_settle_keeps_the_first_opening_and_retries_what_failed():
    findings = {A: {"summary": "a"}, B: {"summary": "b"}}
    first = oncall_state.plan({}, findings)
    held = oncall_state.settle({}, findings, first, sent={A}, resolved=set(), now=100.0)
    assert held[A] == {"summary": "a", "opened_at": 100.0, "last_seen": 100.0, "sent": True}
    assert held[B]["sent"] is False  # its page failed: the next run sends it again
    second = oncall_state.plan(held, findings)
    assert second.new == [B] and second.still == [A]
    held = oncall_state.settle(held, findings, second, sent={B}, resolved=set(), now=400.0)
    assert held[A]["opened_at"] == 100.0 and held[B]["opened_at"] == 100.0 and held[B]["sent"]
    green = oncall_state.plan(held, {})
    assert green.gone == sorted([A, B])
    assert oncall_state.settle(held, {}, green, sent=set(), resolved={A}, now=700.0) == {B: held[B]}
    assert oncall_state.settle(held, {}, green, sent=set(), resolved={A, B}, now=700.0) == {}


def test_health_findings_one_stable_key_per_failing_check():
    record = {"checks": {"kafka": {"ok": True}, "auditor_progress": {"ok": False, "problem": "no heartbeat"},
                         "object_store": {"ok": False}}}
    assert oncall.health_findings(record) == {
        B: {"summary": "no heartbeat", "check": "auditor_progress"},
        "aldebaran.platform-health.object-store": {"summary": "check object_store failed", "check": "object_store"}}
    assert oncall.finding_key("dispatch_supervisor") == "aldebaran.dispatch-supervisor"


class Recording:
    """A channel of kind `kind` that records what it is sent (the real classes are tested against providers)."""

    def __init__(self, kind: str, fail: bool = False):
        self.kind, self.fail, self.sent, self.resolved, self.closed = kind, fail, [], [], 0

    def send_many(self, alerts, ends_at=None):
        self.sent += [(a, ends_at) for a in alerts]
        return [Outcome.retry(a.alert_id, "down") if self.fail else Outcome.delivered(a.alert_id, {}) for a in alerts]

    def resolve(self, alert):
        self.resolved.append(alert)
        return {}

    def close(self):
        self.closed += 1


@pytest.fixture
def env(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "store")
    monkeypatch.setattr("aldebaran.storage.store.open_store", lambda location=None: store)
    settings = OnCallSettings(connection="aldebaran_oncall", state_prefix="oncall", hold_seconds=1800)
    return store, settings


def use(monkeypatch, channel):
    monkeypatch.setattr(oncall, "target", lambda settings: channel)
    return channel


def test_alertmanager_is_reposted_while_failing_and_resolved_once(env, monkeypatch):
    store, settings = env
    am = use(monkeypatch, Recording("alertmanager"))
    finding = {B: {"summary": "no heartbeat"}}
    assert oncall.page("platform_health", "r1", finding, settings, now=1000.0)["paged"] == [B]
    assert oncall.page("platform_health", "r2", finding, settings, now=1300.0)["refreshed"] == [B]
    # One label set: the same alert id every time, held 30 min past the last post.
    assert [(a.alert_id, a.kind, end) for a, end in am.sent] == [(B, "PLATFORM_UNHEALTHY", 2800.0),
                                                                (B, "PLATFORM_UNHEALTHY", 3100.0)]
    assert json.loads(store.get("oncall/platform_health.json").body)["open"][B]["opened_at"] == 1000.0
    green = oncall.page("platform_health", "r3", {}, settings, now=1600.0)
    assert green["resolved"] == [B] and am.sent[-1][0].alert_id == B and am.sent[-1][1] == 1600.0
    assert am.sent[-1][0].kind == "PLATFORM_UNHEALTHY"  # the same label set, ended now
    assert json.loads(store.get("oncall/platform_health.json").body)["open"] == {}
    use(monkeypatch, None)  # green with nothing open: the target is not even built
    assert oncall.page("platform_health", "r4", {}, settings, now=1900.0)["target"] is None


def test_pagerduty_is_triggered_once_per_incident_and_resolved_by_key(env, monkeypatch):
    _, settings = env
    pd = use(monkeypatch, Recording("pagerduty"))
    finding = {"aldebaran.dispatch-supervisor": {"summary": "failed"}}
    for n in range(3):
        oncall.page("dispatch_supervisor", f"r{n}", finding, settings, now=1000.0 + 60 * n)
    assert [a.alert_id for a, _ in pd.sent] == ["aldebaran.dispatch-supervisor"]
    assert oncall.page("dispatch_supervisor", "r9", {}, settings, now=2000.0)["resolved"] == [
        "aldebaran.dispatch-supervisor"]
    assert [a.alert_id for a in pd.resolved] == ["aldebaran.dispatch-supervisor"] and pd.closed == 4


def test_a_failed_page_is_sent_again_by_the_next_run(env, monkeypatch):
    _, settings = env
    down = use(monkeypatch, Recording("opsgenie", fail=True))
    result = oncall.page("lane_supervisor", "r1", {"k": {"summary": "s"}}, settings, now=10.0)
    assert result["paged"] == [] and result["unsent"] == ["k"] and len(down.sent) == 1
    up = use(monkeypatch, Recording("opsgenie"))
    assert oncall.page("lane_supervisor", "r2", {"k": {"summary": "s"}}, settings, now=70.0)["paged"] == ["k"]
    assert len(up.sent) == 1


def test_webhook_gets_one_message_per_opening_and_one_on_recovery(env, monkeypatch):
    _, settings = env
    hook = use(monkeypatch, Recording("webhook"))
    finding = {A: {"summary": "Kafka unreachable"}}
    oncall.page("platform_health", "r1", finding, settings, now=1000.0)
    oncall.page("platform_health", "r2", finding, settings, now=1300.0)
    oncall.page("platform_health", "r3", {}, settings, now=1600.0)
    assert [(a.alert_id, a.kind) for a, _ in hook.sent] == [(f"{A}.1000", "PLATFORM_UNHEALTHY"),
                                                           (f"{A}.1000.resolved", "PLATFORM_RECOVERED")]
    assert hook.sent[1][0].extra["message"] == "RESOLVED: Kafka unreachable"


def test_no_connection_pages_nobody(env, monkeypatch):
    _, _ = env
    use(monkeypatch, None)
    assert oncall.page("platform_health", "r1", {A: {"summary": "x"}}, OnCallSettings(connection=None))["target"] is None


def test_the_target_must_page_people(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_ONCALL", json.dumps({"conn_type": "log",
                                                                    "extra": {"path": str(tmp_path / "x")}}))
    with pytest.raises(ConfigError, match="on-call target must be one of alertmanager, pagerduty"):
        oncall.target(OnCallSettings(connection="aldebaran_oncall"))
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_ONCALL")
    with pytest.raises(ConfigError, match="ALDEBARAN_ONCALL_CONNECTION: AIRFLOW_CONN_ALDEBARAN_ONCALL is not set"):
        oncall.target(OnCallSettings(connection="aldebaran_oncall"))
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_ONCALL", json.dumps({"conn_type": "alertmanager",
                                                                    "host": "http://127.0.0.1:1"}))
    channel = oncall.target(OnCallSettings(connection="aldebaran_oncall"))
    assert channel.kind == "alertmanager"
    channel.close()


def test_the_providers_resolve_by_the_same_key():
    from aldebaran.delivery.channels import OpsgenieChannel, PagerDutyChannel
    from aldebaran.delivery.channels.alertmanager import payload

    alert = oncall.page_alert(B, {"summary": "no heartbeat"}, "platform_health", "r1", 1000.0, "pagerduty")
    pd = PagerDutyChannel("oncall", "routing-key")
    url, body, headers = pd.resolve_request(alert)
    assert url == "https://events.pagerduty.com/v2/enqueue" and headers == {}
    assert body == {"routing_key": "routing-key", "event_action": "resolve", "dedup_key": B}
    og = OpsgenieChannel("oncall", "genie-key")
    url, body, headers = og.resolve_request(alert)
    assert url == f"https://api.opsgenie.com/v2/alerts/{B}/close?identifierType=alias"
    assert headers == {"Authorization": "GenieKey genie-key"} and body["source"] == "aldebaran"
    firing, ended = payload(alert, {}, "oncall"), payload(alert, {}, "oncall", ends_at=1600.0)
    assert firing["labels"] == ended["labels"] and "endsAt" not in firing
    assert ended["endsAt"] == "1970-01-01T00:26:40.000Z"
    assert pd.request(alert)[0]["payload"]["summary"] == (
        "Aldebaran PLATFORM_UNHEALTHY platform:platform_health: no heartbeat")
    pd.close()
    og.close()


def test_the_notifier_pages_a_failed_supervisor_run_and_resolves_on_success(env, monkeypatch):
    from aldebaran.platform.oncall_notifier import OnCallNotifier, oncall_callbacks

    monkeypatch.setenv("ALDEBARAN_ONCALL_CONNECTION", "aldebaran_oncall")
    monkeypatch.setenv("ALDEBARAN_ONCALL_STATE_PREFIX", "oncall")
    pd = use(monkeypatch, Recording("pagerduty"))

    class Dag:
        dag_id = "auditor_supervisor"

    class Ti:
        task_id = "assess"

    callbacks = oncall_callbacks()
    assert isinstance(callbacks["on_failure_callback"], OnCallNotifier) and callbacks["on_success_callback"].resolve
    callbacks["on_failure_callback"]({"dag": Dag(), "run_id": "r1", "ti": Ti(), "reason": "task_failure"})
    (alert, _), = pd.sent
    assert alert.alert_id == "aldebaran.auditor-supervisor" and "failed in task assess" in alert.extra["message"]
    callbacks["on_success_callback"]({"dag": Dag(), "run_id": "r2"})
    assert [a.alert_id for a in pd.resolved] == ["aldebaran.auditor-supervisor"]
