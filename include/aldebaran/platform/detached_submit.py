"""spark-submit for a job that outlives its Airflow task, built by the Spark provider's public API only.

The provider's ``SparkSubmitHook`` builds the command from the Spark connection and the operator's
arguments (master, deploy mode, conf, jars, Kerberos, masking), and its public ``submit()`` runs
spark-submit and blocks until it exits. A streaming auditor never exits, and the task must return once
it started. So the task starts *this* module detached, in a session of its own
(:func:`aldebaran.platform.auditor_submit.launch`), and this process calls ``hook.submit()`` and blocks
in the task's place for the auditor's life: spark-submit is its child, in its process group, and its
output (the hook logs every line) goes to the launch's log file. The supervisor follows and stops this
process like it followed spark-submit itself (pid, session, process group).

The hook's arguments travel in :data:`SPEC_VAR` (JSON; an environment variable rather than argv, so
that ``ps`` does not show them), the Spark connection as ``AIRFLOW_CONN_<CONN_ID>`` the way a task hands
any connection to a process it starts (:func:`aldebaran.storage.connections.connections_env`).

Cost: one more Python process per launched auditor, importing the provider (a few seconds before
spark-submit starts, ~130 MB resident). Usage (what the operator runs)::

    ALDEBARAN_SUBMIT_SPEC='{"application": "...", "hook": {...}}' python -m aldebaran.platform.detached_submit
"""

from __future__ import annotations

import json
import logging
import os
import sys

from aldebaran.storage import connections

SPEC_VAR = "ALDEBARAN_SUBMIT_SPEC"

# An Airflow task's process blocks the metadata DB for its children (Airflow 3's supervisor sets the URL to
# "airflow-db-not-allowed:///", which cannot even be parsed when this process imports Airflow). This
# process needs no DB — the Spark connection comes in its environment — so it gets an empty in-memory one.
NO_METADATA_DB = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sqlite://", "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "sqlite://"}

# SparkSubmitHook's arguments that SparkSubmitOperator takes under the same names.
HOOK_ARGS = ("conf", "conn_id", "files", "py_files", "archives", "driver_class_path", "jars", "java_class",
             "packages", "exclude_packages", "repositories", "total_executor_cores", "executor_cores",
             "executor_memory", "driver_memory", "keytab", "principal", "proxy_user", "name", "num_executors",
             "application_args", "env_vars", "verbose", "spark_binary", "properties_file", "yarn_queue",
             "deploy_mode")


def spec_env(application: str, hook_args: dict) -> dict[str, str]:
    """The environment entries that tell :func:`main` what to submit, with the Spark connection as this
    process resolved it (inside a task: Airflow's)."""
    unknown = sorted(set(hook_args) - set(HOOK_ARGS))
    if unknown:
        raise ValueError(f"not SparkSubmitHook arguments: {', '.join(unknown)}")
    conn_id = hook_args.get("conn_id") or "spark_default"
    return {SPEC_VAR: json.dumps({"application": application, "hook": hook_args}),
            **connections.connections_env([conn_id]), **NO_METADATA_DB}


def deploy_mode(hook_args: dict) -> str | None:
    """The deploy mode the hook will use: the operator's argument, else the Spark connection's extra."""
    if hook_args.get("deploy_mode"):
        return hook_args["deploy_mode"]
    conn = connections.lookup(hook_args.get("conn_id") or "spark_default")
    return conn.extra.get("deploy-mode") if conn is not None else None


def master(hook_args: dict) -> str:
    """The master the hook will submit to: the Spark connection's host, else ALDEBARAN_SPARK_MASTER (from which
    `aldebaran services up` derives spark_default)."""
    conn = connections.lookup(hook_args.get("conn_id") or "spark_default")
    if conn is not None and conn.host:
        return conn.host
    from aldebaran.settings import SparkSettings, load

    return load(SparkSettings).master


def main() -> int:
    # A relay, not aldebaran.runtime.logs: the hook logs each line of spark-submit's output, which already carries
    # its time (the auditor's lines: aldebaran.runtime.logs; Spark's: aldebaran.runtime.spark.SPARK_LOG4J2); a prefix of
    # ours would double it (and wrap a JSON line in text).
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    # Not configuration: the operator's hand-over to this process (module docstring).
    spec = json.loads(os.environ[SPEC_VAR])
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    SparkSubmitHook(**spec["hook"]).submit(spec["application"])  # blocks while the job runs; raises if it fails
    return 0


if __name__ == "__main__":
    sys.exit(main())
