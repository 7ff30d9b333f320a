"""AuditorSubmitOperator: the Spark provider's SparkSubmitOperator, for a job that must outlive its task.

What the provider offers (apache-spark 6.3.4 on Airflow 3.3): ``SparkSubmitOperator`` builds the
spark-submit command from the ``spark_default`` connection (master, deploy mode, binary) and its own
arguments, then — in client mode — runs spark-submit and blocks until the application ends; in
cluster mode (standalone driver, YARN with ``yarn_track_via_rm_api``, Kubernetes with
``track_driver_via_k8s_api``) it is *resumable*: ``durable=True`` persists the driver/application id
in the task state store, so a retried task re-attaches to the running driver instead of submitting
a second one, and polls it until it finishes.

That is the right shape for bounded jobs (the replay DAG uses the operator as it is). A streaming
auditor never finishes, though, and a task that blocks on it forever cannot also check its health, so
this subclass keeps the provider's command building (connection, conf, jars, masking) and replaces
only the waiting, through the provider's public API alone:

- client mode (``local[*]``, or ``spark://`` with the driver here — Spark standalone cannot run a
  Python application's driver in cluster mode): a process of its own session calls the hook's
  ``submit()`` and blocks in the task's place (:mod:`aldebaran.platform.detached_submit`); its pid and
  log file are recorded in the supervisor state;
- cluster mode (YARN / Kubernetes): the operator's own ``submit_job`` submits and returns the
  driver/application id without waiting; that id is recorded.

In both cases the task then waits until the new auditor holds the checkpoint lease and its query has
started (its heartbeat), and fails with the tail of the spark-submit output if it exits first.
Health afterwards is judged by the next supervisor run from the lease and the heartbeat, which work
the same wherever the driver runs.
"""

from __future__ import annotations

import os
import time
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from aldebaran.runtime import paths

AUDITOR_APP = str(paths.ROOT / "spark_apps" / "auditor.py")


class AuditorSubmitOperator(SparkSubmitOperator):
    """Submit the streaming auditor described by `decision` (the supervisor's assess output) and
    return once it has started. `decision` is templated, so an XComArg may be passed."""

    template_fields = (*SparkSubmitOperator.template_fields, "decision")
    ui_color = "#f4a460"

    def __init__(self, *, decision: Any, application: str = AUDITOR_APP, name: str = "aldebaran-auditor",
                 durable: bool = False, **kwargs: Any) -> None:
        # durable=False: the provider's resumable path (re-attach on retry) is for drivers this task
        # waits on; here a retry is a new decision of the supervisor, never a blind re-attach.
        from aldebaran.platform.detached_submit import HOOK_ARGS

        kwargs.setdefault("conn_id", "spark_default")
        super().__init__(application=application, name=name, durable=durable, **kwargs)
        self.decision = decision
        # The hook's arguments as given, for the detached launch (no reading of the operator's private fields).
        self.hook_args = {"name": name, **{k: v for k, v in kwargs.items() if k in HOOK_ARGS}}

    def execute(self, context: Any) -> dict:
        from aldebaran.platform import auditor_submit, detached_submit

        decision = self.decision
        hook_args = self._hook_args(list(decision["auditor_args"]))
        submitted_at = time.time()
        if detached_submit.deploy_mode(hook_args) == "cluster":
            # The provider's resumable-operator API: submits and returns the driver/application id.
            self.application_args, self.jars, self.conf = (hook_args["application_args"], hook_args["jars"],
                                                           hook_args["conf"])
            external_id = self.submit_job(context)
            auditor_submit.record_submission(decision, None, None, submitted_at, external_id=external_id)
            return auditor_submit.wait_started(decision, submitted_at)
        proc, log_path = self._launch(hook_args, decision["query_name"])
        auditor_submit.record_submission(decision, proc.pid, str(log_path), submitted_at)
        return auditor_submit.wait_started(decision, submitted_at, proc, log_path)

    def _hook_args(self, application_args: list[str]) -> dict:
        from aldebaran.runtime import spark as sparkmod
        from aldebaran.platform import detached_submit

        jars = self.hook_args.get("jars") or ",".join(
            sparkmod.connector_jars(s3a=self.decision["checkpoint"].startswith("s3a://")))
        # The JIT flag merged into this host's spark-defaults JVM options (read here, never at parse time).
        conf = sparkmod.submit_conf(self.hook_args.get("conf"))
        out = {**self.hook_args, "conf": conf, "jars": jars, "application_args": application_args}
        # The packed runtime (ALDEBARAN_SPARK_RUNTIME_ARCHIVE, a cluster master): --archives and the Pythons.
        packed = sparkmod.submit_runtime(detached_submit.master(out), detached_submit.deploy_mode(out),
                                         self.hook_args.get("archives"))
        if packed:
            out["archives"] = packed["archives"]
            out["conf"] = {**packed["conf"], **conf}  # a Python the caller named wins
        return out

    def _launch(self, hook_args: dict, log_name: str):
        """Client mode: the provider's hook runs spark-submit in a process of its own session
        (:mod:`aldebaran.platform.detached_submit`), which outlives this task."""
        import sys

        from aldebaran.runtime import spark as sparkmod
        from aldebaran.kafka.conn import connection_env
        from aldebaran.platform import auditor_submit, detached_submit, executors

        executors.check(f"auditor {log_name} (client deploy mode)")

        # The driver runs outside Airflow: it gets the platform's Kafka connection as Airflow resolved it.
        env = {**sparkmod.spark_env(master=detached_submit.master(hook_args)), **connection_env(),
               **detached_submit.spec_env(self.application, hook_args)}
        # The pyspark wheel's spark-submit sits next to this interpreter.
        env["PATH"] = f"{paths.venv_bin('spark-submit').parent}{os.pathsep}{env.get('PATH', '')}"
        proc, log_path = auditor_submit.launch([sys.executable, "-m", "aldebaran.platform.detached_submit"],
                                               env, log_name)
        self.log.info("spark-submit started detached through the provider's hook: pid %d, log %s",
                      proc.pid, log_path)
        return proc, log_path

    def on_kill(self) -> None:
        # Killing this task must not kill the auditor it started: the supervisor decides about that.
        self.log.info("task killed; the auditor it submitted keeps running (the supervisor watches it)")


class StandbySubmitOperator(AuditorSubmitOperator):
    """Launch the warm standby of the auditor described by `decision` (``--standby true``, same checkpoint
    and settings) and return once it waits on the checkpoint lease: the supervisor's standby slot
    (:mod:`aldebaran.platform.standby_slot`). Client deploy mode only — the slot tells a takeover by the
    standby's spark-submit session, which must run on this host."""

    def __init__(self, *, name: str = "aldebaran-auditor-standby", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)

    def execute(self, context: Any) -> dict:
        from aldebaran.exceptions import AuditorError
        from aldebaran.platform import detached_submit, standby_slot

        decision = self.decision
        hook_args = self._hook_args([*decision["auditor_args"], "--standby", "true"])
        if detached_submit.deploy_mode(hook_args) == "cluster":
            raise AuditorError("ALDEBARAN_SUPERVISOR_STANDBY needs spark_default in client deploy mode: the standby "
                               "slot follows the standby by its spark-submit session on this host")
        launched_at = time.time()
        proc, log_path = self._launch(hook_args, f"{decision['query_name']}-standby")
        standby_slot.record(decision, proc.pid, str(log_path), launched_at)
        return standby_slot.wait_ready(decision, proc, log_path, launched_at)
