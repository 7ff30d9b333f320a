"""What the receivers share: failure injection, a throwaway certificate, and the HTTP server base.

The HTTP receivers run aiohttp's low-level server (no router, no access log) on their own event loop
(uvloop when installed) in a background thread, so a test or a benchmark drives them from plain
synchronous code. The handlers never block the loop: an injected delay is an ``asyncio.sleep``, and
what they record is guarded by one ``threading.Lock`` the test thread can take to read a snapshot.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import itertools
import json
import logging
import secrets
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

LOCALHOST = "127.0.0.1"
STATS_PATH = "/_stats"


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


def free_port(host: str = LOCALHOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (libuv: less work per socket event), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def json_response(status: int, payload: Any, headers: dict | None = None) -> web.Response:
    return web.Response(status=status, body=json.dumps(payload).encode(), content_type="application/json",
                        headers=headers)


class FailureInjection:
    """Queued failures, consumed one per request: ``fail_next`` and ``delay_next``."""

    def __init__(self) -> None:
        self._injection_lock = threading.Lock()
        self._failures: collections.deque = collections.deque()
        self._delays: collections.deque = collections.deque()

    def fail_next(self, n: int, status: int) -> None:
        """Inject a failure: answer the next `n` requests with `status` (they are not processed)."""
        with self._injection_lock:
            self._failures.extend([status] * n)

    def delay_next(self, n: int, seconds: float) -> None:
        """Inject slowness: wait `seconds` before handling each of the next `n` requests (timeouts)."""
        with self._injection_lock:
            self._delays.extend([seconds] * n)

    def _next_failure(self) -> int | None:
        # Read without the lock first: the common case (nothing injected) stays one attribute check.
        if not self._failures:
            return None
        with self._injection_lock:
            return self._failures.popleft() if self._failures else None

    def _next_delay(self) -> float:
        if not self._delays:
            return 0.0
        with self._injection_lock:
            return self._delays.popleft() if self._delays else 0.0


class HttpReceiver(FailureInjection):
    """An aiohttp server on 127.0.0.1 (HTTPS when given a certificate) on its own event loop in a
    background thread.

    Records, per alert id, the time of its first receipt (`received_at`, ``time.time()``) and how often
    it came again (`repeats`); `requests` counts every request but ``GET /_stats``, which answers
    :meth:`stats` as JSON (``?summary=1``: without `received_at`). Subclasses implement :meth:`handle`."""

    def __init__(self, host: str = LOCALHOST, port: int = 0, tls: tuple[str | Path, str | Path] | None = None) -> None:
        super().__init__()
        self.host = host
        self.port = port
        self._tls = tls
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._web: web.Server | None = None
        self._listener: asyncio.AbstractServer | None = None
        self._down = False
        self.lock = threading.Lock()  # guards what is recorded
        self.requests = 0
        self.incomplete_requests = 0  # bodies shorter than their Content-Length (client gone): dropped
        self.received_at: dict[str, float] = {}
        self.repeats: collections.Counter = collections.Counter()
        # Request ids: unique per receiver, cheaper than a uuid4 per request.
        self._id_prefix = secrets.token_hex(6)
        self._ids = itertools.count(1)

    # --- lifecycle ---
    def start(self) -> "HttpReceiver":
        loop = new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=f"{type(self).__name__}:{self.port}", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._listen(), loop).result(timeout=10)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()
            raise
        self._loop, self._thread = loop, thread
        return self

    async def _listen(self) -> None:
        ctx = None
        if self._tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*map(str, self._tls))
        self._web = web.Server(self._serve, access_log=None)
        # reuse_address: the same port binds again right after down() or stop().
        self._listener = await asyncio.get_running_loop().create_server(
            self._web, self.host, self.port, ssl=ctx, reuse_address=True, backlog=1024)
        self.port = self._listener.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        self._listener.close()
        for conn in self._web.connections:  # open keep-alive connections are dropped, not drained
            conn.force_close()
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for task in pending:  # e.g. requests in an injected delay
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def stop(self) -> None:
        if self._loop is None:
            return
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()

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

    # --- recording ---
    def _new_request_id(self) -> str:
        return f"{self._id_prefix}{next(self._ids):08x}"

    def _record_receipt(self, alert_id: str, now: float) -> bool:
        """Call with `lock` held. True the first time `alert_id` is received, else count a repeat."""
        if alert_id in self.received_at:
            self.repeats[alert_id] += 1
            return False
        self.received_at[alert_id] = now
        return True

    def stats(self, summary: bool = False) -> dict:
        """``received`` (unique alert ids), ``duplicates`` (repeats), ``requests``, and unless `summary`,
        ``received_at`` (alert id → epoch seconds of its first receipt) and ``repeats`` (alert id → receipts
        after the first, those with any: a verdict counts receipts per key, chaos.receipts)."""
        with self.lock:
            out: dict[str, Any] = {"received": len(self.received_at), "duplicates": sum(self.repeats.values()),
                                   "requests": self.requests, "incomplete_requests": self.incomplete_requests}
            if not summary:
                out["received_at"] = dict(self.received_at)
                out["repeats"] = dict(self.repeats)
        return out

    # --- request handling ---
    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "GET" and request.path == STATS_PATH:
            summary = request.query.get("summary", "") not in ("", "0", "false")
            return json_response(200, self.stats(summary=summary))
        with self.lock:
            self.requests += 1
        body = b""
        if request.method == "POST":
            if request.content_length is None:
                return json_response(411, {"error": "Content-Length required"})
            try:
                body = await request.read()
            except ConnectionResetError:
                # The client went away mid-request (e.g. a dispatch worker SIGKILLed between writing
                # the headers and the body): never hand a truncated body to the application — it
                # would fail the signature check and be miscounted as a forgery.
                with self.lock:
                    self.incomplete_requests += 1
                return web.Response(status=400)  # nobody reads it: the connection is gone
        delay = self._next_delay()
        if delay:
            await asyncio.sleep(delay)
        return self.handle(request, body, time.time())

    def handle(self, request: web.BaseRequest, body: bytes, now: float) -> web.StreamResponse:
        """Answer one request (`body` read whole, `now` its arrival time); runs on the event loop."""
        raise NotImplementedError
