"""Which channels, built from what: ALDEBARAN_CHANNELS names them, one connection per channel.

ALDEBARAN_CHANNELS is a comma list of channel names (default ``log``). Channel ``<name>`` is defined
by the Airflow connection ``aldebaran_<name>``, which outside Airflow is the env var
``AIRFLOW_CONN_ALDEBARAN_<NAME>`` in Airflow's JSON or URI form, e.g.
``{"conn_type": "http", "host": "hooks.example.com", "schema": "https", "password": "<secret>",
"extra": {"endpoint": "/aldebaran", "timeout": 10}}``. The channel kind is the connection's conn_type
(looked up in the registry: http → webhook, smtp → email, kafka, sms, log, ...), or the channel's
name when that is a kind. .env.example shows one definition per kind. Errors name the env var and
the field, never a secret.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from aldebaran.delivery.channels.base import CONN_TYPES, KINDS, Channel
from aldebaran.delivery.channels.connection import NAME_PATTERN, Connection, conn_env_var, conn_id
from aldebaran.delivery.channels.log import LogChannel
from aldebaran.exceptions import ConfigError


def _choices() -> str:
    return f"one of {', '.join(sorted(CONN_TYPES))} (registered kinds: {', '.join(sorted(KINDS))})"


def channel_from_connection(name: str, conn: Connection | None) -> Channel:
    """Build channel `name` from its connection (None: only the built-in `log` needs none)."""
    if conn is None:
        if name == "log":
            return LogChannel(name)
        var = conn_env_var(name)
        if name in KINDS:
            raise ConfigError(f"{var} is not set: the {name} channel needs a connection "
                              f"(Airflow connection {conn_id(name)}; see .env.example)")
        raise ConfigError(f"ALDEBARAN_CHANNELS names {name!r}, but {var} is not set: define the connection "
                          f"(conn_type {_choices()})")
    if conn.conn_type:
        kind = CONN_TYPES.get(conn.conn_type)
        if kind is None:
            raise conn.error("field conn_type", f"{conn.conn_type!r} is not a channel type; {_choices()}")
    elif name in KINDS:
        kind = name
    else:
        raise conn.error("field conn_type", f"is required (channel {name!r} is not a built-in name); {_choices()}")
    try:
        return KINDS[kind].from_connection(name, conn)
    except ValueError as exc:  # a constructor's own check; its message holds no secret
        raise conn.error("connection", f"is invalid: {exc}") from None


def env_connection(name: str, environ: Mapping[str, str] | None = None) -> Connection | None:
    """Channel `name`'s connection from ``AIRFLOW_CONN_ALDEBARAN_<NAME>``, or None if unset."""
    env = os.environ if environ is None else environ
    var = conn_env_var(name)
    raw = env.get(var)
    if raw is None or not raw.strip():
        return None
    return Connection.parse(var, raw)


def channel_names(names: list[str] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The channel names: `names`, else ALDEBARAN_CHANNELS (default ``log``). Validated: lower-case
    letters, digits and _ (they are ledger key segments and connection ids), no repeats."""
    env = os.environ if environ is None else environ
    source = "channel names" if names else "ALDEBARAN_CHANNELS"
    wanted = list(names) if names else [n.strip() for n in env.get("ALDEBARAN_CHANNELS", "log").split(",") if n.strip()]
    if not wanted:
        raise ConfigError(f"{source}: no channel named (e.g. log,webhook)")
    for name in wanted:
        if not NAME_PATTERN.match(name):
            raise ConfigError(f"{source}: invalid channel name {name!r}: use a lower-case letter, "
                              "then lower-case letters, digits or _ (at most 63)")
    repeated = sorted({n for n in wanted if wanted.count(n) > 1})
    if repeated:
        raise ConfigError(f"{source}: channel(s) named twice: {', '.join(repeated)}")
    return wanted


def configured_channels(names: list[str] | None = None,
                        lookup: Callable[[str], Connection | None] | None = None) -> list[Channel]:
    """The channels named in ALDEBARAN_CHANNELS (default: log), each built from its connection.

    `lookup(name)` returns a channel's Connection; the default reads ``AIRFLOW_CONN_ALDEBARAN_<NAME>``.
    Inside Airflow pass e.g. ``lambda n: Connection.from_airflow(BaseHook.get_connection(conn_id(n)))``.
    """
    lookup = lookup or env_connection
    return [channel_from_connection(name, lookup(name)) for name in channel_names(names)]
