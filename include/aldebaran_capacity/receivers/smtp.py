"""An SMTP server (aiosmtpd) that records every message it is given."""

from __future__ import annotations

import collections
import contextlib
import email
import email.message
import email.policy
import hmac
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aldebaran_capacity.receivers.base import LOCALHOST, FailureInjection, free_port


@dataclass
class ReceivedMail:
    message_id: str | None
    mail_from: str
    rcpt_tos: list[str]
    message: email.message.EmailMessage
    authenticated_as: str | None = None
    tls: bool = False
    received_at: float = field(default_factory=time.time)

    @property
    def text(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        return part.get_content() if part is not None else ""


class _SmtpHandler:
    def __init__(self, recorder: "SmtpRecorder") -> None:
        self.recorder = recorder

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 (aiosmtpd's naming)
        code = self.recorder._next_failure()
        if code is not None:
            return f"{code} injected failure"
        message = email.message_from_bytes(envelope.original_content or envelope.content, policy=email.policy.default)
        login = getattr(session.auth_data, "login", None) if session.authenticated else None
        mail = ReceivedMail(message.get("Message-ID"), envelope.mail_from, list(envelope.rcpt_tos), message,
                            login.decode() if isinstance(login, bytes) else login, session.ssl is not None)
        self.recorder._record(mail)
        return "250 OK"


class SmtpRecorder(FailureInjection):
    """An SMTP server (aiosmtpd) that records every message. `messages` in arrival order,
    `per_message_id` counts them by Message-ID. Optional STARTTLS (`tls` = cert, key) and AUTH
    (`credentials` = login, password; then required). ``fail_next(n, code)`` answers DATA with `code`."""

    def __init__(self, host: str = LOCALHOST, port: int = 0, tls: tuple[str | Path, str | Path] | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        super().__init__()
        self.host = host
        self.port = port or free_port(host)
        self._tls = tls
        self._credentials = credentials
        self._controller = None
        self.lock = threading.Lock()
        self.messages: list[ReceivedMail] = []
        self.per_message_id: collections.Counter = collections.Counter()

    def _record(self, mail: ReceivedMail) -> None:
        with self.lock:
            self.messages.append(mail)
            self.per_message_id[mail.message_id] += 1

    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        from aiosmtpd.smtp import AuthResult, LoginPassword

        if self._credentials and isinstance(auth_data, LoginPassword):
            login, password = self._credentials
            ok = hmac.compare_digest(auth_data.login, login.encode()) and \
                hmac.compare_digest(auth_data.password, password.encode())
            return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)
        return AuthResult(success=False, handled=False)

    def start(self) -> "SmtpRecorder":
        from aiosmtpd.controller import Controller

        kwargs: dict[str, Any] = {}
        if self._tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*map(str, self._tls))
            kwargs.update(tls_context=ctx, require_starttls=True)
        if self._credentials:
            kwargs.update(authenticator=self._authenticate, auth_required=True, auth_require_tls=bool(self._tls))
        self._controller = Controller(_SmtpHandler(self), hostname=self.host, port=self.port,
                                      server_hostname="aldebaran-test-smtp", ready_timeout=10, **kwargs)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @contextlib.contextmanager
    def down(self):
        """Inject an outage for the duration of the block: the port refuses connections."""
        self.stop()
        try:
            yield self
        finally:
            self.start()

    def by_message_id(self, message_id: str) -> list[ReceivedMail]:
        with self.lock:
            return [m for m in self.messages if m.message_id == message_id]
