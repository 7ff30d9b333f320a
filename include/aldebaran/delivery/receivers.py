"""Real local receivers for the delivery channels: tests, demos and benchmarks (not for production).

Each listens on 127.0.0.1 with an ephemeral port in a background thread, has start()/stop() and is a
context manager, records what it received and counts repeats, so a test can assert "exactly once":

- :class:`WebhookReceiver`: HTTP(S) endpoint that verifies ``X-Aldebaran-Signature`` (401 if wrong),
  counts requests per ``Idempotency-Key`` and answers 409 for a key it already accepted.
- :class:`SmtpRecorder`: an aiosmtpd SMTP server (optional STARTTLS and AUTH) recording each message
  with its Message-ID.
- :class:`SmsProvider`: a Twilio-style Messages API (basic auth, form POST, JSON ``sid``) counting
  sends per (recipient, text), i.e. per alert.

Failure injection is explicit in the method names: ``fail_next(n, status)``, ``delay_next(n, seconds)``
and ``down()`` (a context manager: the port refuses connections and open connections are dropped
until the block ends).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import datetime as dt
import email
import email.message
import email.policy
import hmac
import json
import logging
import secrets
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from aldebaran.delivery.channels import verify_signature

log = logging.getLogger(__name__)

LOCALHOST = "127.0.0.1"


def self_signed_cert(directory: str | Path, host: str = LOCALHOST) -> tuple[Path, Path]:
    """A throwaway certificate for `host` (and localhost) and its key, as PEM files in `directory`.
    The certificate is its own CA: pass its path as the channel's CA file (extra ``verify``/``ca_file``)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aldebaran test receiver")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host)),
                                                    x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "receiver-cert.pem", directory / "receiver-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


def _free_port(host: str = LOCALHOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class _FailureInjection:
    """Queued failures, consumed one per request: ``fail_next`` and ``delay_next``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: collections.deque = collections.deque()
        self._delays: collections.deque = collections.deque()

    def fail_next(self, n: int, status: int) -> None:
        """Inject a failure: answer the next `n` requests with `status` (they are not processed)."""
        with self._lock:
            self._failures.extend([status] * n)

    def delay_next(self, n: int, seconds: float) -> None:
        """Inject slowness: wait `seconds` before handling each of the next `n` requests (timeouts)."""
        with self._lock:
            self._delays.extend([seconds] * n)

    def _next_failure(self) -> int | None:
        with self._lock:
            return self._failures.popleft() if self._failures else None

    def _next_delay(self) -> float:
        with self._lock:
            return self._delays.popleft() if self._delays else 0.0


# --- HTTP receivers -----------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # Clients that time out or vanish (as the failure tests make them) are expected here.
        log.debug("%s: error serving %s", type(self.receiver).__name__, client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real endpoints (and the channels' sessions)
    timeout = 30
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    server_version = "aldebaran-receiver/0.1"

    def setup(self) -> None:
        super().setup()
        self.server.receiver._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.receiver._track(self.connection, add=False)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        receiver: _HttpReceiver = self.server.receiver
        if receiver.is_down:  # injected outage: drop the connection without an answer
            self.close_connection = True
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.reply(411, {"error": "Content-Length required"})
            return
        body = self.rfile.read(int(length))
        if len(body) < int(length):
            # The client went away mid-request (e.g. a dispatch worker SIGKILLed between writing the
            # headers and the body): like any real HTTP server, never hand a truncated body to the
            # application — it would fail the signature check and be miscounted as a forgery.
            with receiver.lock:
                receiver.incomplete_requests += 1
            self.close_connection = True
            return
        delay = receiver._next_delay()
        if delay:
            time.sleep(delay)
        receiver.handle(self, body)

    def reply(self, status: int, payload: Any, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s %s", self.server.receiver.__class__.__name__, fmt % args)


class _HttpReceiver(_FailureInjection):
    """A ThreadingHTTPServer on 127.0.0.1 in a background thread; HTTPS when given a certificate."""

    def __init__(self, host: str = LOCALHOST, port: int = 0, tls: tuple[str | Path, str | Path] | None = None) -> None:
        super().__init__()
        self.host = host
        self.port = port
        self._tls = tls
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set = set()
        self._conns_lock = threading.Lock()
        self._down = False
        self.lock = threading.Lock()  # guards what subclasses record
        self.incomplete_requests = 0  # bodies shorter than their Content-Length (client gone): dropped

    # --- lifecycle ---
    def start(self) -> "_HttpReceiver":
        server = _Server((self.host, self.port), _Handler)  # SO_REUSEADDR: rebinding after down() works
        server.receiver = self
        if self._tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*map(str, self._tls))
            # The handshake happens in the connection's own thread, on its first read.
            server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"{type(self).__name__}:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._drop_connections()
        self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self.host}:{self.port}"

    # --- failure injection: an outage ---
    @property
    def is_down(self) -> bool:
        return self._down

    @contextlib.contextmanager
    def down(self):
        """Inject an outage for the duration of the block: new connections are refused, open
        keep-alive connections are dropped; the same port serves again afterwards."""
        self._down = True
        self.stop()
        try:
            yield self
        finally:
            self._down = False
            self.start()

    def _track(self, conn, add: bool) -> None:
        with self._conns_lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def _drop_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle(self, request: _Handler, body: bytes) -> None:
        raise NotImplementedError


@dataclass
class WebhookDelivery:
    idempotency_key: str
    alert: Any
    body: bytes
    headers: dict
    request_id: str
    received_at: float = field(default_factory=time.time)


class WebhookReceiver(_HttpReceiver):
    """An alert webhook endpoint. Checks the HMAC signature (401 if missing or wrong), counts every
    request per Idempotency-Key in `requests_per_key`, accepts a key once (201 + ``X-Request-Id``) and
    answers 409 to later requests with that key. `accepted` holds what it accepted, by key."""

    def __init__(self, secret: str, host: str = LOCALHOST, port: int = 0,
                 tls: tuple[str | Path, str | Path] | None = None) -> None:
        super().__init__(host, port, tls)
        self._secret = secret
        self.accepted: dict[str, WebhookDelivery] = {}
        self.requests_per_key: collections.Counter = collections.Counter()
        self.rejected_signatures = 0
        self.statuses: collections.Counter = collections.Counter()

    def handle(self, request: _Handler, body: bytes) -> None:
        key = request.headers.get("Idempotency-Key")
        with self.lock:
            if key:
                self.requests_per_key[key] += 1
        status = self._next_failure()
        if status is not None:
            self._answer(request, status, {"error": "injected failure"})
            return
        if not verify_signature(body, request.headers.get("X-Aldebaran-Signature"), self._secret):
            with self.lock:
                self.rejected_signatures += 1
            self._answer(request, 401, {"error": "bad signature"})
            return
        if not key:
            self._answer(request, 400, {"error": "Idempotency-Key required"})
            return
        try:
            alert = json.loads(body)
        except ValueError:
            self._answer(request, 400, {"error": "body is not JSON"})
            return
        with self.lock:
            known = self.accepted.get(key)
            if known is None:
                self.accepted[key] = WebhookDelivery(key, alert, body, dict(request.headers.items()), uuid.uuid4().hex)
        if known is not None:
            self._answer(request, 409, {"error": "already delivered", "id": known.request_id},
                         {"X-Request-Id": known.request_id})
            return
        self._answer(request, 201, {"id": self.accepted[key].request_id}, {"X-Request-Id": self.accepted[key].request_id})

    def _answer(self, request: _Handler, status: int, payload: Any, headers: dict | None = None) -> None:
        with self.lock:
            self.statuses[status] += 1
        request.reply(status, payload, headers)


@dataclass
class SmsMessage:
    sid: str
    to: str
    sender: str
    body: str
    account_sid: str
    received_at: float = field(default_factory=time.time)


class SmsProvider(_HttpReceiver):
    """A Twilio-style Messages API: ``POST /2010-04-01/Accounts/{sid}/Messages.json`` with basic auth
    (account SID, auth token) and form fields To, From, Body → 201 ``{"sid": "SM…", "status": "queued"}``.
    Like the real thing it cannot deduplicate: every accepted POST is a message. `sends` counts them
    per (To, Body) — one alert's text — so a test can assert that no alert was ever sent twice."""

    def __init__(self, account_sid: str | None = None, auth_token: str | None = None, host: str = LOCALHOST,
                 port: int = 0) -> None:
        super().__init__(host, port)
        self.account_sid = account_sid or "AC" + secrets.token_hex(16)
        self.auth_token = auth_token or secrets.token_urlsafe(24)
        self.messages: list[SmsMessage] = []
        self.sends: collections.Counter = collections.Counter()
        self.unauthorized = 0

    @property
    def path(self) -> str:
        return f"/2010-04-01/Accounts/{self.account_sid}/Messages.json"

    def _authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return hmac.compare_digest(user.encode(), self.account_sid.encode()) and \
            hmac.compare_digest(password.encode(), self.auth_token.encode())

    def handle(self, request: _Handler, body: bytes) -> None:
        if not self._authorized(request.headers.get("Authorization")):
            with self.lock:
                self.unauthorized += 1
            request.reply(401, {"code": 20003, "message": "Authentication Error - invalid username", "status": 401},
                          {"WWW-Authenticate": 'Basic realm="Twilio API"'})
            return
        if request.path.split("?", 1)[0] != self.path:
            request.reply(404, {"code": 20404, "message": "The requested resource was not found", "status": 404})
            return
        status = self._next_failure()
        if status is not None:
            request.reply(status, {"code": 20500 if status >= 500 else 20429, "message": "injected failure", "status": status})
            return
        form = {k: v[0] for k, v in parse_qs(body.decode(errors="replace"), keep_blank_values=True).items()}
        for required, code in (("To", 21604), ("From", 21603), ("Body", 21602)):
            if not form.get(required):
                request.reply(400, {"code": code, "message": f"A '{required}' is required.", "status": 400})
                return
        message = SmsMessage("SM" + uuid.uuid4().hex, form["To"], form["From"], form["Body"], self.account_sid)
        with self.lock:
            self.messages.append(message)
            self.sends[(message.to, message.body)] += 1
        request.reply(201, {"sid": message.sid, "status": "queued", "to": message.to, "from": message.sender,
                            "body": message.body, "account_sid": self.account_sid,
                            "date_created": dt.datetime.now(dt.UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")})


# --- SMTP --------------------------------------------------------------------------------------------
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


class SmtpRecorder(_FailureInjection):
    """An SMTP server (aiosmtpd) that records every message. `messages` in arrival order,
    `per_message_id` counts them by Message-ID. Optional STARTTLS (`tls` = cert, key) and AUTH
    (`credentials` = login, password; then required). ``fail_next(n, code)`` answers DATA with `code`."""

    def __init__(self, host: str = LOCALHOST, port: int = 0, tls: tuple[str | Path, str | Path] | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        super().__init__()
        self.host = host
        self.port = port or _free_port(host)
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
