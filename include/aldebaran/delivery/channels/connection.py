"""Channel connections: channel ``<name>`` is defined by the Airflow connection ``aldebaran_<name>``,
inside an Airflow task as Airflow resolves it, outside Airflow the env var
``AIRFLOW_CONN_ALDEBARAN_<NAME>`` (channels/sources.py).

The parser and its typed accessors (errors name the source and the field, never a value) are the
product's one for every connection: :mod:`aldebaran.storage.connections`; this module adds the channels' naming.
"""

from __future__ import annotations

import re

from aldebaran.storage.connections import ENV_PREFIX, SECRET_KEY_PATTERN, Connection, env_var, scrub

__all__ = ["CONN_ID_PREFIX", "ENV_PREFIX", "NAME_PATTERN", "SECRET_KEY_PATTERN", "Connection", "conn_env_var",
           "conn_id", "scrub"]

CONN_ID_PREFIX = "aldebaran_"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def conn_id(name: str) -> str:
    """The Airflow connection id of channel `name`: ``aldebaran_<name>``."""
    return CONN_ID_PREFIX + name


def conn_env_var(name: str) -> str:
    """The env var holding channel `name`'s connection outside Airflow: ``AIRFLOW_CONN_ALDEBARAN_<NAME>``."""
    return env_var(conn_id(name))
