"""The hand-over from the auditor's submit operator to its detached spark-submit process
(aldebaran.platform.detached_submit): what travels in the environment, and the deploy mode's source."""

from __future__ import annotations

import json

import pytest

from aldebaran.platform import detached_submit


def test_the_spec_carries_the_application_the_hook_arguments_and_the_spark_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    env = detached_submit.spec_env("/app/auditor.py", {"conn_id": "spark_default", "jars": "/j/a.jar",
                                                        "application_args": ["--checkpoint", "s3a://b/c"]})
    spec = json.loads(env[detached_submit.SPEC_VAR])
    assert spec == {"application": "/app/auditor.py",
                    "hook": {"conn_id": "spark_default", "jars": "/j/a.jar",
                             "application_args": ["--checkpoint", "s3a://b/c"]}}
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "local[2]"
    # A task's children inherit Airflow's blocked DB URL; this process gets an empty in-memory DB instead.
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == "sqlite://"


def test_the_detached_process_imports_the_provider_under_a_tasks_blocked_db_url(tmp_path):
    """What a real task's child sees: Airflow 3's supervisor sets the DB URL to one that cannot be parsed."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "AIRFLOW_HOME": str(tmp_path),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "airflow-db-not-allowed:///", **detached_submit.NO_METADATA_DB}
    code = "from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


def test_an_argument_the_hook_does_not_take_is_refused_named():
    with pytest.raises(ValueError, match="not SparkSubmitHook arguments: decision"):
        detached_submit.spec_env("/app.py", {"decision": {}})


@pytest.mark.parametrize("args, extra, expected", [
    ({}, {"deploy-mode": "cluster"}, "cluster"),
    ({"deploy_mode": "client"}, {"deploy-mode": "cluster"}, "client"),
    ({}, {}, None),
])
def test_the_deploy_mode_is_the_operators_else_the_connections(monkeypatch, args, extra, expected):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn",
                                                                 "extra": extra}))
    assert detached_submit.deploy_mode(args) == expected
