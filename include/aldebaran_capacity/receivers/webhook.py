"""The alert webhook endpoint: one alert per POST, or a batch of alerts per POST."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from aldebaran.delivery.channels import (
    REPLAY_TOLERANCE_SECONDS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    timestamp_fresh,
    verify_signature,
)
from aldebaran_capacity.receivers.base import LOCALHOST, HttpReceiver, json_response

BATCH_HEADER = "X-Aldebaran-Batch"


@dataclass(slots=True)
class WebhookDelivery:
    idempotency_key: str  # the request's Idempotency-Key; for an alert of a batch, its alert id
    alert: Any
    body: bytes  # the request body as signed (for an alert of a batch: the whole batch)
    headers: dict
    request_id: str
    received_at: float
    batch_key: str | None = field(default=None)  # the batch's Idempotency-Key


class WebhookReceiver(HttpReceiver):
    """An alert webhook endpoint (any path). Every POST must carry ``X-Aldebaran-Timestamp`` and
    ``X-Aldebaran-Signature``, the HMAC of ``<timestamp>.<body>`` (401 if missing or wrong, counted in
    `rejected_signatures`; 401 if the timestamp is more than `max_age` seconds off this clock, a replay,
    counted in `rejected_stale`; `max_age` None: no age check) and an ``Idempotency-Key`` (400 without
    one). `accepted` holds what it accepted, by alert id; `statuses`
    counts its answers; `received_at` / `repeats` (see :class:`HttpReceiver`) are keyed by alert id.

    - One alert per POST (the body is the alert): the Idempotency-Key is the dedupe key (the channel
      uses the alert id). `requests_per_key` counts every request per key, even those answered with
      an injected failure; the first is accepted (201 + ``X-Request-Id``), later ones get 409 with the
      first request id.
    - A batch (header ``X-Aldebaran-Batch: <n>``, body ``{"alerts": [<n alerts>]}``): the key names
      the batch (`requests_per_batch_key` counts them); dedupe is per alert by its ``alert_id``, across
      batches and single POSTs. A batch is all-or-nothing: signature, then shape (400 if ``n`` differs
      or an alert has no string ``alert_id``), then each alert is accepted or reported a duplicate:
      200 ``{"accepted": <n new>, "duplicates": [<alert ids already had>], "id": <request id>}``.
      `requests_per_key` counts each alert of every signed, well-formed batch."""

    def __init__(self, secret: str, host: str = LOCALHOST, port: int = 0,
                 tls: tuple[str | Path, str | Path] | None = None,
                 max_age: float | None = REPLAY_TOLERANCE_SECONDS) -> None:
        super().__init__(host, port, tls)
        self._secret = secret
        self.max_age = max_age
        self.rejected_stale = 0
        self.accepted: dict[str, WebhookDelivery] = {}
        self.requests_per_key: collections.Counter = collections.Counter()
        self.requests_per_batch_key: collections.Counter = collections.Counter()
        self.rejected_signatures = 0
        self.statuses: collections.Counter = collections.Counter()

    def handle(self, request: web.BaseRequest, body: bytes, now: float) -> web.StreamResponse:
        if request.method != "POST":
            return self._answer(405, {"error": "POST alerts here"})
        headers = request.headers
        key = headers.get("Idempotency-Key")
        batch = headers.get(BATCH_HEADER)
        with self.lock:
            if key:
                (self.requests_per_key if batch is None else self.requests_per_batch_key)[key] += 1
        status = self._next_failure()
        if status is not None:
            return self._answer(status, {"error": "injected failure"})
        stamp = headers.get(TIMESTAMP_HEADER)
        if not verify_signature(body, headers.get(SIGNATURE_HEADER), self._secret, stamp):
            with self.lock:
                self.rejected_signatures += 1
            return self._answer(401, {"error": "bad signature"})
        if self.max_age is not None and not timestamp_fresh(stamp, self.max_age, now):
            with self.lock:
                self.rejected_stale += 1
            return self._answer(401, {"error": "stale timestamp (a replay?)"})
        if not key:
            return self._answer(400, {"error": "Idempotency-Key required"})
        try:
            payload = json.loads(body)
        except ValueError:
            return self._answer(400, {"error": "body is not JSON"})
        if batch is not None:
            return self._accept_batch(payload, batch, body, dict(headers), key, now)
        alert_id = payload.get("alert_id") if isinstance(payload, dict) else None
        alert_id = alert_id if isinstance(alert_id, str) else key
        with self.lock:
            known = self.accepted.get(key)
            if known is None:
                known = self.accepted[key] = WebhookDelivery(key, payload, body, dict(headers),
                                                             self._new_request_id(), now)
                self._record_receipt(alert_id, now)
                fresh = True
            else:
                self.repeats[alert_id] += 1
                fresh = False
        if fresh:
            return self._answer(201, {"id": known.request_id}, {"X-Request-Id": known.request_id})
        return self._answer(409, {"error": "already delivered", "id": known.request_id},
                            {"X-Request-Id": known.request_id})

    def _accept_batch(self, payload: Any, declared: str, body: bytes, headers: dict, key: str,
                      now: float) -> web.StreamResponse:
        alerts = payload.get("alerts") if isinstance(payload, dict) else None
        if not isinstance(alerts, list) or not all(
                isinstance(a, dict) and isinstance(a.get("alert_id"), str) for a in alerts):
            return self._answer(400, {"error": 'a batch is {"alerts": [<alert with a string alert_id>, ...]}'})
        if declared.strip() != str(len(alerts)):
            return self._answer(400, {"error": f"{BATCH_HEADER} says {declared!r}, the body has {len(alerts)}"})
        request_id = self._new_request_id()
        duplicates = []
        with self.lock:
            for alert in alerts:
                alert_id = alert["alert_id"]
                self.requests_per_key[alert_id] += 1
                if alert_id in self.accepted:
                    duplicates.append(alert_id)
                    self.repeats[alert_id] += 1
                else:
                    self.accepted[alert_id] = WebhookDelivery(alert_id, alert, body, headers, request_id, now, key)
                    self._record_receipt(alert_id, now)
        return self._answer(200, {"accepted": len(alerts) - len(duplicates), "duplicates": duplicates,
                                  "id": request_id}, {"X-Request-Id": request_id})

    def _answer(self, status: int, payload: Any, headers: dict | None = None) -> web.StreamResponse:
        with self.lock:
            self.statuses[status] += 1
        return json_response(status, payload, headers)
