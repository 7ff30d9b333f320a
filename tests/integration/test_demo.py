"""`make demo` as a new user tries it: the platform runs through Airflow, and the Airflow UI shows it.

The demo is run as the user runs it (the `aldebaran demo` command) on the suite's services. Then this
test reads what the UI reads, with the UI's credentials: the DAG runs through the REST API, and Browse
→ Deliveries (the plugin's page, no parameters) for the demo's delivery records. The demo leaves the
platform running, as production would; the test stops it (`aldebaran demo --stop`) so the rest of the
suite runs on a quiet machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import httpx
import pytest

from aldebaran.runtime import paths
from aldebaran.runtime.procs import pid_alive

AIRFLOW = f"http://{os.environ.get('ALDEBARAN_AIRFLOW_HOST', '127.0.0.1')}:{os.environ.get('ALDEBARAN_AIRFLOW_PORT', '8080')}"
# The demo resets and stops the platform's defaults (topics, prefixes, the lane): `make test` runs it after the
# parallel phase, alone (scripts/test.sh).
pytestmark = pytest.mark.serial
DEMO_DAGS = ("auditor_supervisor", "alert_dispatch", "dispatch_supervisor", "platform_health")


def aldebaran(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(paths.venv_bin("aldebaran")), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def demo(services_up):
    proc = aldebaran("demo", "--orders", "100", "--timeout", "300", timeout=1200)
    try:
        yield proc
    finally:
        stopped = aldebaran("demo", "--stop", timeout=300)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.fixture(scope="module")
def http(services_up):
    with httpx.Client(base_url=AIRFLOW, timeout=30) as client:
        resp = client.post("/auth/token", json={"username": "admin",
                                                "password": os.environ["ALDEBARAN_AIRFLOW_ADMIN_PASSWORD"]})
        assert resp.status_code == 201, resp.text
        client.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"
        yield client


def demo_alerts() -> list[dict]:
    """What the demo's `log` channel (the default) received: one line per delivery."""
    path = paths.run_dir() / "alerts.log.jsonl"
    return [json.loads(line)["alert"] for line in path.read_text().splitlines()]


def test_the_demo_passes_its_own_checks(demo):
    out = demo.stdout
    assert demo.returncode == 0, out[-4000:] + demo.stderr[-4000:]
    assert "[FAIL]" not in out
    for check in ("exactly one OVERFILL for order 1", "OVERFILL alerts equal the reference model",
                  "each alert delivered once on every channel", "0-share purchases audited, not on the DLQ",
                  "platform_health passed"):
        assert f"[ok] {check}" in out, out[-3000:]
    assert "submit_auditor success" in out  # a run of the supervisor started the auditor


def test_the_airflow_api_shows_the_runs_the_demo_made(demo, http):
    for dag_id in DEMO_DAGS:
        runs = http.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"order_by": "-id", "limit": 20}).json()["dag_runs"]
        manual = [r for r in runs if r["run_type"] == "manual"]
        assert manual and manual[0]["state"] == "success", (dag_id, runs[:3])
        assert manual[0]["dag_run_id"] in demo.stdout
    tis = http.get(f"/api/v2/dags/alert_dispatch/dagRuns/{manual_run(http, 'alert_dispatch')}/taskInstances").json()
    assert {ti["task_id"]: ti["state"] for ti in tis["task_instances"]}["dispatch"] == "success"


def manual_run(http, dag_id: str) -> str:
    runs = http.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"order_by": "-id", "limit": 20}).json()["dag_runs"]
    return next(r["dag_run_id"] for r in runs if r["run_type"] == "manual")


def test_the_deliveries_page_shows_the_ledger_and_finds_each_demo_alert_in_its_run(demo, http):
    """The log channel delivers in group-commit runs (no per-alert record unless an alert fails or is in
    doubt): the page with no parameter shows the ledger, and any demo alert is found by its id, DELIVERED
    in its run."""
    alerts = demo_alerts()
    ids = {a["alert_id"] for a in alerts}
    assert len(alerts) == len(ids) > 20

    page = http.get("/aldebaran/deliveries/")
    assert page.status_code == 200
    assert "s3://aldebaran/deliveries/" in page.text and "log" in page.text

    (order1,) = [a for a in alerts if a["order_id"] == "1"]
    found = http.get("/aldebaran/deliveries/find", params={"alert_id": order1["alert_id"]})
    assert found.status_code == 200
    assert order1["alert_id"] in found.text and "DELIVERED" in found.text and "run partition" in found.text


def test_explain_tells_the_story_of_the_demo_alert_from_the_cli_and_the_page(demo, http):
    """`aldebaran explain` on the demo's OVERFILL of order 1: its request and the two purchases it counts, where
    the platform's trades topic holds them, the purchase of 30 as the trigger, the log channel's delivery;
    then the same view on the running Airflow's Deliveries page."""
    from aldebaran.audit import parse
    from aldebaran.kafka import io as kio
    from aldebaran.settings import KafkaSettings, load

    (order1,) = [a for a in demo_alerts() if a["order_id"] == "1"]
    kafka = load(KafkaSettings)
    held = {}
    for msg in kio.read_topic(kafka, kafka.trades_topic):
        v = parse.validate(msg.value())
        if not isinstance(v, parse.Invalid) and v.order_id == "1":
            held.setdefault(v.event_id, (msg.partition(), msg.offset(), v.shares))

    out = aldebaran("explain", order1["alert_id"], "--json", timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    story = json.loads(out.stdout)
    assert story["topic"] == kafka.trades_topic and story["alert"]["purchased"] == 120
    assert [(t["event_id"], t["kind"], t["shares"], t["partition"], t["offset"]) for t in story["trades"]] == [
        (e, k, held[e][2], held[e][0], held[e][1]) for e, k in [("1", "request"), ("2", "purchase"), ("3", "purchase")]]
    assert [t["event_id"] for t in story["trades"] if t["trigger"]] == ["3"]
    assert [(d["channel"], d["state"]) for d in story["deliveries"]] == [("log", "DELIVERED")]

    page = http.get("/aldebaran/deliveries/explain", params={"alert_id": order1["alert_id"]})
    assert page.status_code == 200, page.text[:500]
    rows = page.text.replace(" class=n", "")
    for e in ("1", "2", "3"):
        assert f"<tr><td>{held[e][0]}</td><td>{held[e][1]}</td><td><code>{e}</code></td>" in rows


def test_the_demo_stop_leaves_no_auditor_or_dispatcher(demo):
    stopped = aldebaran("demo", "--stop", timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    from aldebaran.platform.supervisor import load_state, settings_with, state_key
    from aldebaran.storage.store import open_store

    state, _ = load_state(open_store(), state_key(settings_with(None), "auditor"))
    submit = state.get("submit") or {}
    assert submit.get("pid") and not pid_alive(submit["pid"], submit.get("start_ticks"))
