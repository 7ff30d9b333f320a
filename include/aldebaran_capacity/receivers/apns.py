"""A fake Apple Push Notification service provider API, for tests and benchmarks: HTTP/2 over TLS (ALPN
``h2``), as APNs serves it, built on the ``h2`` protocol library on the receiver's own event loop.

What it keeps of the published contract (developer.apple.com, "Sending notification requests to APNs",
"Establishing a token-based connection to APNs"):

- ``POST /3/device/<device token>`` with ``authorization: bearer <provider token>``: an ES256 JWT with
  ``kid`` = the key id and ``iss`` = the team id, signed by the team's key. A token that does not verify →
  403 ``InvalidProviderToken``; one older than an hour (or one it had seen when :meth:`FakeApns.expire_tokens` was called) →
  403 ``ExpiredProviderToken``;
- ``apns-topic`` must be the app's bundle id (400 ``MissingTopic`` / ``TopicDisallowed``), the device token
  one it knows (400 ``BadDeviceToken``), ``apns-collapse-id`` at most 64 bytes (400 ``BadCollapseId``),
  ``apns-id`` a canonical UUID (400 ``BadMessageId``), the payload a JSON object of at most 4 KB
  (400 ``PayloadEmpty`` / 413 ``PayloadTooLarge``);
- 200 with the ``apns-id`` header (the request's, else a new one); errors are ``{"reason": ...}``;
- no deduplication: every accepted notification is one, counted per ``apns-collapse-id`` (the channel uses
  the alert id), a repeat recorded in `repeats`, so "0 twice" is checkable;
- ``fail_next(n, status)``: 429 ``TooManyRequests``, 500 ``InternalServerError``, 503 ``ServiceUnavailable``,
  410 ``Unregistered``; ``delay_next(n, s)`` holds answers back (timeouts).
"""

from __future__ import annotations

import asyncio
import collections
import json
import secrets
import ssl
import time
import uuid
from pathlib import Path

from aldebaran_capacity.receivers.base import LOCALHOST, HttpReceiver

REASONS = {400: "BadRequest", 403: "Forbidden", 404: "BadPath", 405: "MethodNotAllowed", 410: "Unregistered",
           413: "PayloadTooLarge", 429: "TooManyRequests", 500: "InternalServerError", 503: "ServiceUnavailable"}
TOKEN_LIFETIME = 3600
MAX_PAYLOAD = 4096


class _H2Connection(asyncio.Protocol):
    """One client connection: HTTP/2 frames in, one answer per request stream out."""

    def __init__(self, fake: "FakeApns") -> None:
        import h2.config
        import h2.connection

        self.fake = fake
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.streams: dict[int, tuple[dict, bytearray]] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.fake._connections.add(self)
        self.h2.initiate_connection()
        transport.write(self.h2.data_to_send())

    def connection_lost(self, exc) -> None:
        self.fake._connections.discard(self)

    def data_received(self, data: bytes) -> None:
        import h2.events
        import h2.exceptions

        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.transport.write(self.h2.data_to_send())
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.streams[event.stream_id] = (dict(event.headers), bytearray())
            elif isinstance(event, h2.events.DataReceived):
                self.streams[event.stream_id][1].extend(event.data)
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                headers, body = self.streams.pop(event.stream_id)
                asyncio.ensure_future(self._answer(event.stream_id, headers, bytes(body)))
            elif isinstance(event, h2.events.StreamReset):
                self.streams.pop(event.stream_id, None)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.transport.close()
        self.transport.write(self.h2.data_to_send())

    async def _answer(self, stream_id: int, headers: dict, body: bytes) -> None:
        import h2.exceptions

        delay = self.fake._next_delay()
        if delay:
            await asyncio.sleep(delay)
        status, answer_headers, answer = self.fake.handle_push(headers, body, time.time())
        if self.transport.is_closing():
            return
        try:
            self.h2.send_headers(stream_id, [(":status", str(status)), ("content-length", str(len(answer))),
                                             *answer_headers.items()], end_stream=not answer)
            if answer:
                self.h2.send_data(stream_id, answer, end_stream=True)
        except h2.exceptions.StreamClosedError:  # the client gave up on this request
            return
        self.transport.write(self.h2.data_to_send())


class FakeApns(HttpReceiver):
    """APNs' provider API (module docstring) on 127.0.0.1, over TLS with the given certificate. `topic`
    is the app's bundle id, `device_tokens` the devices it knows (default: one fresh token)."""

    def __init__(self, tls: tuple[str | Path, str | Path], *, topic: str = "com.example.aldebaran",
                 device_tokens: list[str] | None = None, host: str = LOCALHOST, port: int = 0) -> None:
        super().__init__(host, port, tls)
        from cryptography.hazmat.primitives.asymmetric import ec

        self.topic = topic
        self.device_tokens = list(device_tokens or [secrets.token_hex(32)])
        self.team_id = secrets.token_hex(5).upper()
        self.key_id = secrets.token_hex(5).upper()
        self._signing_key = ec.generate_private_key(ec.SECP256R1())
        self._seen_tokens: set[str] = set()
        self._expired_tokens: set[str] = set()
        self._connections: set[_H2Connection] = set()
        self.notifications: list[tuple[dict, dict]] = []  # (headers, payload)
        self.per_collapse_id: collections.Counter = collections.Counter()
        self.statuses: collections.Counter = collections.Counter()

    @property
    def device_token(self) -> str:
        return self.device_tokens[0]

    def signing_key(self) -> str:
        """The team's .p8 signing key (PEM), as the channel's connection password holds it."""
        from cryptography.hazmat.primitives import serialization

        return self._signing_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()).decode()

    def expire_tokens(self) -> None:
        """Failure injection: every provider token issued so far is expired now."""
        with self.lock:
            self._expired_tokens |= self._seen_tokens

    async def _listen(self) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*map(str, self._tls))
        ctx.set_alpn_protocols(["h2"])
        self._listener = await asyncio.get_running_loop().create_server(
            lambda: _H2Connection(self), self.host, self.port, ssl=ctx, reuse_address=True, backlog=256)
        self.port = self._listener.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        self._listener.close()
        for conn in list(self._connections):
            conn.transport.abort()
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def handle_push(self, headers: dict, body: bytes, now: float) -> tuple[int, dict, bytes]:
        """(status, headers, body) of the answer to one request; runs on the event loop."""
        with self.lock:
            self.requests += 1
        status = self._next_failure()
        if status is not None:
            return self._fail(status, REASONS.get(status, "InternalServerError"))
        path, method = headers.get(":path", ""), headers.get(":method")
        if method != "POST":
            return self._fail(405, "MethodNotAllowed")
        if not path.startswith("/3/device/"):
            return self._fail(404, "BadPath")
        reason = self._token_problem(headers.get("authorization", ""), now)
        if reason:
            return self._fail(403, reason)
        checks = [
            (not headers.get("apns-topic"), 400, "MissingTopic"),
            (headers.get("apns-topic") not in (None, self.topic), 400, "TopicDisallowed"),
            (path.removeprefix("/3/device/") not in self.device_tokens, 400, "BadDeviceToken"),
            (len(headers.get("apns-collapse-id", "").encode()) > 64, 400, "BadCollapseId"),
            (len(body) > MAX_PAYLOAD, 413, "PayloadTooLarge"),
        ]
        for failed, code, why in checks:
            if failed:
                return self._fail(code, why)
        message_id = headers.get("apns-id") or str(uuid.uuid4())
        try:
            if str(uuid.UUID(message_id)) != message_id.lower():
                raise ValueError(message_id)
        except ValueError:
            return self._fail(400, "BadMessageId")
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            return self._fail(400, "PayloadEmpty")
        key = headers.get("apns-collapse-id") or message_id
        with self.lock:
            self.notifications.append((headers, payload))
            self.per_collapse_id[key] += 1
            self._record_receipt(key, now)
            self.statuses[200] += 1
        return 200, {"apns-id": message_id}, b""

    def _token_problem(self, authorization: str, now: float) -> str | None:
        import jwt

        if not authorization.startswith("bearer "):
            return "MissingProviderToken"
        token = authorization.removeprefix("bearer ")
        try:
            if jwt.get_unverified_header(token).get("kid") != self.key_id:
                return "InvalidProviderToken"
            claims = jwt.decode(token, self._signing_key.public_key(), algorithms=["ES256"], issuer=self.team_id,
                                options={"require": ["iat", "iss"]})
        except jwt.PyJWTError:
            return "InvalidProviderToken"
        with self.lock:
            self._seen_tokens.add(token)
            expired = token in self._expired_tokens
        if expired or now - claims["iat"] > TOKEN_LIFETIME:
            return "ExpiredProviderToken"
        return None

    def _fail(self, status: int, reason: str) -> tuple[int, dict, bytes]:
        with self.lock:
            self.statuses[status] += 1
        return status, {"content-type": "application/json"}, json.dumps({"reason": reason}).encode()
