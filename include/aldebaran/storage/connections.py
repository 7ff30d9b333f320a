"""Airflow connections, inside and outside Airflow: one way to find connection ``<conn_id>`` and one
parser of Airflow's JSON / URI forms, with typed accessors whose errors name the source (the env var or
the Airflow connection) and the field, never a value.

Where a connection comes from (:func:`lookup`):

- inside an Airflow task (a DAG's task, ``dag.test()``): ``BaseHook.get_connection(conn_id)`` (the Task
  SDK), so a connection created in the UI, through the REST API, as ``AIRFLOW_CONN_*`` or in a secrets
  backend is the one used, with Airflow's own precedence;
- outside Airflow (spark-submit's driver, the streaming dispatchers, the CLI): the env var
  ``AIRFLOW_CONN_<CONN_ID>`` only, and Airflow is never imported (see below).

A task hands the connections Airflow resolved to a process it starts outside Airflow with
:func:`connections_env` (``AIRFLOW_CONN_<CONN_ID>`` = Airflow's JSON form). Users: the channels
(``aldebaran_<channel>``, aldebaran.delivery.channels), the object store (``aldebaran_s3``,
aldebaran.storage.s3access).

"Inside an Airflow task" is Airflow's own test (``ensure_secrets_backend_loaded``): the Task SDK's task
runner is loaded and holds its channel to the supervisor (``SUPERVISOR_COMMS``).

Parsed here rather than by ``airflow.models.Connection``: dispatch workers run outside Airflow, and
importing Airflow to parse one costs each process about ten times the start time and three times the
memory of this whole package (docs/design.md § 9, "Channel connections parsed here").
Inside an Airflow task, Airflow's own lookup finds the connection and :meth:`Connection.from_airflow` takes it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import SecretStr

from aldebaran.exceptions import ConfigError

ENV_PREFIX = "AIRFLOW_CONN_"
SECRET_KEY_PATTERN = re.compile(r"pass|secret|token|key|credential", re.IGNORECASE)
_TASK_RUNNER = "airflow.sdk.execution_time.task_runner"


def env_var(conn_id: str) -> str:
    """The env var holding connection `conn_id` outside Airflow: ``AIRFLOW_CONN_<CONN_ID>``."""
    return ENV_PREFIX + conn_id.upper()


def in_airflow_task() -> bool:
    """True inside an Airflow task process (or ``dag.test()``), without importing Airflow."""
    runner = sys.modules.get(_TASK_RUNNER)
    return runner is not None and getattr(runner, "SUPERVISOR_COMMS", None) is not None


def from_env(conn_id: str, environ: Mapping[str, str] | None = None) -> "Connection | None":
    """Connection `conn_id` from ``AIRFLOW_CONN_<CONN_ID>``, or None if unset."""
    # Airflow's own connection variables, named after the connection (no settings class can list
    # them), read in Airflow's format as Airflow would: not configuration of this package's own.
    env = os.environ if environ is None else environ
    var = env_var(conn_id)
    raw = env.get(var)
    if raw is None or not raw.strip():
        return None
    return Connection.parse(var, raw)


def from_airflow(conn_id: str) -> "Connection | None":
    """Connection `conn_id` as Airflow resolves it (inside a task), or None if Airflow has none."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    return Connection.from_airflow(conn)


def lookup(conn_id: str) -> "Connection | None":
    """Connection `conn_id` from wherever this process runs (module docstring), or None."""
    return from_airflow(conn_id) if in_airflow_task() else from_env(conn_id)


def missing(conn_id: str) -> str:
    """Where connection `conn_id` was looked for, for the error that it is not there."""
    if in_airflow_task():
        return (f"the Airflow connection {conn_id} is not defined (Airflow UI or REST API, "
                f"{env_var(conn_id)}, or a secrets backend)")
    return f"{env_var(conn_id)} is not set"


def connections_env(conn_ids: Iterable[str]) -> dict[str, str]:
    """``AIRFLOW_CONN_<CONN_ID>`` for each of `conn_ids` that has a connection where this process looks:
    how a task hands the connections Airflow resolved to a process it starts outside Airflow, which
    reads only its environment. The values hold secrets: for a child's environment, never for a log."""
    out = {}
    for conn_id in conn_ids:
        conn = lookup(conn_id)
        if conn is not None:
            out[env_var(conn_id)] = conn.to_json()
    return out


@dataclass(frozen=True)
class Connection:
    """An Airflow connection's fields; `source` names where it came from (the env var), for errors."""

    source: str
    conn_type: str | None = None
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: SecretStr | None = field(default=None, repr=False)
    schema: str | None = None
    extra: dict = field(default_factory=dict, repr=False)

    def error(self, what: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}: {what} {problem}")

    @classmethod
    def parse(cls, source: str, raw: str) -> "Connection":
        """Airflow's two env-var forms: JSON (``{"conn_type": ...}``) or URI (``conn-type://login:password@host:port/schema?extra``)."""
        text = raw.strip()
        if not text:
            raise ConfigError(f"{source}: empty connection")
        if text.startswith(("{", "[")):
            data = _json(source, text, "not valid JSON")
            if not isinstance(data, dict):
                raise ConfigError(f"{source}: the JSON form must be an object")
            return cls.from_fields(source, data)
        return cls.from_uri(source, text)

    @classmethod
    def from_fields(cls, source: str, data: Mapping[str, Any]) -> "Connection":
        known = {"conn_type", "host", "port", "login", "password", "schema", "extra", "description"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {', '.join(unknown)}; a connection has {', '.join(sorted(known))}")
        for name in ("conn_type", "host", "login", "schema", "password"):
            if data.get(name) is not None and not isinstance(data[name], str):
                raise ConfigError(f"{source}: field {name} must be a string")
        extra = data.get("extra") or {}
        if isinstance(extra, str):
            extra = _json(source, extra, "field extra is not valid JSON")
        if not isinstance(extra, dict):
            raise ConfigError(f"{source}: field extra must be a JSON object")
        conn_type = data.get("conn_type")
        return cls(
            source=source,
            conn_type=conn_type.strip().lower().replace("-", "_") if conn_type else None,
            host=data.get("host") or None,
            port=_port(source, data.get("port")),
            login=data.get("login") or None,
            password=SecretStr(data["password"]) if data.get("password") else None,
            schema=data.get("schema") or None,
            extra=dict(extra),
        )

    @classmethod
    def from_uri(cls, source: str, uri: str) -> "Connection":
        """As Airflow parses it: scheme = conn_type, path = schema, query = extra (or ``__extra__`` = JSON);
        ``conn-type://protocol://host`` keeps the protocol in the host. Errors never echo the URI."""
        if uri.count("://") not in (1, 2):
            raise ConfigError(f"{source}: not a connection URI (expected conn-type://[login:password@]host[:port][/schema][?extra])")
        scheme, rest = uri.split("://", 1)
        protocol = None
        if "://" in rest:
            protocol, rest = rest.split("://", 1)
            if "@" in protocol or ":" in protocol or "/" in protocol:
                raise ConfigError(f"{source}: invalid protocol in the host part of the URI")
        try:
            parts = urlsplit("//" + rest)
            port = parts.port
        except ValueError:
            raise ConfigError(f"{source}: field port is not a number between 1 and 65535 (URI form; "
                              "percent-encode special characters in login and password)") from None
        host = unquote(parts.hostname or "") or None
        if host and protocol:
            host = f"{protocol}://{host}"
        extra: dict = {}
        if parts.query:
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
            if "__extra__" in query:
                extra = _json(source, query["__extra__"], "field extra (__extra__) is not valid JSON")
                if not isinstance(extra, dict):
                    raise ConfigError(f"{source}: field extra (__extra__) must be a JSON object")
            else:
                extra = query
        return cls(
            source=source,
            conn_type=scheme.strip().lower().replace("-", "_") or None,
            host=host,
            port=_port(source, port),
            login=unquote(parts.username) if parts.username else None,
            password=SecretStr(unquote(parts.password)) if parts.password else None,
            schema=unquote(parts.path[1:]) if len(parts.path) > 1 else None,
            extra=extra,
        )

    @classmethod
    def from_airflow(cls, conn: Any, source: str | None = None) -> "Connection":
        """From Airflow's Connection (Task SDK or ``airflow.models``; anything with its attributes).

        The extra goes in as Airflow stores it, a JSON string: Airflow's ``extra_dejson`` turns a
        malformed extra into ``{}`` with a log line, and the channel would start half-configured."""
        return cls.from_fields(source or f"Airflow connection {conn.conn_id}", {
            "conn_type": conn.conn_type, "host": conn.host, "port": conn.port, "login": conn.login,
            "password": conn.password, "schema": conn.schema, "extra": conn.extra or None,
        })

    def to_json(self) -> str:
        """Airflow's JSON form of this connection (an ``AIRFLOW_CONN_*`` value for a child process).
        It holds the password: for a process's environment only, never for a log."""
        data = {"conn_type": self.conn_type, "host": self.host, "port": self.port, "login": self.login,
                "password": self.password.get_secret_value() if self.password else None,
                "schema": self.schema, "extra": self.extra}
        return json.dumps({k: v for k, v in data.items() if v not in (None, {})})

    # --- typed accessors: each failure names the source and the field, never the value ------------
    def require(self, name: str, hint: str) -> str:
        value = getattr(self, name)
        if not value:
            raise self.error(f"field {name}", f"is required ({hint})")
        return value

    def secret(self, hint: str, fallback: SecretStr | None = None, fallback_name: str | None = None) -> SecretStr:
        """The password, else `fallback` (a setting, named `fallback_name` in the error)."""
        if self.password is not None and self.password.get_secret_value():
            return self.password
        if fallback is not None and fallback.get_secret_value():
            return fallback
        also = f", or set {fallback_name}" if fallback_name else ""
        raise self.error("field password", f"is required ({hint}{also})")

    def extra_str(self, key: str, default: str | None = None, required: str | None = None) -> str | None:
        value = self.extra.get(key, default)
        if value is None or value == "":
            if required:
                raise self.error(f"field extra.{key}", f"is required ({required})")
            return default
        if not isinstance(value, str):
            raise self.error(f"field extra.{key}", "must be a string")
        return value

    def extra_seconds(self, key: str, default: float, maximum: float = 600.0) -> float:
        value = self.extra.get(key, default)
        try:
            seconds = float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int too large for a float
            raise self.error(f"field extra.{key}", f"must be a number of seconds (0 < s <= {maximum:g})") from None
        if isinstance(value, bool) or not 0 < seconds <= maximum:
            raise self.error(f"field extra.{key}", f"must be a number of seconds (0 < s <= {maximum:g})")
        return seconds

    def extra_int(self, key: str, default: int, minimum: int = 1, maximum: int = 100_000) -> int:
        value = self.extra.get(key, default)
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(Infinity); NaN is a ValueError
            raise self.error(f"field extra.{key}", f"must be a whole number ({minimum}-{maximum})") from None
        if isinstance(value, bool) or (isinstance(value, float) and value != number) or not minimum <= number <= maximum:
            raise self.error(f"field extra.{key}", f"must be a whole number ({minimum}-{maximum})")
        return number

    def extra_bool(self, key: str, default: bool) -> bool:
        value = self.extra.get(key, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        raise self.error(f"field extra.{key}", "must be true or false")

    def extra_verify(self, key: str = "verify") -> bool | str:
        """TLS verification: true (default, system CAs), false, or the path of a CA bundle."""
        value = self.extra.get(key, True)
        if isinstance(value, str) and value.strip().lower() not in ("true", "1", "yes", "false", "0", "no"):
            if not Path(value).is_file():
                raise self.error(f"field extra.{key}", "must be true, false or the path of an existing CA bundle file")
            return value
        return self.extra_bool(key, True)

    def extra_list(self, key: str, required: str) -> list[str]:
        """A list of strings, or one comma-separated string (the URI form)."""
        value = self.extra.get(key)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not value or not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(f"field extra.{key}", f"is required: a list of {required}, or one comma-separated string")
        return value

    def base_url(self, default_scheme: str) -> str:
        """HttpHook's rule: a host with ``://`` is the base URL; else ``<schema or default>://host[:port]``."""
        host = self.require("host", "the server's host name, or its base URL")
        if "://" in host:
            base = host
            if self.port and urlsplit(host).port is None:
                scheme, rest = host.split("://", 1)
                netloc, _, path = rest.partition("/")
                base = f"{scheme}://{netloc}:{self.port}" + (f"/{path}" if path else "")
        else:
            base = f"{(self.schema or default_scheme).lower()}://{host}" + (f":{self.port}" if self.port else "")
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self.error("field schema", "must be http or https (or put the scheme in host, e.g. https://host)")
        return base.rstrip("/")

    def secrets(self) -> list[str]:
        """Every secret value of this connection (for scrubbing third-party messages)."""
        out = [self.password.get_secret_value()] if self.password else []
        out += [str(v) for k, v in self.extra.items() if SECRET_KEY_PATTERN.search(k) and v]
        return out


def _json(source: str, text: str, what: str) -> Any:
    """json.loads, every failure a ConfigError that never echoes the text (it may hold a secret)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:  # the message has a position, never the text
        raise ConfigError(f"{source}: {what} ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # arrays/objects nested deeper than the parser's recursion
        raise ConfigError(f"{source}: {what} (nested too deeply)") from None
    except ValueError:  # e.g. an integer of more digits than int() converts; its message would echo them
        raise ConfigError(f"{source}: {what} (a number too large)") from None


def _port(source: str, value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(Infinity); NaN is a ValueError
        raise ConfigError(f"{source}: field port must be a number between 1 and 65535") from None
    if isinstance(value, bool) or not 1 <= port <= 65535 or (isinstance(value, float) and value != port):
        raise ConfigError(f"{source}: field port must be a number between 1 and 65535")
    return port


def scrub(text: str, secrets: list[str]) -> str:
    """`text` with every secret replaced by ``***`` (third-party messages may echo configuration)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
