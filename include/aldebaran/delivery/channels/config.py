"""Which channels, built from what: a list of channel names, one connection per channel.

The list is a comma list of channel names (default ``log``): inside an Airflow task the Airflow
Variable ``aldebaran_channels`` when it exists (changeable in the UI, no restart), else the
ALDEBARAN_CHANNELS setting. Channel ``<name>`` is defined by the Airflow connection
``aldebaran_<name>``: inside an Airflow task as Airflow resolves it (UI/API, ``AIRFLOW_CONN_*``,
secrets backend), outside Airflow the env var ``AIRFLOW_CONN_ALDEBARAN_<NAME>`` in Airflow's JSON or
URI form (channels/sources.py), e.g.
``{"conn_type": "http", "host": "hooks.example.com", "schema": "https", "password": "<secret>",
"extra": {"endpoint": "/aldebaran", "timeout": 10}}``. The channel kind is the connection's conn_type
(looked up in the registry: http → webhook, smtp → email, kafka, sms, log, ...), or the channel's
name when that is a kind. .env.example shows one definition per kind. Any kind takes the extra
``fast`` (true/false, default false): the channel is then delivered from the fast lane too
(aldebaran.delivery.fast). Errors name the connection and the field, never a secret.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aldebaran.delivery.channels.base import CONN_TYPES, KINDS, Channel
from aldebaran.delivery.channels.connection import NAME_PATTERN, Connection, conn_id
from aldebaran.delivery.channels.log import LogChannel
from aldebaran.delivery.channels.sources import channels_setting, missing
from aldebaran.delivery.channels.sources import lookup as default_lookup
from aldebaran.exceptions import ConfigError


def _choices() -> str:
    return f"one of {', '.join(sorted(CONN_TYPES))} (registered kinds: {', '.join(sorted(KINDS))})"


def channel_from_connection(name: str, conn: Connection | None) -> Channel:
    """Build channel `name` from its connection (None: only the built-in `log` needs none)."""
    if conn is None:
        if name == "log":
            return LogChannel(name)
        if name in KINDS:
            raise ConfigError(f"{missing(name)}: the {name} channel needs a connection "
                              f"(Airflow connection {conn_id(name)}; see .env.example)")
        raise ConfigError(f"{channels_setting()[0]} names {name!r}, but {missing(name)}: define the connection "
                          f"(conn_type {_choices()})")
    if conn.conn_type:
        kind = CONN_TYPES.get(conn.conn_type)
        if kind is None:
            raise conn.error("field conn_type", f"{conn.conn_type!r} is not a channel type; {_choices()}")
    elif name in KINDS:
        kind = name
    else:
        raise conn.error("field conn_type", f"is required (channel {name!r} is not a built-in name); {_choices()}")
    fast = conn.extra_bool("fast", False)  # every kind may opt in to the fast lane: read here, not per kind
    try:
        channel = KINDS[kind].from_connection(name, conn)
    except ValueError as exc:  # a constructor's own check; its message holds no secret
        raise conn.error("connection", f"is invalid: {exc}") from None
    channel.fast = fast
    return channel


def channel_names(names: list[str] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The channel names: `names`, else the configured list (sources.channels_setting: the Airflow
    Variable ``aldebaran_channels`` inside a task, else ALDEBARAN_CHANNELS, default ``log``).
    Validated: lower-case letters, digits and _ (they are ledger key segments and connection ids),
    no repeats; errors name where the list came from."""
    if names:
        source, wanted = "channel names", list(names)
    else:
        source, raw = channels_setting(environ)
        wanted = [n.strip() for n in raw.split(",") if n.strip()]
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
    """The configured channels (or `names`), each built from its connection.

    The connection of each comes from `lookup(name)`; the default (sources.lookup) asks Airflow inside
    an Airflow task and reads ``AIRFLOW_CONN_ALDEBARAN_<NAME>`` outside it.
    """
    lookup = lookup or default_lookup
    return [channel_from_connection(name, lookup(name)) for name in channel_names(names)]
