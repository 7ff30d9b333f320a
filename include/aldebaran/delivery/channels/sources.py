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
seconds and ~100 MB per process). The connection lookup is the product's one for every connection
(:mod:`aldebaran.storage.connections`); this module names the channels' connections and reads their list.
"""

from __future__ import annotations

from collections.abc import Mapping

from aldebaran.storage import connections
from aldebaran.storage.connections import Connection, in_airflow_task
from aldebaran.delivery.channels.connection import conn_id
from aldebaran.delivery.settings import ChannelSettings
from aldebaran.settings import load

__all__ = ["CHANNELS_SETTING", "CHANNELS_VARIABLE", "airflow_connection", "channels_setting", "connections_env",
           "env_connection", "in_airflow_task", "lookup", "missing"]

CHANNELS_VARIABLE = "aldebaran_channels"
CHANNELS_SETTING = "ALDEBARAN_CHANNELS"


def env_connection(name: str, environ: Mapping[str, str] | None = None) -> Connection | None:
    """Channel `name`'s connection from ``AIRFLOW_CONN_ALDEBARAN_<NAME>``, or None if unset."""
    return connections.from_env(conn_id(name), environ)


def airflow_connection(name: str) -> Connection | None:
    """Channel `name`'s connection as Airflow resolves ``aldebaran_<name>``, or None if it has none."""
    return connections.from_airflow(conn_id(name))


def lookup(name: str) -> Connection | None:
    """Channel `name`'s connection from wherever this process runs (see the module docstring)."""
    return connections.lookup(conn_id(name))


def missing(name: str) -> str:
    """Where channel `name`'s connection was looked for, for the error that it is not there."""
    return connections.missing(conn_id(name))


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
    return connections.connections_env(conn_id(name) for name in names)
