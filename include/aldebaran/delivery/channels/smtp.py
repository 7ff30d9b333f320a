"""E-mail channel: SMTP, one message per alert, ``Message-ID: <alert_id@aldebaran>``.

A resend carries the same Message-ID (some mail clients collapse repeats, servers deliver both): at
least once under a stable key. The body is the plain-text report of :func:`~.text.email_text`. SMTP
4xx and connection problems → RetryableError; 5xx → PermanentError; but a timeout or a dropped
connection once the DATA command has gone out → OutcomeUnknown: the server may have accepted the
message and its reply been lost, so the ledger records "may have been sent" before the resend. An
error after the server's 250 to the message (at QUIT) changes nothing: it is delivered.
``send_many`` is the default: ``send`` over a pool of ``concurrency`` threads, one SMTP session per
message.

Named smtp.py, not email.py, so that nothing can mistake it for the standard library's ``email``.
"""

from __future__ import annotations

import smtplib
import ssl
import time
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any, ClassVar

from pydantic import SecretStr

from aldebaran.delivery.channels.base import DEFAULT_CONCURRENCY, Channel, Promise, register
from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.channels.http import elapsed_ms
from aldebaran.delivery.channels.text import email_subject, email_text, one_line
from aldebaran.delivery.exceptions import OutcomeUnknown, PermanentError, RetryableError
from aldebaran.model import Alert


class _DataTracking:
    """An SMTP session that notes when the DATA command went out: from then on a lost reply leaves the
    outcome unknown (the server may already hold the message)."""

    data_sent = False

    def putcmd(self, cmd: str, args: str = "") -> None:
        super().putcmd(cmd, args)
        if cmd.lower() == "data":
            self.data_sent = True


class _SMTP(_DataTracking, smtplib.SMTP):
    pass


class _SMTP_SSL(_DataTracking, smtplib.SMTP_SSL):
    pass


@register("email", conn_types=("smtp",))
class EmailChannel(Channel):
    """SMTP with ``Message-ID: <alert_id@aldebaran>`` (module docstring)."""

    can_dedupe: ClassVar[bool] = True
    dedupe_key: ClassVar[str | None] = "Message-ID alert_id@domain (some mail clients collapse repeats; servers deliver both)"
    in_doubt_policy: ClassVar[str] = "re-sent with the same Message-ID"
    # Mail servers deliver a second copy with the same Message-ID; only some clients collapse it.
    delivery_promise: ClassVar[Promise] = Promise.AT_LEAST_ONCE_STABLE_KEY
    domain: ClassVar[str] = "aldebaran"

    def __init__(self, name: str, host: str, sender: str, recipients: list[str], port: int | None = None,
                 login: str | None = None, password: str | SecretStr | None = None, use_ssl: bool = False,
                 starttls: bool = False, timeout: float = 30.0, ca_file: str | None = None, *,
                 concurrency: int = DEFAULT_CONCURRENCY, max_run: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency, max_run=max_run)
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
        ``to`` (recipients), ``ca_file`` (a private CA for TLS) and ``concurrency`` (SMTP sessions at once
        in a ``send_many``)."""
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
            concurrency=conn.extra_int("concurrency", DEFAULT_CONCURRENCY, maximum=256),
        )

    def __repr__(self) -> str:
        tls = "ssl" if self.use_ssl else "starttls" if self.starttls else "plain"
        return f"EmailChannel(name={self.name!r}, target='{self.host}:{self.port}', tls={tls!r}, login={self.login!r})"

    def message_id(self, idempotency_key: str) -> str:
        return f"<{idempotency_key}@{self.domain}>"

    def message(self, alert: Alert, idempotency_key: str) -> EmailMessage:
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

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        msg = self.message(alert, idempotency_key)
        where = f"email {self.name} ({self.host}:{self.port})"
        t0 = time.monotonic()
        client: _SMTP | _SMTP_SSL | None = None
        try:
            if self.use_ssl:
                client = _SMTP_SSL(self.host, self.port, timeout=self.timeout, context=self._tls_context())
            else:
                client = _SMTP(self.host, self.port, timeout=self.timeout)
            client.ehlo()
            if self.starttls:
                client.starttls(context=self._tls_context())
                client.ehlo()
            if self.login:
                client.login(self.login, self._password.get_secret_value())
            refused = client.send_message(msg)
            _quit(client)
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _ in exc.recipients.values()]
            kind = RetryableError if codes and all(400 <= c < 500 for c in codes) else PermanentError
            raise kind(f"{where}: every recipient refused (SMTP {sorted(set(codes))})") from None
        except smtplib.SMTPResponseException as exc:  # sender refused, data refused, auth failed, ...
            kind = RetryableError if 400 <= exc.smtp_code < 500 else PermanentError
            raise kind(f"{where}: SMTP {exc.smtp_code} {one_line(_decode(exc.smtp_error), 200)}") from None
        except smtplib.SMTPNotSupportedError as exc:
            raise PermanentError(f"{where}: {exc} (check disable_tls / login)") from None
        except (smtplib.SMTPException, OSError) as exc:  # refused, disconnected, timeouts, TLS failures
            if client is not None and client.data_sent:  # no reply to the message: it may be accepted
                raise OutcomeUnknown(f"{where}: {type(exc).__name__} after DATA, the server may have accepted "
                                     f"the message: {one_line(exc, 200)}") from None
            raise RetryableError(f"{where}: {type(exc).__name__}: {one_line(exc, 200)}") from None
        finally:
            if client is not None:
                client.close()  # no QUIT after a failure: a silent server would cost another timeout
        receipt = {"message_id": str(msg["Message-ID"]), "recipients": self.recipients, "elapsed_ms": elapsed_ms(t0)}
        if refused:
            receipt["refused"] = {rcpt: code for rcpt, (code, _) in refused.items()}
        return receipt


def _quit(client: smtplib.SMTP) -> None:
    """End the session; a failed QUIT only closes the socket (whatever was sent stands as answered)."""
    try:
        client.quit()
    except (smtplib.SMTPException, OSError):
        client.close()


def _decode(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
