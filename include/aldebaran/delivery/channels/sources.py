"""Where the channel list and each channel's connection come from.

Inside an Airflow task (a DAG's task, ``dag.test()``): through Airflow itself, so a connection or a
variable created in the UI, through the REST API, as ``AIRFLOW_CONN_*`` / ``AIRFLOW_VAR_*`` or in a
secrets backend is the one used, with Airflow's own precedence (secrets backend, environment, then
the metadata database).

- channel ``<name>``: ``BaseHook.get_connection("aldebaran_<name>")`` (the Task SDK);
- the channel list: the Airflow Variable ``aldebaran_channels`` (comma list) if it exists, else the
  ALDEBARAN_CHANNELS setting, else ``log``.

Outside Airflow (the ``aldebaran`` CLI, the streaming dispatchers, the lab): the environment only,
``AIRFLOW_CONN_ALDEBARAN_<NAME>`` and ALDEBARAN_CHANNELS, and Airflow is never imported (it costs
seconds and ~100 MB per process, see connection.py).

"Inside an Airflow task" is Airflow's own test (``ensure_secrets_backend_loaded``): the Task SDK's
task runner is loaded and holds its channel to the supervisor (``SUPERVISOR_COMMS``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from aldebaran.delivery.channels.connection import Connection, conn_env_var, conn_id
from aldebaran.delivery.settings import ChannelSettings
from aldebaran.settings import load

CHANNELS_VARIABLE = "aldebaran_channels"
CHANNELS_SETTING = "ALDEBARAN_CHANNELS"
_TASK_RUNNER = "airflow.sdk.execution_time.task_runner"


def in_airflow_task() -> bool:
    """True inside an Airflow task process (or ``dag.test()``), without importing Airflow."""
    runner = sys.modules.get(_TASK_RUNNER)
    return runner is not None and getattr(runner, "SUPERVISOR_COMMS", None) is not None


def env_connection(name: str, environ: Mapping[str, str] | None = None) -> Connection | None:
    """Channel `name`'s connection from ``AIRFLOW_CONN_ALDEBARAN_<NAME>``, or None if unset."""
    # Airflow's own connection variables, one per channel and named after it (no settings class can
    # list them), read in Airflow's format as Airflow would: not configuration of this package's own.
    env = os.environ if environ is None else environ
    var = conn_env_var(name)
    raw = env.get(var)
    if raw is None or not raw.strip():
        return None
    return Connection.parse(var, raw)


def airflow_connection(name: str) -> Connection | None:
    """Channel `name`'s connection as Airflow resolves ``aldebaran_<name>``, or None if it has none."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id(name))
    except AirflowNotFoundException:
        return None
    return Connection.from_airflow(conn)


def lookup(name: str) -> Connection | None:
    """Channel `name`'s connection from wherever this process runs (see the module docstring)."""
    return airflow_connection(name) if in_airflow_task() else env_connection(name)


def missing(name: str) -> str:
    """Where channel `name`'s connection was looked for, for the error that it is not there."""
    if in_airflow_task():
        return (f"the Airflow connection {conn_id(name)} is not defined (Airflow UI or REST API, "
                f"{conn_env_var(name)}, or a secrets backend)")
    return f"{conn_env_var(name)} is not set"


def channels_setting(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(source, raw comma list) of the configured channel names: inside an Airflow task the Variable
    ``aldebaran_channels`` when it exists; else ALDEBARAN_CHANNELS; else ``log``."""
    if environ is None and in_airflow_task():
        from airflow.sdk import Variable

        value = Variable.get(CHANNELS_VARIABLE, default=None)
        if value is not None:
            return f"Airflow Variable {CHANNELS_VARIABLE}", str(value)
    if environ is not None:  # a given environment (e.g. docker compose's, checked in a test)
        return CHANNELS_SETTING, environ.get(CHANNELS_SETTING, ChannelSettings.model_fields["channels"].default)
    return CHANNELS_SETTING, load(ChannelSettings).channels


def connections_env(names: list[str]) -> dict[str, str]:
    """``AIRFLOW_CONN_ALDEBARAN_<NAME>`` for each of `names` that has a connection where this process
    looks: how a task hands the connections Airflow resolved to a process it starts outside Airflow
    (a streaming dispatcher), which reads only its environment."""
    out = {}
    for name in names:
        conn = lookup(name)
        if conn is not None:
            out[conn_env_var(name)] = conn.to_json()
    return out
