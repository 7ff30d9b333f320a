"""Webhook channel: HTTP(S) POST of alerts, signed with HMAC-SHA256, keyed for the receiver to deduplicate.

Two modes, chosen by the connection extra ``batch`` (.env.example shows both):

* one alert per request (``batch`` 1, the default). Body: the alert (:func:`~.text.alert_body`);
  headers ``Idempotency-Key: <alert_id>``, ``X-Aldebaran-Timestamp: <epoch seconds>`` and
  ``X-Aldebaran-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`` (:func:`~.text.signature`;
  docs/operations.md § Verifying a webhook's signature). 2xx → delivered; 409 → delivered before (the
  receiver already had the key: receipt ``already_delivered``); 408, 429, 5xx → retry; any other
  status → permanent.
* batches (``batch`` n > 1): a run goes out as requests of up to n alerts, body
  ``{"alerts": [<alert>, ...]}``, headers ``X-Aldebaran-Batch: <count>`` and
  ``Idempotency-Key: batch-<first 32 hex of sha256 of the alert ids joined by ",">``, the signature
  over the timestamp and the whole body. The receiver deduplicates per alert id and answers 200
  ``{"accepted": <new>, "duplicates": [<alert ids it already had>], "id": <request id>}``: every alert
  of a 2xx batch is delivered (a listed duplicate's receipt says ``already_delivered``); a 409 means
  the whole batch was had before; any other status or error applies to each alert of the batch.

Either way, a timeout or a lost connection after the request may have been written is an unknown
outcome (resent under the same key: a receiver that deduplicates drops it), before it a plain retry. ``send_many`` sends a
whole run at once over one keep-alive pool of ``concurrency`` connections (extra, default 64);
``send`` posts one alert through the same pool. A request is stamped and signed once a connection
slot is free, not when it is queued, so a backlog does not age its timestamp toward a receiver's replay
window.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from typing import ClassVar

from pydantic import SecretStr

from aldebaran.delivery.channels.base import Channel, Outcome, Promise, register
from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.channels.http import HttpClient, Response, elapsed_ms, target
from aldebaran.delivery.channels.text import alert_body, signed_headers
from aldebaran.delivery.exceptions import PermanentError, RetryableError
from aldebaran.delivery.settings import ChannelSettings
from aldebaran.model import Alert
from aldebaran.settings import load

BATCH_HEADER = "X-Aldebaran-Batch"
DEFAULT_CONNECTIONS = 64
MAX_BATCH = 2000


def batch_key(alert_ids: Sequence[str]) -> str:
    """The Idempotency-Key of a batch: the same alerts in the same order give the same key."""
    return "batch-" + hashlib.sha256(",".join(alert_ids).encode()).hexdigest()[:32]


@register("webhook", conn_types=("http", "https"))
class WebhookChannel(Channel):
    """HTTP(S) POST of signed alert JSON with the alert id as ``Idempotency-Key`` (module docstring)."""

    can_dedupe: ClassVar[bool] = True
    dedupe_key: ClassVar[str | None] = "Idempotency-Key header = alert id (per alert id in a batch)"
    in_doubt_policy: ClassVar[str] = "re-sent with the same key: a receiver that honours it answers 409"
    # We cannot know that a receiver honours Idempotency-Key (a 409 is its choice): resends are ours to count.
    delivery_promise: ClassVar[Promise] = Promise.AT_LEAST_ONCE_STABLE_KEY

    def __init__(self, name: str, url: str, secret: str | SecretStr, timeout: float = 10.0,
                 verify: bool | str = True, response_id_header: str = "X-Request-Id", *, batch: int = 1,
                 concurrency: int = DEFAULT_CONNECTIONS, max_run: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency, max_run=max_run)
        self.url = url
        self._secret = secret if isinstance(secret, SecretStr) else SecretStr(secret)
        if not self._secret.get_secret_value():
            raise ValueError(f"webhook {name}: empty signing secret")
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"webhook {name}: batch must be between 1 and {MAX_BATCH}")
        self.timeout = timeout
        self.verify = verify
        self.response_id_header = response_id_header
        self.batch = batch
        self.target = target(url)
        self._http = HttpClient(f"webhook-{name}", limit=concurrency, verify=verify)
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "WebhookChannel":
        """host/schema/port = the receiver, password = the HMAC secret (else ALDEBARAN_WEBHOOK_SECRET);
        extras ``endpoint``, ``timeout``, ``verify``, ``response_id_header``, ``batch``, ``concurrency``."""
        base = conn.base_url(default_scheme="https")
        endpoint = conn.extra_str("endpoint", "") or ""
        return cls(
            name,
            url=base + ("/" + endpoint.lstrip("/") if endpoint else ""),
            secret=conn.secret("the HMAC signing secret shared with the receiver",
                               load(ChannelSettings).webhook_secret, "ALDEBARAN_WEBHOOK_SECRET"),
            timeout=conn.extra_seconds("timeout", 10.0),
            verify=conn.extra_verify(),
            response_id_header=conn.extra_str("response_id_header", "X-Request-Id") or "X-Request-Id",
            batch=conn.extra_int("batch", 1, maximum=MAX_BATCH),
            concurrency=conn.extra_int("concurrency", DEFAULT_CONNECTIONS, maximum=1024),
        )

    def __repr__(self) -> str:
        return (f"WebhookChannel(name={self.name!r}, target={self.target!r}, timeout={self.timeout}, "
                f"batch={self.batch})")

    # --- the blocking interface -------------------------------------------------------------------
    def send(self, alert: Alert, idempotency_key: str) -> dict:
        return self._http.run(self._post_one(alert, idempotency_key)).result()

    def send_many(self, alerts: Sequence[Alert]) -> list[Outcome]:
        return self._http.run(self._post_all(list(alerts))) if alerts else []

    def close(self) -> None:
        self._http.close()
        super().close()

    # --- on the client's loop ---------------------------------------------------------------------
    async def _post_all(self, alerts: list[Alert]) -> list[Outcome]:
        if self.batch == 1:
            return list(await asyncio.gather(*(self._post_one(a, a.alert_id) for a in alerts)))
        chunks = [alerts[i:i + self.batch] for i in range(0, len(alerts), self.batch)]
        results = await asyncio.gather(*(self._post_batch(chunk) for chunk in chunks))
        return [outcome for chunk in results for outcome in chunk]

    def _headers(self, body: bytes, key: str) -> dict[str, str]:
        return {"Content-Type": "application/json", "Idempotency-Key": key, **signed_headers(body, self._secret)}

    def _slot(self) -> asyncio.Semaphore:
        """`concurrency` request slots on the client's current loop (a closed client starts a new loop)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.concurrency))
        return self._slots[1]

    async def _post(self, body: bytes, key: str, extra: dict[str, str] | None = None) -> Response:
        # Wait for a slot (the connector's limit) before stamping: the timestamp is signed, and a receiver
        # refuses one older than its replay window.
        async with self._slot():
            headers = {**self._headers(body, key), **(extra or {})}
            return await self._http.request(f"webhook {self.name}", "POST", self.url, timeout=self.timeout,
                                            data=body, headers=headers)

    async def _post_one(self, alert: Alert, key: str) -> Outcome:
        body = alert_body(alert)
        t0 = time.monotonic()
        try:
            resp = await self._post(body, key)
        except (RetryableError, PermanentError) as exc:
            return Outcome.failed(alert.alert_id, exc)
        receipt = {"status": resp.status, "response_id": resp.headers.get(self.response_id_header),
                   "elapsed_ms": elapsed_ms(t0)}
        if 200 <= resp.status < 300:
            return Outcome.delivered(alert.alert_id, receipt)
        if resp.status == 409:  # the receiver has seen this Idempotency-Key: an earlier attempt got through
            return Outcome.delivered(alert.alert_id, {**receipt, "already_delivered": True,
                                                      "note": "409: receiver already had this idempotency key"})
        return Outcome.failed(alert.alert_id, self._status_error(resp))

    async def _post_batch(self, alerts: list[Alert]) -> list[Outcome]:
        ids = [a.alert_id for a in alerts]
        body = b'{"alerts":[' + b",".join(alert_body(a) for a in alerts) + b"]}"
        key = batch_key(ids)
        t0 = time.monotonic()
        try:
            resp = await self._post(body, key, {BATCH_HEADER: str(len(alerts))})
        except (RetryableError, PermanentError) as exc:
            return [Outcome.failed(i, exc) for i in ids]
        receipt = {"status": resp.status, "response_id": resp.headers.get(self.response_id_header),
                   "elapsed_ms": elapsed_ms(t0), "batch": len(ids), "batch_key": key}
        if 200 <= resp.status < 300:
            duplicates = self._duplicates(resp)
            note = {"already_delivered": True, "note": "duplicate: receiver already had this alert id"}
            return [Outcome.delivered(i, {**receipt, **note} if i in duplicates else receipt) for i in ids]
        if resp.status == 409:
            note = {"already_delivered": True, "note": "409: receiver already had this batch's idempotency key"}
            return [Outcome.delivered(i, {**receipt, **note}) for i in ids]
        error = self._status_error(resp)
        return [Outcome.failed(i, error) for i in ids]

    @staticmethod
    def _duplicates(resp: Response) -> set[str]:
        """The alert ids a batch answer lists as duplicates (none if the answer says nothing usable:
        the 2xx alone means every alert is there)."""
        try:
            listed = resp.json().get("duplicates")
        except (ValueError, AttributeError):
            return set()
        return {i for i in listed if isinstance(i, str)} if isinstance(listed, list) else set()

    def _status_error(self, resp: Response) -> Exception:
        detail = f"webhook {self.name} ({self.target}): HTTP {resp.status} {resp.text()}".rstrip()
        if resp.status in (408, 429) or resp.status >= 500:
            return RetryableError(detail)
        return PermanentError(detail)
