"""Alert channels behind one small interface: ``send(alert, idempotency_key) -> receipt``.

A channel raises RetryableError (try again later) or PermanentError (never succeeds). `can_dedupe`
says whether the provider honours the idempotency key: if it does, a send whose outcome is unknown
may be repeated safely; if not, the ledger marks it IN_DOUBT instead of sending twice.
OutcomeUnknown, a RetryableError, says more precisely that the request may have reached the
provider (a read timeout, a connection lost after the request was written): harmless to repeat on a
deduplicating channel, a possible second message on one that is not.

Channels (``kind`` → class):
  webhook  WebhookChannel  HTTP(S) POST, ``Idempotency-Key`` + HMAC-SHA256 signature of the body
  email    EmailChannel    SMTP, ``Message-ID: <alert_id@aldebaran>``, a plain-text body for people
  kafka    KafkaChannel    another topic/cluster, key = alert_id, idempotent producer
  sms      SmsChannel      a Twilio-style provider API; cannot deduplicate
  log      LogChannel      JSON lines in a file (demos)

Configuration (:func:`configured_channels`): ALDEBARAN_CHANNELS names the channels (comma list,
default ``log``); channel ``<name>`` is defined by the Airflow connection ``aldebaran_<name>``, which
outside Airflow is the env var ``AIRFLOW_CONN_ALDEBARAN_<NAME>`` in Airflow's JSON or URI form, e.g.
``{"conn_type": "http", "host": "hooks.example.com", "schema": "https", "password": "<secret>",
"extra": {"endpoint": "/aldebaran", "timeout": 10}}``. The channel kind is the connection's
conn_type (http → webhook, smtp → email, kafka, sms, log), or the channel's name when that is a kind.
.env.example shows one definition per kind. Errors name the env var and the field, never a secret.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import smtplib
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path
from typing import Any, ClassVar, Protocol
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from pydantic import SecretStr

from aldebaran import paths
from aldebaran.exceptions import ConfigError

log = logging.getLogger(__name__)

USER_AGENT = "aldebaran-dispatch/0.1"


class RetryableError(Exception):
    """Temporary failure: the ledger schedules a retry with backoff."""


class OutcomeUnknown(RetryableError):
    """The request may have reached the provider before the failure (read timeout, connection lost
    after sending). Safe to retry where the provider deduplicates by the idempotency key; on a channel
    that cannot (SMS) a retry may send a second message, so the delivery is in doubt."""


class PermanentError(Exception):
    """The provider refused the alert for good: the ledger marks it DEAD."""


class Channel(Protocol):
    name: str
    can_dedupe: bool

    def send(self, alert: dict, idempotency_key: str) -> dict: ...


# --- what is sent ------------------------------------------------------------------------------
def alert_body(alert: dict) -> bytes:
    """The alert as sent to machines (webhook body, Kafka value): compact JSON, sorted keys, ASCII."""
    return json.dumps(alert, separators=(",", ":"), sort_keys=True).encode()


def signature(body: bytes, secret: str | SecretStr) -> str:
    """``X-Aldebaran-Signature``: ``sha256=`` + hex HMAC-SHA256 of the exact body bytes."""
    key = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    return "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(body: bytes, header: str | None, secret: str | SecretStr) -> bool:
    """Receivers: constant-time check of an ``X-Aldebaran-Signature`` header."""
    return bool(header) and hmac.compare_digest(header.encode(), signature(body, secret).encode())


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _text(value: Any, limit: int = 80) -> str:
    """One line of display text from an alert field: no control characters (header injection), bounded."""
    text = _CONTROL.sub(" ", str(value)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def utc_iso(epoch_ms: Any) -> str:
    """Epoch milliseconds → ``2024-05-01T12:00:00.000Z``; ``unknown`` if it is not a number."""
    if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, (int, float)):
        return "unknown"
    try:
        moment = dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return "unknown"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def email_subject(alert: dict) -> str:
    """``[Aldebaran] OVERFILL on order 1 (Sendence AAPL)``."""
    who = " ".join(_text(alert[k], 40) for k in ("client", "stock") if alert.get(k) not in (None, ""))
    subject = f"[Aldebaran] {_text(alert.get('kind', 'ALERT'), 20)} on order {_text(alert.get('order_id'), 60)}"
    return subject + (f" ({who})" if who else "")


def email_text(alert: dict, channel: str = "email") -> str:
    """The plain-text body of the alert e-mail: what happened, in words and UTC times."""
    requested, purchased = alert.get("requested"), alert.get("purchased")
    count = alert.get("purchase_count")
    bought = f"{purchased} shares" + (f" in {count} purchase{'s' if count != 1 else ''}" if count is not None else "")
    if isinstance(requested, int) and isinstance(purchased, int):
        delta = purchased - requested
        bought += f" ({delta} over the request)" if delta > 0 else ""
        asked = f"{requested} shares"
    else:
        asked = "no purchase request seen"
    trigger = _text(alert.get("trigger_event_id") or "unknown", 128)
    lines = [
        f"Aldebaran raised an {_text(alert.get('kind', 'ALERT'), 20)} alert.",
        "",
        f"Order:          {_text(alert.get('order_id'), 128)}",
        f"Client:         {_text(alert.get('client') or 'unknown')}",
        f"Stock:          {_text(alert.get('stock') or 'unknown')}",
        f"Requested:      {asked}",
        f"Purchased:      {bought}",
        f"Trigger event:  {trigger} at {utc_iso(alert.get('trigger_event_ts'))}",
        f"Detected at:    {utc_iso(alert.get('detected_at'))}",
    ]
    if alert.get("message"):
        lines += ["", _text(alert["message"], 1000)]
    lines += [
        "",
        "--",
        f"Alert id {alert.get('alert_id')}: Aldebaran sends one e-mail per alert.",
        f"Delivery record: aldebaran deliveries show --channel {channel} --alert-id {alert.get('alert_id')}",
    ]
    return "\n".join(lines) + "\n"


def sms_text(alert: dict) -> str:
    """``Aldebaran OVERFILL order 1: bought 120/100 AAPL``: short enough for one GSM-7 SMS."""
    kind, order = _text(alert.get("kind", "ALERT"), 20), _text(alert.get("order_id"), 40)
    stock = f" {_text(alert['stock'], 20)}" if alert.get("stock") else ""
    requested, purchased = alert.get("requested"), alert.get("purchased")
    if requested is None:
        return f"Aldebaran {kind} order {order}: bought {purchased}{stock} without a request"
    return f"Aldebaran {kind} order {order}: bought {purchased}/{requested}{stock}"


def _elapsed_ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 1)


# --- connections: Airflow's JSON and URI forms ---------------------------------------------------
CONN_ID_PREFIX = "aldebaran_"
ENV_PREFIX = "AIRFLOW_CONN_"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
SECRET_KEY_PATTERN = re.compile(r"pass|secret|token|key|credential", re.IGNORECASE)


def conn_id(name: str) -> str:
    """The Airflow connection id of channel `name`: ``aldebaran_<name>``."""
    return CONN_ID_PREFIX + name


def conn_env_var(name: str) -> str:
    """The env var holding channel `name`'s connection outside Airflow: ``AIRFLOW_CONN_ALDEBARAN_<NAME>``."""
    return ENV_PREFIX + conn_id(name).upper()


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
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:  # the message has a position, never the text
                raise ConfigError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
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
            try:
                extra = json.loads(extra)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{source}: field extra is not valid JSON ({exc.msg})") from None
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
                try:
                    extra = json.loads(query["__extra__"])
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{source}: field extra (__extra__) is not valid JSON ({exc.msg})") from None
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
        """From an ``airflow.models.Connection`` (or anything with its attributes), inside Airflow."""
        return cls.from_fields(source or f"Airflow connection {conn.conn_id}", {
            "conn_type": conn.conn_type, "host": conn.host, "port": conn.port, "login": conn.login,
            "password": conn.password, "schema": conn.schema, "extra": conn.extra_dejson,
        })

    # --- typed accessors: each failure names the source and the field, never the value ------------
    def require(self, name: str, hint: str) -> str:
        value = getattr(self, name)
        if not value:
            raise self.error(f"field {name}", f"is required ({hint})")
        return value

    def secret(self, hint: str, fallback_env: str | None = None) -> SecretStr:
        if self.password is not None and self.password.get_secret_value():
            return self.password
        if fallback_env and os.environ.get(fallback_env):
            return SecretStr(os.environ[fallback_env])
        also = f", or set {fallback_env}" if fallback_env else ""
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
        except (TypeError, ValueError):
            raise self.error(f"field extra.{key}", f"must be a number of seconds (0 < s <= {maximum:g})") from None
        if isinstance(value, bool) or not 0 < seconds <= maximum:
            raise self.error(f"field extra.{key}", f"must be a number of seconds (0 < s <= {maximum:g})")
        return seconds

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


def _port(source: str, value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: field port must be a number between 1 and 65535") from None
    if isinstance(value, bool) or not 1 <= port <= 65535 or (isinstance(value, float) and value != port):
        raise ConfigError(f"{source}: field port must be a number between 1 and 65535")
    return port


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _target(url: str) -> str:
    """host:port of a URL, for messages and receipts: never its path or query (which may hold tokens)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


# --- HTTP plumbing shared by the webhook and SMS channels ----------------------------------------
class _HttpClient:
    """One requests.Session per thread (connection reuse; Sessions are not documented thread-safe).
    No automatic retries and no redirects: the ledger decides about retries."""

    def __init__(self) -> None:
        self._local = threading.local()

    def session(self):
        import requests

        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            adapter = requests.adapters.HTTPAdapter(max_retries=0, pool_connections=4, pool_maxsize=16)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            session.headers["User-Agent"] = USER_AGENT
            self._local.session = session
        return session

    def close(self) -> None:
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()
            self._local.session = None


def _maybe_sent(exc: Exception) -> bool:
    """False when requests failed before the request could reach the server (no connection made)."""
    import requests
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return False
    if isinstance(exc, requests.exceptions.SSLError):
        return False  # the handshake failed: nothing was sent
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return not isinstance(reason, (NewConnectionError, ConnectTimeoutError))


def _post(channel: str, target: str, call: Callable[[], Any]):
    """Run one HTTP call, translating requests' errors: nothing sent → RetryableError; maybe sent →
    OutcomeUnknown; a request that cannot be built → PermanentError. Messages name the host, not the URL."""
    import requests

    try:
        return call()
    except requests.exceptions.Timeout as exc:
        kind = OutcomeUnknown if _maybe_sent(exc) else RetryableError
        raise kind(f"{channel} ({target}): timed out ({type(exc).__name__})") from None
    except requests.exceptions.ConnectionError as exc:
        kind = OutcomeUnknown if _maybe_sent(exc) else RetryableError
        raise kind(f"{channel} ({target}): connection failed ({type(exc).__name__})") from None
    except requests.exceptions.RequestException as exc:
        raise PermanentError(f"{channel} ({target}): request not possible ({type(exc).__name__})") from None


def _response_text(resp, limit: int = 200) -> str:
    return _text(resp.text or "", limit) if resp.content else ""


# --- channels -----------------------------------------------------------------------------------
class LogChannel:
    """JSON lines appended to a file (demos, debugging). Not deduplicating by itself."""

    kind: ClassVar[str] = "log"
    can_dedupe = False

    def __init__(self, name: str = "log", path: str | Path | None = None) -> None:
        self.name = name
        default = paths.run_dir() / ("alerts.log.jsonl" if name == "log" else f"alerts.{name}.log.jsonl")
        self.path = Path(path or os.environ.get("ALDEBARAN_LOG_CHANNEL_PATH", default))

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "LogChannel":
        return cls(name, conn.extra_str("path"))

    def __repr__(self) -> str:
        return f"LogChannel(name={self.name!r}, path={str(self.path)!r})"

    def send(self, alert: dict, idempotency_key: str) -> dict:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"idempotency_key": idempotency_key, "sent_at": time.time(), "alert": alert},
                          separators=(",", ":")) + "\n"
        try:
            with open(self.path, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
                offset = fh.tell()
        except OSError as exc:
            raise RetryableError(f"log channel {self.path}: {exc}") from exc
        return {"file": str(self.path), "offset": offset}


class WebhookChannel:
    """HTTP(S) POST of the alert JSON, signed, with the alert id as ``Idempotency-Key``.

    2xx → delivered; 409 → the receiver already has this key: delivered before (receipt says so);
    408/429/5xx, timeouts and connection errors → RetryableError; any other status → PermanentError.
    """

    kind: ClassVar[str] = "webhook"
    can_dedupe = True

    def __init__(self, name: str, url: str, secret: str | SecretStr, timeout: float = 10.0,
                 verify: bool | str = True, response_id_header: str = "X-Request-Id") -> None:
        self.name = name
        self.url = url
        self._secret = secret if isinstance(secret, SecretStr) else SecretStr(secret)
        if not self._secret.get_secret_value():
            raise ValueError(f"webhook {name}: empty signing secret")
        self.timeout = timeout
        self.verify = verify
        self.response_id_header = response_id_header
        self.target = _target(url)
        self._http = _HttpClient()

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "WebhookChannel":
        base = conn.base_url(default_scheme="https")
        endpoint = conn.extra_str("endpoint", "") or ""
        return cls(
            name,
            url=base + ("/" + endpoint.lstrip("/") if endpoint else ""),
            secret=conn.secret("the HMAC signing secret shared with the receiver", "ALDEBARAN_WEBHOOK_SECRET"),
            timeout=conn.extra_seconds("timeout", 10.0),
            verify=conn.extra_verify(),
            response_id_header=conn.extra_str("response_id_header", "X-Request-Id") or "X-Request-Id",
        )

    def __repr__(self) -> str:
        return f"WebhookChannel(name={self.name!r}, target={self.target!r}, timeout={self.timeout})"

    def send(self, alert: dict, idempotency_key: str) -> dict:
        body = alert_body(alert)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key,
            "X-Aldebaran-Signature": signature(body, self._secret),
            "X-Aldebaran-Timestamp": str(int(time.time())),
        }
        where = f"webhook {self.name}"
        t0 = time.monotonic()
        resp = _post(where, self.target, lambda: self._http.session().post(
            self.url, data=body, headers=headers, timeout=self.timeout, verify=self.verify, allow_redirects=False))
        status = resp.status_code
        receipt = {"status": status, "response_id": resp.headers.get(self.response_id_header),
                   "elapsed_ms": _elapsed_ms(t0)}
        if 200 <= status < 300:
            return receipt
        if status == 409:  # the receiver has seen this Idempotency-Key: an earlier attempt got through
            return {**receipt, "already_delivered": True, "note": "409: receiver already had this idempotency key"}
        detail = f"{where} ({self.target}): HTTP {status} {_response_text(resp)}".rstrip()
        if status in (408, 429) or status >= 500:
            raise RetryableError(detail)
        raise PermanentError(detail)

    def close(self) -> None:
        self._http.close()


class EmailChannel:
    """SMTP with ``Message-ID: <alert_id@aldebaran>`` (receivers and mail clients dedupe by it).

    SMTP 4xx and connection problems → RetryableError; 5xx → PermanentError.
    """

    kind: ClassVar[str] = "email"
    can_dedupe = True
    domain: ClassVar[str] = "aldebaran"

    def __init__(self, name: str, host: str, sender: str, recipients: list[str], port: int | None = None,
                 login: str | None = None, password: str | SecretStr | None = None, use_ssl: bool = False,
                 starttls: bool = False, timeout: float = 30.0, ca_file: str | None = None) -> None:
        self.name = name
        self.host = host
        self.use_ssl = use_ssl
        self.starttls = starttls and not use_ssl
        self.port = port or (465 if use_ssl else 587 if starttls else 25)
        self.sender = sender
        self.recipients = list(recipients)
        self.login = login
        self._password = password if isinstance(password, SecretStr) or password is None else SecretStr(password)
        if login and self._password is None:
            raise ValueError(f"email {name}: a login needs a password")
        self.timeout = timeout
        self.ca_file = ca_file

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "EmailChannel":
        """Extras as in Airflow's SMTP connection (from_email, disable_ssl, disable_tls, timeout) plus
        ``to`` (recipients) and ``ca_file`` (a private CA for TLS)."""
        if conn.login and conn.password is None:
            raise conn.error("field password", "is required when login is set (the SMTP password)")
        return cls(
            name,
            host=conn.require("host", "the SMTP server"),
            port=conn.port,
            sender=conn.extra_str("from_email", required="the sender address"),
            recipients=conn.extra_list("to", "recipient addresses"),
            login=conn.login,
            password=conn.password,
            use_ssl=not conn.extra_bool("disable_ssl", False),
            starttls=not conn.extra_bool("disable_tls", False),
            timeout=conn.extra_seconds("timeout", 30.0),
            ca_file=conn.extra_str("ca_file"),
        )

    def __repr__(self) -> str:
        tls = "ssl" if self.use_ssl else "starttls" if self.starttls else "plain"
        return f"EmailChannel(name={self.name!r}, target='{self.host}:{self.port}', tls={tls!r}, login={self.login!r})"

    def message_id(self, idempotency_key: str) -> str:
        return f"<{idempotency_key}@{self.domain}>"

    def message(self, alert: dict, idempotency_key: str) -> EmailMessage:
        msg = EmailMessage()
        msg["Subject"] = email_subject(alert)
        msg["From"] = self.sender
        msg["To"] = ", ".join(self.recipients)
        msg["Date"] = formatdate(usegmt=True)
        msg["Message-ID"] = self.message_id(idempotency_key)
        msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies
        msg["X-Aldebaran-Alert-Id"] = idempotency_key
        msg.set_content(email_text(alert, self.name))
        return msg

    def _tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)

    def send(self, alert: dict, idempotency_key: str) -> dict:
        msg = self.message(alert, idempotency_key)
        where = f"email {self.name} ({self.host}:{self.port})"
        t0 = time.monotonic()
        try:
            if self.use_ssl:
                client = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=self._tls_context())
            else:
                client = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
            with client:
                client.ehlo()
                if self.starttls:
                    client.starttls(context=self._tls_context())
                    client.ehlo()
                if self.login:
                    client.login(self.login, self._password.get_secret_value())
                refused = client.send_message(msg)
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _ in exc.recipients.values()]
            kind = RetryableError if codes and all(400 <= c < 500 for c in codes) else PermanentError
            raise kind(f"{where}: every recipient refused (SMTP {sorted(set(codes))})") from None
        except smtplib.SMTPResponseException as exc:  # sender refused, data refused, auth failed, ...
            kind = RetryableError if 400 <= exc.smtp_code < 500 else PermanentError
            raise kind(f"{where}: SMTP {exc.smtp_code} {_text(_decode(exc.smtp_error), 200)}") from None
        except smtplib.SMTPNotSupportedError as exc:
            raise PermanentError(f"{where}: {exc} (check disable_tls / login)") from None
        except (smtplib.SMTPException, OSError) as exc:  # refused, disconnected, timeouts, TLS failures
            raise RetryableError(f"{where}: {type(exc).__name__}: {_text(exc, 200)}") from None
        receipt = {"message_id": msg["Message-ID"], "recipients": self.recipients, "elapsed_ms": _elapsed_ms(t0)}
        if refused:
            receipt["refused"] = {rcpt: code for rcpt, (code, _) in refused.items()}
        return receipt


def _decode(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class KafkaChannel:
    """Forward to a topic (another cluster, or the same one): key = alert_id, value = the alert JSON,
    idempotent producer (acks=all), flushed per send. Not acknowledged in time → OutcomeUnknown."""

    kind: ClassVar[str] = "kafka"
    can_dedupe = True
    OWN_KEYS: ClassVar[tuple[str, ...]] = ("topic", "flush_timeout")

    def __init__(self, name: str, topic: str, config: Mapping[str, Any], flush_timeout: float = 10.0,
                 secrets: list[str] | None = None, source: str | None = None) -> None:
        self.name = name
        self.source = source or f"kafka channel {name}"
        self.topic = topic
        if str(config.get("enable.idempotence", True)).lower() in ("false", "0"):
            raise ValueError(f"kafka {name}: enable.idempotence must stay true")
        self.config = {"log_level": 3, **config, "enable.idempotence": True, "acks": "all"}
        if not self.config.get("bootstrap.servers"):
            raise ValueError(f"kafka {name}: bootstrap.servers is required")
        self.flush_timeout = flush_timeout
        self._secrets = list(secrets or [])
        self._producer = None
        self._lock = threading.Lock()

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "KafkaChannel":
        """Extras: ``topic`` and ``flush_timeout``; every other extra is librdkafka configuration, as in
        Airflow's Kafka connection. bootstrap.servers: extra, else host[:port], else ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS."""
        from aldebaran.settings import KafkaSettings, load

        topic = conn.extra_str("topic", required="the topic alerts are forwarded to")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic):
            raise conn.error("field extra.topic", "must be a valid topic name (letters, digits, . _ -)")
        config = {k: v for k, v in conn.extra.items() if k not in cls.OWN_KEYS}
        if str(config.get("enable.idempotence", True)).lower() in ("false", "0"):
            raise conn.error("field extra.enable.idempotence", "must stay true (the channel relies on the idempotent producer)")
        if not config.get("bootstrap.servers"):
            if conn.host:
                config["bootstrap.servers"] = conn.host + (f":{conn.port}" if conn.port else "")
            else:
                config["bootstrap.servers"] = load(KafkaSettings).bootstrap_servers
        return cls(name, topic, config, flush_timeout=conn.extra_seconds("flush_timeout", 10.0),
                   secrets=conn.secrets(), source=conn.source)

    def __repr__(self) -> str:
        return f"KafkaChannel(name={self.name!r}, topic={self.topic!r}, bootstrap={self.config['bootstrap.servers']!r})"

    def _get_producer(self):
        from confluent_kafka import KafkaException, Producer

        with self._lock:
            if self._producer is None:
                try:
                    self._producer = Producer(self.config)
                except (KafkaException, ValueError, TypeError) as exc:
                    raise ConfigError(f"{self.source}: field extra holds an invalid producer configuration: "
                                      f"{_scrub(str(exc), self._secrets)}") from None
            return self._producer

    def send(self, alert: dict, idempotency_key: str) -> dict:
        from confluent_kafka import KafkaException

        producer = self._get_producer()
        outcome: dict = {}

        def on_delivery(err, msg) -> None:
            outcome["err"], outcome["msg"] = err, msg

        where = f"kafka {self.name} (topic {self.topic})"
        try:
            producer.produce(self.topic, key=idempotency_key.encode(), value=alert_body(alert),
                             headers=[("aldebaran.alert_id", idempotency_key.encode())], on_delivery=on_delivery)
        except BufferError:
            raise RetryableError(f"{where}: local producer queue full") from None
        except KafkaException as exc:
            raise self._translate(where, exc.args[0]) from None
        producer.flush(self.flush_timeout)
        if not outcome:  # still queued: it may yet be written (the key lets consumers dedupe a retry)
            raise OutcomeUnknown(f"{where}: not acknowledged within {self.flush_timeout:g}s")
        err, msg = outcome["err"], outcome["msg"]
        if err is not None:
            if err.fatal():  # the idempotent producer cannot continue: start a fresh one next time
                with self._lock:
                    self._producer = None
            raise self._translate(where, err)
        return {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(), "key": idempotency_key}

    def _translate(self, where: str, err) -> Exception:
        """A KafkaError → PermanentError (the message or the topic can never be accepted),
        OutcomeUnknown (timed out in flight: it may have been written) or RetryableError."""
        from confluent_kafka import KafkaError

        permanent = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
                     KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._INVALID_ARG}
        text = f"{where}: {_scrub(err.str(), self._secrets)}"
        if err.code() in permanent:
            return PermanentError(text)
        if err.code() == KafkaError._MSG_TIMED_OUT:
            return OutcomeUnknown(text)
        return RetryableError(text)

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(self.flush_timeout)
                self._producer = None


E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


class SmsChannel:
    """A Twilio-style SMS API: form POST to ``{base}/2010-04-01/Accounts/{sid}/Messages.json``, basic
    auth (account SID, auth token), one recipient per channel. The provider cannot deduplicate, so a
    failure after the request may have been sent is OutcomeUnknown (the ledger must not resend blindly).

    2xx → receipt with the provider's ``sid``; 429/5xx → RetryableError; other 4xx → PermanentError.
    """

    kind: ClassVar[str] = "sms"
    can_dedupe = False

    def __init__(self, name: str, base_url: str, account_sid: str, auth_token: str | SecretStr,
                 sender: str, recipient: str, timeout: float = 10.0, verify: bool | str = True) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.account_sid = account_sid
        self._token = auth_token if isinstance(auth_token, SecretStr) else SecretStr(auth_token)
        self.sender = sender
        self.recipient = recipient
        self.timeout = timeout
        self.verify = verify
        self.url = f"{self.base_url}/2010-04-01/Accounts/{quote(account_sid, safe='')}/Messages.json"
        self.target = _target(self.url)
        self._http = _HttpClient()

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "SmsChannel":
        """host = the provider's base URL (default https://api.twilio.com), login = account SID,
        password = auth token, extra ``from`` and ``to`` (one E.164 number), ``timeout``."""
        if not conn.host:
            conn = dataclasses.replace(conn, host="https://api.twilio.com")
        recipient = conn.extra_str("to", required="the recipient's phone number, E.164 like +15551234567")
        if not E164.match(recipient):
            raise conn.error("field extra.to", "must be one phone number in E.164 form (+ and 7-15 digits); "
                             "define one sms channel per recipient")
        return cls(
            name,
            base_url=conn.base_url(default_scheme="https"),
            account_sid=conn.require("login", "the account SID"),
            auth_token=conn.secret("the auth token"),
            sender=conn.extra_str("from", required="the sending number or sender id"),
            recipient=recipient,
            timeout=conn.extra_seconds("timeout", 10.0),
            verify=conn.extra_verify(),
        )

    def __repr__(self) -> str:
        return f"SmsChannel(name={self.name!r}, target={self.target!r}, account_sid={self.account_sid!r})"

    def send(self, alert: dict, idempotency_key: str) -> dict:
        form = {"To": self.recipient, "From": self.sender, "Body": sms_text(alert)}
        where = f"sms {self.name}"
        t0 = time.monotonic()
        resp = _post(where, self.target, lambda: self._http.session().post(
            self.url, data=form, auth=(self.account_sid, self._token.get_secret_value()),
            timeout=self.timeout, verify=self.verify, allow_redirects=False))
        status = resp.status_code
        if 200 <= status < 300:
            try:
                payload = resp.json()
            except ValueError:
                payload = {}
            sid = payload.get("sid") if isinstance(payload, dict) else None
            if not sid:  # accepted, but no handle on the message: do not send it again
                log.warning("%s (%s): HTTP %d without a message sid", where, self.target, status)
            return {"sid": sid, "status": payload.get("status") if isinstance(payload, dict) else None,
                    "http_status": status, "elapsed_ms": _elapsed_ms(t0)}
        try:
            problem = resp.json()
            detail = f"code {problem.get('code')}: {_text(problem.get('message', ''), 200)}"
        except (ValueError, AttributeError):
            detail = _response_text(resp)
        text = f"{where} ({self.target}): HTTP {status} {detail}".rstrip()
        if status == 429 or status >= 500:
            raise RetryableError(text)
        raise PermanentError(text)

    def close(self) -> None:
        self._http.close()


# --- configuration --------------------------------------------------------------------------------
KINDS: dict[str, type] = {
    "webhook": WebhookChannel, "email": EmailChannel, "kafka": KafkaChannel, "sms": SmsChannel, "log": LogChannel,
}
CONN_TYPES: dict[str, str] = {
    "http": "webhook", "https": "webhook", "webhook": "webhook",
    "smtp": "email", "email": "email",
    "kafka": "kafka",
    "sms": "sms", "twilio": "sms",
    "log": "log",
}


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
                          f"(conn_type one of {', '.join(sorted(CONN_TYPES))})")
    if conn.conn_type:
        kind = CONN_TYPES.get(conn.conn_type)
        if kind is None:
            raise conn.error("field conn_type", f"{conn.conn_type!r} is not a channel type; one of {', '.join(sorted(CONN_TYPES))}")
    elif name in KINDS:
        kind = name
    else:
        raise conn.error("field conn_type", f"is required (channel {name!r} is not a built-in name); "
                         f"one of {', '.join(sorted(CONN_TYPES))}")
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
