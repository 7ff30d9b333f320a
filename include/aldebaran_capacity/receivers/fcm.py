"""A fake Firebase Cloud Messaging HTTP v1 API with its OAuth 2 token endpoint, for tests and benchmarks.

What it keeps of the published contracts (firebase.google.com, FCM HTTP v1; Google's OAuth 2 for service
accounts):

- ``POST /token`` (the service account's ``token_uri``): ``grant_type`` = the JWT bearer grant and an RS256
  ``assertion`` signed by the service account's key, with ``iss`` = its ``client_email``, ``aud`` = the token
  URI and the firebase.messaging scope → 200 ``{"access_token", "expires_in", "token_type": "Bearer"}``;
  anything else → 400 ``{"error": "invalid_grant"}``;
- ``POST /v1/projects/<project>/messages:send`` with ``Authorization: Bearer <access token>`` (else 401
  ``UNAUTHENTICATED``), a ``message`` naming exactly one of ``token``/``topic``/``condition`` (else 400
  ``INVALID_ARGUMENT``), ``data`` values strings → 200 ``{"name": "projects/<p>/messages/<id>"}``;
- no deduplication: every accepted message is a message, counted per collapse key (the channel uses the
  alert id); a repeat is recorded as such in `repeats`, so "0 twice" is checkable;
- ``fail_next(n, 429)`` answers ``QUOTA_EXCEEDED`` with ``Retry-After``, 5xx ``UNAVAILABLE``/``INTERNAL``.

:meth:`FakeFcm.service_account` hands out a service-account JSON key (a fresh RSA key) whose ``token_uri``
is this fake's, as the channel's connection password.
"""

from __future__ import annotations

import collections
import json
import secrets
import time
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from aldebaran_capacity.receivers.base import LOCALHOST, HttpReceiver, json_response

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "SENDER_ID_MISMATCH", 404: "NOT_FOUND",
                429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


class FakeFcm(HttpReceiver):
    """FCM HTTP v1 and its token endpoint (module docstring) on 127.0.0.1, for project `project_id`."""

    def __init__(self, project_id: str = "aldebaran-test", *, token_lifetime: int = 3600, host: str = LOCALHOST,
                 port: int = 0) -> None:
        super().__init__(host, port)
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.project_id = project_id
        self.client_email = f"aldebaran@{project_id}.iam.gserviceaccount.com"
        self.key_id = secrets.token_hex(20)
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.token_lifetime = token_lifetime
        self.access_tokens: dict[str, float] = {}  # token → expiry (epoch s)
        self.messages: list[dict] = []
        self.per_collapse_key: collections.Counter = collections.Counter()
        self.token_requests = 0
        self.statuses: collections.Counter = collections.Counter()

    def service_account(self) -> dict[str, str]:
        """A service-account JSON key for this fake (what the channel's connection password holds)."""
        from cryptography.hazmat.primitives import serialization

        pem = self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()).decode()
        return {"type": "service_account", "project_id": self.project_id, "private_key_id": self.key_id,
                "private_key": pem, "client_email": self.client_email, "token_uri": f"{self.url}/token"}

    def expire_tokens(self) -> None:
        """Failure injection: every access token handed out so far is expired now."""
        with self.lock:
            self.access_tokens.clear()

    def handle(self, request: web.BaseRequest, body: bytes, now: float) -> web.StreamResponse:
        if request.method == "POST" and request.path == "/token":
            return self._token(body, now)
        if request.method != "POST" or request.path != f"/v1/projects/{self.project_id}/messages:send":
            return self._error(404, "Requested entity was not found.")
        bearer = request.headers.get("Authorization", "")
        with self.lock:
            expiry = self.access_tokens.get(bearer.removeprefix("Bearer "))
        if not bearer.startswith("Bearer ") or expiry is None or expiry < now:
            return self._error(401, "Request had invalid authentication credentials.")
        status = self._next_failure()
        if status is not None:
            return self._error(status, "injected failure", {"Retry-After": "1"} if status == 429 else None)
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        problem = self._problem(message)
        if problem:
            return self._error(400, problem)
        key = (message.get("android") or {}).get("collapse_key") or (message.get("data") or {}).get("alert_id")
        name = f"projects/{self.project_id}/messages/0:{self._new_request_id()}"
        with self.lock:
            self.messages.append(message)
            if key:
                self.per_collapse_key[key] += 1
                self._record_receipt(key, now)
        return self._answer(200, {"name": name})

    @staticmethod
    def _problem(message: Any) -> str | None:
        if not isinstance(message, dict):
            return "Invalid JSON payload received. 'message' is required."
        targets = [t for t in ("token", "topic", "condition") if message.get(t)]
        if len(targets) != 1:
            return "Exactly one of token, topic or condition must be specified."
        data = message.get("data")
        if data is not None and not (isinstance(data, dict) and all(isinstance(v, str) for v in data.values())):
            return "Invalid value at 'message.data': values must be strings."
        return None

    def _token(self, body: bytes, now: float) -> web.StreamResponse:
        import jwt

        form = dict(parse_qsl(body.decode(errors="replace")))
        with self.lock:
            self.token_requests += 1
        if form.get("grant_type") != JWT_GRANT or not form.get("assertion"):
            return self._answer(400, {"error": "unsupported_grant_type"})
        try:
            claims = jwt.decode(form["assertion"], self._key.public_key(), algorithms=["RS256"],
                                audience=f"{self.url}/token", issuer=self.client_email)
        except jwt.PyJWTError as exc:
            return self._answer(400, {"error": "invalid_grant", "error_description": type(exc).__name__})
        if claims.get("scope") != SCOPE:
            return self._answer(400, {"error": "invalid_scope"})
        token = "ya29." + secrets.token_urlsafe(32)
        with self.lock:
            self.access_tokens[token] = time.time() + self.token_lifetime
        return self._answer(200, {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"})

    def _error(self, status: int, message: str, headers: dict | None = None) -> web.StreamResponse:
        name = STATUS_NAMES.get(status, "UNAVAILABLE" if status >= 500 else "FAILED_PRECONDITION")
        return self._answer(status, {"error": {"code": status, "message": message, "status": name}}, headers)

    def _answer(self, status: int, payload: Any, headers: dict | None = None) -> web.StreamResponse:
        with self.lock:
            self.statuses[status] += 1
        return json_response(status, payload, headers)
