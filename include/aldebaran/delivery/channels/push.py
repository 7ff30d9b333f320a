"""Push channels: Firebase Cloud Messaging (HTTP v1) and Apple Push Notification service (HTTP/2).

Neither provider deduplicates. Each send is a notification on a phone, and neither API can say afterwards
whether a message was sent. So both kinds are in-doubt channels, like SMS without a lookup: a send that
may have happened (a timeout or a lost connection after the request was written, a crash between send
and record) becomes IN_DOUBT for an operator and is never re-sent automatically. Runs are one send window
(``max_run`` = ``concurrency``), and each alert gets a sent marker in the ledger, so a repeat of its id is
never pushed twice. What the providers do offer is collapsing, and both kinds use it with the alert id:
FCM's ``android.collapse_key`` and APNs' ``apns-collapse-id`` make a device that is offline keep only one
of several messages with one id, and make the notification centre replace rather than add (APNs).
Collapsing makes a repeat less visible. It is not deduplication, and nothing here counts on it.

**fcm** (:class:`FcmChannel`): ``POST {base}/v1/projects/{project}/messages:send`` (base default
https://fcm.googleapis.com) with an OAuth 2 access token from the service account in the connection's
password (the Google service-account JSON key: a JWT signed with its key, exchanged at its ``token_uri``
and kept until a minute before it expires). Body ``{"message": {"token"|"topic": ..., "notification":
{"title", "body"}, "data": {<alert fields as strings>}, "android": {"collapse_key": <alert_id>},
"apns": {"headers": {"apns-collapse-id": <alert_id>}}}}``; 200 → delivered (receipt: the message name).

**apns** (:class:`ApnsChannel`): ``POST {base}/3/device/{device token}`` over HTTP/2 (APNs speaks nothing
else; base default https://api.push.apple.com, the sandbox is https://api.sandbox.push.apple.com) with a
provider token (ES256 JWT of the team id, key id = the connection's login, signed with the .p8 key in its
password, renewed every 50 minutes: Apple refuses renewals more often than every 20 and tokens older than
60), headers ``apns-topic`` (the app's bundle id), ``apns-push-type: alert``, ``apns-collapse-id:
<alert_id>`` and ``apns-id`` (a UUID made from the alert id, so the provider's logs name it); 200 →
delivered (receipt: ``apns-id``).

Both: 429 and 5xx → retry (nothing was delivered), an expired token → renewed and retried, 400/403/404/410
(a bad payload, key or device token; an unregistered device) → permanent.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import SecretStr

from aldebaran.delivery.channels.base import Channel, Promise, register
from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.channels.http import HttpClient, target
from aldebaran.delivery.channels.provider import answer_json, is_retryable, post_json, status_error
from aldebaran.delivery.channels.text import email_subject, one_line, sms_text
from aldebaran.delivery.exceptions import OutcomeUnknown, PermanentError, RetryableError
from aldebaran.model import Alert

FCM_URL = "https://fcm.googleapis.com"
FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
APNS_URL = "https://api.push.apple.com"
APNS_TOKEN_SECONDS = 50 * 60  # Apple: renew no more often than every 20 min, no later than every 60
PUSH_IN_DOUBT = ("IN_DOUBT for an operator, never re-sent automatically: the provider cannot deduplicate; "
                 "the alert id is the collapse key (a repeat replaces, it is not suppressed)")
DATA_FIELDS = ("alert_id", "kind", "order_id", "client", "stock", "requested", "purchased")


def _data(alert: Alert) -> dict[str, str]:
    """The alert's fields as a push data map (FCM takes string values only)."""
    return {name: str(getattr(alert, name)) for name in DATA_FIELDS if getattr(alert, name) is not None}


def apns_id(alert_id: str) -> str:
    """APNs' ``apns-id`` (a canonical UUID) for an alert: the alert id itself when it is 32 hex digits
    (the auditor's ids are), else a name-based UUID of it."""
    try:
        return str(uuid.UUID(hex=alert_id))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"aldebaran:{alert_id}"))


# --- FCM --------------------------------------------------------------------------------------------
@register("fcm", conn_types=("firebase",))
class FcmChannel(Channel):
    """FCM HTTP v1 (module docstring): cannot deduplicate; the alert id is the collapse key."""

    can_dedupe: ClassVar[bool] = False
    in_doubt_policy: ClassVar[str] = PUSH_IN_DOUBT
    provider_rate: ClassVar[str | None] = "600,000 messages/min per project (FCM's default quota; 429 above)"
    delivery_promise: ClassVar[Promise] = Promise.AT_MOST_ONCE_IN_DOUBT

    def __init__(self, name: str, service_account: Mapping[str, Any], *, token: str | None = None,
                 topic: str | None = None, base_url: str = FCM_URL, project_id: str | None = None,
                 timeout: float = 10.0, verify: bool | str = True, concurrency: int = 16,
                 max_run: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency, max_run=max_run)
        if (token is None) == (topic is None):
            raise ValueError("name exactly one recipient: a device registration token or a topic")
        missing = [k for k in ("client_email", "private_key", "token_uri") if not service_account.get(k)]
        if missing:
            raise ValueError(f"the service-account key has no {', '.join(missing)}")
        self.project_id = project_id or service_account.get("project_id")
        if not self.project_id:
            raise ValueError("no project id (extra project_id, or project_id in the service-account key)")
        self._account = dict(service_account)
        self.recipient = {"token": token} if token is not None else {"topic": topic}
        self.url = f"{base_url.rstrip('/')}/v1/projects/{self.project_id}/messages:send"
        self.target = target(self.url)
        self.timeout = timeout
        self._http = HttpClient(f"fcm-{name}", limit=concurrency, verify=verify)
        self._access: tuple[str, float] | None = None  # (token, monotonic expiry)
        self._refresh: asyncio.Lock | None = None

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "FcmChannel":
        """password = the service-account JSON key; host = the API (default https://fcm.googleapis.com);
        extras ``token`` (a device registration token) or ``topic``, ``project_id`` (default: the key's),
        ``timeout``, ``verify``, ``concurrency``."""
        try:
            account = json.loads(conn.secret("the service-account JSON key").get_secret_value())
        except ValueError:
            raise conn.error("field password", "must be the service-account JSON key") from None
        if not isinstance(account, dict):
            raise conn.error("field password", "must be the service-account JSON key (an object)")
        return cls(name, account, token=conn.extra_str("token"), topic=conn.extra_str("topic"),
                   base_url=conn.base_url(default_scheme="https") if conn.host else FCM_URL,
                   project_id=conn.extra_str("project_id"), timeout=conn.extra_seconds("timeout", 10.0),
                   verify=conn.extra_verify(), concurrency=conn.extra_int("concurrency", 16, maximum=256))

    def __repr__(self) -> str:
        return f"FcmChannel(name={self.name!r}, target={self.target!r}, project={self.project_id!r})"

    def message(self, alert: Alert) -> dict:
        return {"message": {**self.recipient,
                            "notification": {"title": email_subject(alert), "body": sms_text(alert)},
                            "data": _data(alert), "android": {"collapse_key": alert.alert_id},
                            "apns": {"headers": {"apns-collapse-id": alert.alert_id}}}}

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        return self._http.run(self._send(alert))

    async def _send(self, alert: Alert) -> dict:
        where = f"fcm {self.name} ({self.target})"
        for renewed in (False, True):
            bearer = await self._access_token(force=renewed)
            resp, elapsed = await post_json(self._http, where, self.url, self.message(alert), timeout=self.timeout,
                                            headers={"Authorization": f"Bearer {bearer}"})
            if resp.status != 401 or renewed:  # 401: the token expired early; renew it once
                break
        if 200 <= resp.status < 300:
            return {"status": resp.status, "name": answer_json(resp).get("name"), "elapsed_ms": elapsed}
        raise status_error(where, resp.status, resp.body, resp.headers, self._secrets())

    async def _access_token(self, force: bool = False) -> str:
        if self._refresh is None:
            self._refresh = asyncio.Lock()
        async with self._refresh:
            if not force and self._access is not None and time.monotonic() < self._access[1]:
                return self._access[0]
            self._access = await self._exchange()
            return self._access[0]

    async def _exchange(self) -> tuple[str, float]:
        """An access token for the service account (OAuth 2 JWT bearer grant, RFC 7523)."""
        import jwt

        now = int(time.time())
        claims = {"iss": self._account["client_email"], "scope": FCM_SCOPE, "aud": self._account["token_uri"],
                  "iat": now, "exp": now + 3600}
        try:
            assertion = jwt.encode(claims, self._account["private_key"], algorithm="RS256",
                                   headers={"kid": self._account.get("private_key_id")})
        except (ValueError, TypeError, jwt.PyJWTError) as exc:
            raise PermanentError(f"fcm {self.name}: the service-account key cannot sign ({type(exc).__name__})") from None
        where = f"fcm {self.name} token ({target(self._account['token_uri'])})"
        try:
            resp = await self._http.request(where, "POST", self._account["token_uri"], timeout=self.timeout, data={
                "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion})
        except OutcomeUnknown as exc:  # a token request pushes nothing: the alert is not in doubt
            raise RetryableError(str(exc)) from None
        answer = answer_json(resp)
        if resp.status != 200 or not answer.get("access_token"):
            if resp.status == 200 or is_retryable(resp.status):
                raise RetryableError(f"{where}: HTTP {resp.status} without an access token")
            raise PermanentError(f"{where}: HTTP {resp.status} {one_line(answer.get('error', ''), 100)}".rstrip())
        lifetime = float(answer.get("expires_in") or 3600)
        return answer["access_token"], time.monotonic() + max(0.0, lifetime - 60)

    def _secrets(self) -> list[str]:
        return [self._account["private_key"], *([self._access[0]] if self._access else [])]

    def close(self) -> None:
        self._http.close()
        self._refresh = None
        super().close()


# --- APNs -------------------------------------------------------------------------------------------
@register("apns", conn_types=("apple_push",))
class ApnsChannel(Channel):
    """APNs over HTTP/2 (module docstring): cannot deduplicate; ``apns-collapse-id`` = alert id."""

    can_dedupe: ClassVar[bool] = False
    in_doubt_policy: ClassVar[str] = PUSH_IN_DOUBT
    provider_rate: ClassVar[str | None] = "none published (429 TooManyRequests per device token)"
    delivery_promise: ClassVar[Promise] = Promise.AT_MOST_ONCE_IN_DOUBT

    def __init__(self, name: str, *, key_id: str, team_id: str, signing_key: str | SecretStr, topic: str,
                 device_token: str, base_url: str = APNS_URL, timeout: float = 10.0, verify: bool | str = True,
                 concurrency: int = 16, max_run: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency, max_run=max_run)
        if importlib.util.find_spec("h2") is None:  # httpx's HTTP/2; APNs refuses HTTP/1.1
            raise ValueError("APNs speaks HTTP/2 only, and the h2 package is not installed (requirements.txt)")
        self.key_id, self.team_id, self.topic, self.device_token = key_id, team_id, topic, device_token
        self._key = signing_key if isinstance(signing_key, SecretStr) else SecretStr(signing_key)
        self.url = f"{base_url.rstrip('/')}/3/device/{device_token}"
        self.target = target(self.url)
        self.timeout = timeout
        self.verify = verify
        # httpx's HTTP/2 client is driven from one event loop (HttpClient's private loop thread), never from
        # the send threads: its synchronous client shares a connection's h2/hpack state between threads
        # unguarded (KeyError on a stream id, "deque mutated during iteration" in hpack, RemoteProtocolError),
        # which turned ordinary sends into IN_DOUBT or crashed the run (tests/unit/.../test_push.py).
        self._loop = HttpClient(f"apns-{name}", limit=concurrency, verify=verify)
        self._client = None  # httpx.AsyncClient, created on the loop
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None  # (provider token, monotonic time it was made)

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "ApnsChannel":
        """login = the key id, password = the .p8 signing key (PEM); host = the API (default
        https://api.push.apple.com); extras ``team_id``, ``topic`` (the app's bundle id), ``device_token``,
        ``timeout``, ``verify``, ``concurrency``."""
        return cls(name, key_id=conn.require("login", "the APNs key id"),
                   team_id=conn.extra_str("team_id", required="the Apple developer team id"),
                   signing_key=conn.secret("the APNs signing key (.p8, PEM)"),
                   topic=conn.extra_str("topic", required="the app's bundle id"),
                   device_token=conn.extra_str("device_token", required="the device token (hex)"),
                   base_url=conn.base_url(default_scheme="https") if conn.host else APNS_URL,
                   timeout=conn.extra_seconds("timeout", 10.0), verify=conn.extra_verify(),
                   concurrency=conn.extra_int("concurrency", 16, maximum=256))

    def __repr__(self) -> str:
        return f"ApnsChannel(name={self.name!r}, target={self.target!r}, topic={self.topic!r})"

    def notification(self, alert: Alert) -> dict:
        return {"aps": {"alert": {"title": email_subject(alert), "body": sms_text(alert)}, "sound": "default"},
                **_data(alert)}

    def headers(self, alert: Alert, token: str) -> dict[str, str]:
        return {"authorization": f"bearer {token}", "apns-topic": self.topic, "apns-push-type": "alert",
                "apns-priority": "10", "apns-collapse-id": alert.alert_id, "apns-id": apns_id(alert.alert_id)}

    async def client(self):
        """One httpx.AsyncClient with HTTP/2 (needs the ``h2`` package), created on first use, on the loop."""
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(http1=False, http2=True, verify=self.verify,
                                             limits=httpx.Limits(max_connections=max(1, self.concurrency // 8)),
                                             timeout=httpx.Timeout(self.timeout))
        return self._client

    def provider_token(self, renew: bool = False) -> str:
        with self._lock:
            if renew or self._token is None or time.monotonic() - self._token[1] > APNS_TOKEN_SECONDS:
                import jwt

                try:
                    signed = jwt.encode({"iss": self.team_id, "iat": int(time.time())}, self._key.get_secret_value(),
                                        algorithm="ES256", headers={"kid": self.key_id})
                except (ValueError, TypeError, jwt.PyJWTError) as exc:
                    raise PermanentError(f"apns {self.name}: the signing key cannot sign ({type(exc).__name__})") from None
                self._token = (signed, time.monotonic())
            return self._token[0]

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        body = json.dumps(self.notification(alert), separators=(",", ":")).encode()
        for renew in (False, True):
            t0 = time.monotonic()
            resp = self._post(body, self.headers(alert, self.provider_token(renew)))
            reason = self._reason(resp)
            if not (resp.status_code == 403 and reason == "ExpiredProviderToken") or renew:
                break
        elapsed = round((time.monotonic() - t0) * 1000, 1)
        if resp.status_code == 200:
            return {"status": 200, "apns_id": resp.headers.get("apns-id"), "http_version": resp.http_version,
                    "elapsed_ms": elapsed}
        # The body is APNs' {"reason": ...}: the error names it.
        raise status_error(f"apns {self.name} ({self.target})", resp.status_code, resp.content, resp.headers,
                           [self._key.get_secret_value(), *([self._token[0]] if self._token else [])])

    def _post(self, body: bytes, headers: dict[str, str]):
        """One HTTP/2 request, made on the client's loop; httpx's errors translated like :mod:`.http`'s:
        nothing sent → retry, maybe sent → unknown."""
        return self._loop.run(self._apost(body, headers))

    async def _apost(self, body: bytes, headers: dict[str, str]):
        import httpx

        where = f"apns {self.name} ({self.target})"
        try:
            return await (await self.client()).post(self.url, content=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:  # no request was written
            raise RetryableError(f"{where}: connection failed ({type(exc).__name__})") from None
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as exc:
            raise PermanentError(f"{where}: request not possible ({type(exc).__name__})") from None
        except httpx.TransportError as exc:  # read/write timeout, connection lost: it may have been sent
            raise OutcomeUnknown(f"{where}: {type(exc).__name__}") from None

    @staticmethod
    def _reason(resp) -> str | None:
        """APNs' ``{"reason": ...}`` of an error answer."""
        try:
            reason = resp.json().get("reason") if resp.content else None
        except (ValueError, AttributeError):
            return None
        return one_line(reason, 60) if isinstance(reason, str) else None

    def close(self) -> None:
        super().close()  # the sends in progress end first
        if self._client is not None:
            client, self._client = self._client, None
            self._loop.run(client.aclose())
        self._loop.close()


__all__ = ["ApnsChannel", "FcmChannel", "apns_id"]
