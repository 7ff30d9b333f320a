"""The supervisor against real MinIO, without Spark: an auditor that never ran is to be started; a
page goes out once per incident per channel through the delivery ledger (log channel)."""

from __future__ import annotations

import json

import pytest

from aldebaran.platform import supervisor
from aldebaran.platform.settings import SupervisorSettings


@pytest.fixture
def env(store, s3_prefix, tmp_path, monkeypatch, unique):
    pages = tmp_path / "pages.jsonl"
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_LOG", json.dumps({"conn_type": "log", "extra": {"path": str(pages)}}))
    monkeypatch.setenv("ALDEBARAN_DELIVERY_PREFIX", f"{s3_prefix}/deliveries")
    monkeypatch.setenv("ALDEBARAN_SUPERVISOR_STATE_PREFIX", f"{s3_prefix}/supervisor")
    monkeypatch.setenv("ALDEBARAN_AUDIT_QUERY_NAME", f"never-{unique}")
    monkeypatch.setenv("ALDEBARAN_AUDIT_CHECKPOINT", f"s3a://aldebaran/{s3_prefix}/checkpoint")
    return pages


def test_an_auditor_that_never_ran_is_to_be_started(env, store, unique):
    decision = supervisor.assess()
    assert decision["action"] == supervisor.RESTART and not decision["healthy"] and not decision["page"]
    assert any(p.startswith("no auditor holds the checkpoint lease") for p in decision["problems"])
    assert any(p.startswith("no heartbeat at") for p in decision["problems"])
    assert decision["auditor_args"][:4] == ["--checkpoint", decision["checkpoint"], "--query-name", f"never-{unique}"]
    state = store.get(supervisor.state_key(SupervisorSettings(), f"never-{unique}")).json()
    assert state["incident"]["restarts"] == 0 and state["last_assessment"]["action"] == supervisor.RESTART


def test_a_page_goes_out_once_per_incident_and_channel(env, store, unique):
    first = supervisor.assess()  # opens the incident
    decision = {**first, "page": True, "incident": {**first["incident"], "restarts": 3}}
    result = supervisor.page_if_needed(decision)
    assert result["paged"] and result["sent"] == {"log": 1}
    lines = [json.loads(line) for line in env.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["alert"]["kind"] == "AUDITOR_DOWN"
    assert f"never-{unique}" in lines[0]["alert"]["message"] and "restarted 3 times" in lines[0]["alert"]["message"]
    state = store.get(supervisor.state_key(SupervisorSettings(), f"never-{unique}")).json()
    assert state["incident"]["paged"] is True

    again = supervisor.page_if_needed(decision)
    assert again["sent"] == {} and again["already"] == {"log": 1}
    assert len(env.read_text().splitlines()) == 1
    assert supervisor.page_if_needed({**decision, "page": False}) == {"paged": False}
