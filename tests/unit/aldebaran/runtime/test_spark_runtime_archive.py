"""A Spark job a cluster can run: the packed runtime `make dist` builds (ALDEBARAN_SPARK_RUNTIME_ARCHIVE) in
the session's conf and in the auditor's spark-submit, and SPARK_LOCAL_IP only where the master is local.
The run itself, on a worker that cannot import aldebaran: tests/integration/test_packed_runtime.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from aldebaran.runtime import paths
from aldebaran.runtime import spark as sparkmod
from aldebaran.exceptions import ConfigError

CLUSTER = "spark://10.0.0.5:7077"


@pytest.fixture
def archive(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "aldebaran-runtime-py3.11.tar.gz"
    path.write_bytes(b"")  # only its path matters here
    monkeypatch.setenv("ALDEBARAN_SPARK_RUNTIME_ARCHIVE", str(path))
    return path


@pytest.mark.parametrize("master, pinned", [("local[2]", True), ("local", True), (CLUSTER, False),
                                            ("yarn", False)])
def test_spark_local_ip_is_set_only_for_a_local_master(master, pinned, monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    env = sparkmod.spark_env(master=master)
    assert env.get("SPARK_LOCAL_IP") == ("127.0.0.1" if pinned else None)


def test_without_a_master_spark_local_ip_follows_the_sessions_master_setting(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.setenv("ALDEBARAN_SPARK_MASTER", CLUSTER)
    assert "SPARK_LOCAL_IP" not in sparkmod.spark_env()
    monkeypatch.setenv("ALDEBARAN_SPARK_MASTER", "local[2]")
    assert sparkmod.spark_env()["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_unset_the_runtime_archive_changes_nothing(monkeypatch):
    monkeypatch.delenv("ALDEBARAN_SPARK_RUNTIME_ARCHIVE", raising=False)
    assert sparkmod.runtime_archive(CLUSTER) is None
    assert sparkmod.submit_runtime(CLUSTER, "client") == {}
    assert "spark.archives" not in sparkmod.base_conf(master=CLUSTER)


def test_a_cluster_session_ships_the_archive_and_a_local_one_does_not(archive):
    assert sparkmod.base_conf(master=CLUSTER)["spark.archives"] == f"{archive}#env"
    assert "spark.archives" not in sparkmod.base_conf(master="local[2]")
    assert sparkmod.runtime_archive("local[*]") is None


def test_a_missing_archive_fails_at_start_named(tmp_path, monkeypatch):
    monkeypatch.setenv("ALDEBARAN_SPARK_RUNTIME_ARCHIVE", str(tmp_path / "absent.tar.gz"))
    with pytest.raises(ConfigError, match="ALDEBARAN_SPARK_RUNTIME_ARCHIVE"):
        sparkmod.runtime_archive(CLUSTER)


def test_the_users_archives_are_kept_and_ours_added_once(archive):
    user = {"spark.archives": "/site/models.tar.gz#models"}
    out = sparkmod.resolve_conf(sparkmod.base_conf(master=CLUSTER), user, {})
    assert out["spark.archives"] == f"/site/models.tar.gz#models,{archive}#env"
    ours = sparkmod.submit_runtime(CLUSTER, "client", f"{archive}#env")["archives"]
    assert ours == f"{archive}#env"


@pytest.mark.parametrize("deploy_mode, driver_python", [("client", sys.executable), (None, sys.executable),
                                                        ("cluster", "./env/bin/python")])
def test_the_auditors_submit_names_the_executors_python_and_keeps_the_drivers(archive, monkeypatch, deploy_mode,
                                                                              driver_python):
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    out = sparkmod.submit_runtime(CLUSTER, deploy_mode)
    assert out["archives"] == f"{archive}#env"
    assert out["conf"] == {"spark.pyspark.python": "./env/bin/python", "spark.pyspark.driver.python": driver_python}


def test_the_spark_submit_command_line_built_from_the_setting(archive, monkeypatch):
    """The provider's hook builds the auditor's spark-submit from the operator's arguments: with the setting
    and a cluster connection it carries --archives and both Pythons."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from aldebaran.platform.detached_submit import HOOK_ARGS
    from aldebaran.platform.spark_submit import AUDITOR_APP, AuditorSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077, "extra": {"deploy-mode": "client"}}))
    op = AuditorSubmitOperator(task_id="auditor", decision={"checkpoint": "/tmp/ckpt"})
    hook_args = op._hook_args(["--checkpoint", "/tmp/ckpt"])
    hook = SparkSubmitHook(**{k: v for k, v in hook_args.items() if k in HOOK_ARGS and k != "application_args"},
                           application_args=hook_args["application_args"])
    line = " ".join(hook._build_spark_submit_command(AUDITOR_APP))
    assert "--master spark://10.0.0.5:7077" in line
    assert f"--archives {archive}#env" in line
    assert "--conf spark.pyspark.python=./env/bin/python" in line
    assert re.search(r"--conf spark\.pyspark\.driver\.python=\S*python", line)
    assert "./env/bin/python" not in line.split("spark.pyspark.driver.python=")[1].split()[0]


def test_the_auditors_submit_without_the_setting_has_no_archive(monkeypatch):
    from aldebaran.platform.spark_submit import AuditorSubmitOperator

    monkeypatch.delenv("ALDEBARAN_SPARK_RUNTIME_ARCHIVE", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "spark://h"}))
    hook_args = AuditorSubmitOperator(task_id="auditor", decision={"checkpoint": "/tmp/c"})._hook_args([])
    assert "archives" not in hook_args and "spark.pyspark.python" not in hook_args["conf"]


def test_every_executor_requirement_is_pinned_by_the_constraints():
    """setup/dist/executor.txt names packages; their versions come from constraints.txt (-c): a name the
    constraints do not pin would be resolved afresh on each `make dist`."""
    pinned = {re.split(r"==", line)[0].strip().lower()
              for line in (paths.ROOT / "constraints.txt").read_text().splitlines() if "==" in line}
    lines = [ln.split("#")[0].strip() for ln in (paths.ROOT / "setup" / "dist" / "executor.txt").read_text().splitlines()]
    names = [ln.lower() for ln in lines if ln and not ln.startswith("-")]
    assert "-c ../../constraints.txt" in lines
    assert {"pyspark-client", "pyarrow", "pydantic", "msgspec", "confluent-kafka"} <= set(names)
    assert [n for n in names if n not in pinned] == []
