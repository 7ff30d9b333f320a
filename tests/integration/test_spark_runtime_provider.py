"""The Spark 4.3 job runtime through the Spark provider (issue 19, item 1): the provider's SparkSubmitHook, run
from the control venv (whose own pyspark is 4.2), submits a job that runs on Spark 4.3 when it is handed
``aldebaran.lanes.launch.operator_env()``. Needs `make setup`'s runtime; nothing is skipped without it."""

from __future__ import annotations

import json
import logging

import pyspark

from aldebaran.lanes.launch import operator_env

JOB = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("runtime-probe").getOrCreate()
print("RUNTIME", spark.version, sys.executable, spark.range(5).count(), flush=True)
spark.stop()
"""


def test_the_providers_hook_submits_a_job_to_the_4_3_runtime(tmp_path, monkeypatch, caplog, capfd):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    assert pyspark.__version__.startswith("4.2")  # the control venv's own
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PROBE", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    app = tmp_path / "probe.py"
    app.write_text(JOB)
    env = operator_env()
    hook = SparkSubmitHook(conn_id="spark_probe", env_vars=env, name="runtime-probe")
    with caplog.at_level(logging.INFO):
        hook.submit(application=str(app))
    # The hook logs each line of spark-submit's output: through logging, or Airflow's structlog on stdout.
    logged = [r.getMessage() for r in caplog.records] + capfd.readouterr().out.splitlines()
    lines = [line for line in logged if "RUNTIME " in line]
    assert lines, "the job printed nothing the hook logged"
    version, python, count = lines[-1].split("RUNTIME ", 1)[1].split()[:3]
    assert version.startswith("4.3.") and count == "5"
    assert python == env["PYSPARK_PYTHON"]
