"""Where channel connections and the channel list come from outside Airflow (the CLI, the streaming
dispatchers): the environment only, and Airflow is never imported. Inside a task see
tests/dags/test_alert_dispatch_airflow_connection.py. No services."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aldebaran.delivery.channels import Connection, channel_names, configured_channels, sources
from aldebaran.exceptions import ConfigError

HOOK = {"conn_type": "http", "host": "hooks.example.com", "port": 8443, "schema": "https",
        "password": "p@ss:w/rd-Not-Printed", "extra": {"endpoint": "/in", "batch": 20}}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("ALDEBARAN_CHANNELS", "AIRFLOW_CONN_ALDEBARAN_HOOK", "AIRFLOW_VAR_ALDEBARAN_CHANNELS"):
        monkeypatch.delenv(name, raising=False)


def test_outside_airflow_nothing_is_imported_and_the_env_is_read():
    code = ("import sys; from aldebaran.delivery.channels import sources, configured_channels; "
            "assert not sources.in_airflow_task(); "
            "print([c.name for c in configured_channels()], 'airflow' in sys.modules)")
    env = {"PATH": "/usr/bin", "ALDEBARAN_CHANNELS": "log,hook", "AIRFLOW_CONN_ALDEBARAN_HOOK": json.dumps(HOOK)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['log', 'hook'] False"


def test_the_channel_list_falls_back_to_the_setting_then_log(monkeypatch):
    assert sources.channels_setting() == ("ALDEBARAN_CHANNELS", "log")
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log, hook")
    assert channel_names() == ["log", "hook"]
    # The Airflow Variable's env form is Airflow's business: outside a task only the setting counts.
    monkeypatch.setenv("AIRFLOW_VAR_ALDEBARAN_CHANNELS", "other")
    assert channel_names() == ["log", "hook"]


def test_a_missing_connection_names_the_env_var(monkeypatch):
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "hook")
    with pytest.raises(ConfigError, match=r"^ALDEBARAN_CHANNELS names 'hook', but AIRFLOW_CONN_ALDEBARAN_HOOK is not set"):
        configured_channels()
    assert sources.connections_env(["hook"]) == {}


def test_connections_env_hands_a_child_the_same_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_HOOK", json.dumps(HOOK))
    env = sources.connections_env(["hook", "log"])
    assert set(env) == {"AIRFLOW_CONN_ALDEBARAN_HOOK"}  # log has no connection: nothing to hand on
    again = Connection.parse("child", env["AIRFLOW_CONN_ALDEBARAN_HOOK"])
    original = Connection.parse("parent", json.dumps(HOOK))
    assert (again.conn_type, again.host, again.port, again.schema, again.extra) == \
        ("http", "hooks.example.com", 8443, "https", {"endpoint": "/in", "batch": 20})
    assert again.password.get_secret_value() == original.password.get_secret_value() == HOOK["password"]


def test_to_json_leaves_out_empty_fields():
    conn = Connection.parse("x", json.dumps({"conn_type": "log"}))
    assert json.loads(conn.to_json()) == {"conn_type": "log"}


def test_from_airflow_rejects_a_malformed_extra_naming_it():
    class AirflowConn:  # the attributes of Airflow's Connection, as the Task SDK returns it
        conn_id, conn_type, host, port, login, password, schema = "aldebaran_hook", "http", "h", None, None, None, None
        extra = '{"endpoint": '

    with pytest.raises(ConfigError, match=r"^Airflow connection aldebaran_hook: field extra is not valid JSON"):
        Connection.from_airflow(AirflowConn())
