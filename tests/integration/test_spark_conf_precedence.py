"""Spark settings belong to their users: under a real spark-submit, a ``--conf`` and a ``spark-defaults.conf``
value both win over the platform's defaults, the defaults fill what the user left unset, the connector jars
are added to the user's ``spark.jars``, and a value the platform cannot run with fails at start, named."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from aldebaran.runtime import paths
from aldebaran.runtime import spark as sparkmod

pytestmark = pytest.mark.integration

APP = Path(__file__).with_name("spark_conf_app.py")


def submit(tmp_path: Path, defaults: str, *conf: str) -> tuple[subprocess.CompletedProcess, Path]:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(defaults)
    out = tmp_path / "conf.json"
    env = {**sparkmod.spark_env(), "SPARK_CONF_DIR": str(conf_dir),
           "PYTHONPATH": str(paths.ROOT / "include")}
    argv = [sparkmod.spark_submit(), "--master", "local[1]"]
    for item in conf:
        argv += ["--conf", item]
    proc = subprocess.run([*argv, str(APP), str(out)], env=env, capture_output=True, text=True, timeout=300)
    return proc, out


def test_submit_conf_and_spark_defaults_win_over_the_platform_defaults(tmp_path):
    proc, out = submit(tmp_path, "# the user's cluster defaults\nspark.python.worker.reuse  false\n"
                                 "spark.jars /opt/site/udfs.jar\n",
                       "spark.sql.session.timeZone=Asia/Tokyo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    conf = json.loads(out.read_text())
    assert conf["spark.sql.session.timeZone"] == "Asia/Tokyo"            # --conf over the default "UTC"
    assert conf["runtime:spark.sql.session.timeZone"] == "Asia/Tokyo"
    assert conf["spark.python.worker.reuse"] == "false"                  # spark-defaults over the default "true"
    assert conf["spark.ui.showConsoleProgress"] == "false"               # a default the user left unset
    assert conf["spark.sql.adaptive.coalescePartitions.enabled"] == "false"
    jars = conf["spark.jars"].split(",")
    assert jars[0].endswith("/opt/site/udfs.jar")                        # the user's jar kept, first
    assert any("spark-sql-kafka" in j for j in jars)                     # the connector added
    assert conf["spark.driver.host"] == "127.0.0.1"                      # local master: pinned


def test_a_setting_the_platform_cannot_run_with_fails_at_start_named(tmp_path):
    proc, _ = submit(tmp_path, "spark.sql.adaptive.coalescePartitions.enabled true\n")
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr  # the driver's traceback: spark-submit prints it on stdout
    assert "ConfigError: Spark setting spark.sql.adaptive.coalescePartitions.enabled='true'" in output
    assert "Aldebaran needs 'false'" in output
