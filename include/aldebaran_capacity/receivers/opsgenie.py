"""A fake Opsgenie Alert API, for tests and benchmarks: the published contract of ``POST /v2/alerts``.

What it keeps of the contract (docs.opsgenie.com, Alert API, create alert):

- ``Authorization: GenieKey <key>``; any other key → 401 ``{"message": "Could not authenticate", ...}``;
- ``message`` is required (at most 130 characters), ``alias`` at most 512, ``priority`` P1-P5; otherwise
  422 ``{"message": "Request body is not processable. ...", "errors": {...}}``;
- the request is processed asynchronously: 202 ``{"result": "Request will be processed", "took": ...,
  "requestId": <uuid>}``;
- deduplication by ``alias`` while the alert is open: a create request with the alias of an open alert
  raises its count and opens nothing. An alert stays open until closed, here for `window` seconds;
- over its rate (`per_minute` requests per key; Opsgenie's depends on the plan) 429 with ``Retry-After``;
  ``fail_next(n, status)`` injects failures.

`opened` counts alerts opened per alias: "each alert exactly once" is every count being 1.
"""

from __future__ import annotations

import collections
import json
import secrets
import uuid
from typing import Any

from aiohttp import web

from aldebaran_capacity.receivers.base import LOCALHOST, HttpReceiver, json_response
from aldebaran_capacity.receivers.pagerduty import OpenAlerts, RateLimit

PRIORITIES = ("P1", "P2", "P3", "P4", "P5")


class FakeOpsgenie(HttpReceiver):
    """Opsgenie's Alert API (module docstring) on 127.0.0.1. `api_key`: the one GenieKey it accepts
    (default: a fresh one). `requests` holds every accepted create request, `alerts` the alias bookkeeping."""

    def __init__(self, api_key: str | None = None, *, window: float = 3600.0, per_minute: int | None = None,
                 host: str = LOCALHOST, port: int = 0) -> None:
        super().__init__(host, port)
        self.api_key = api_key or str(uuid.uuid4())
        self.alerts = OpenAlerts(window)
        self.rate = RateLimit(per_minute)
        self.created: list[dict] = []
        self.statuses: collections.Counter = collections.Counter()
        self.requests_per_alias: collections.Counter = collections.Counter()
        self.unauthorized = 0

    @property
    def opened(self) -> collections.Counter:
        return self.alerts.opened

    def handle(self, request: web.BaseRequest, body: bytes, now: float) -> web.StreamResponse:
        request_id = str(uuid.uuid4())
        if request.method != "POST" or request.path != "/v2/alerts":
            return self._answer(404, {"message": "Not found", "took": 0.0, "requestId": request_id})
        if not secrets.compare_digest(request.headers.get("Authorization", ""), f"GenieKey {self.api_key}"):
            with self.lock:
                self.unauthorized += 1
            return self._answer(401, {"message": "Could not authenticate", "took": 0.0, "requestId": request_id})
        try:
            alert = json.loads(body)
        except ValueError:
            return self._unprocessable({"body": "must be JSON"}, request_id)
        if not isinstance(alert, dict):
            return self._unprocessable({"body": "must be an object"}, request_id)
        alias = alert.get("alias")
        with self.lock:
            if isinstance(alias, str):
                self.requests_per_alias[alias] += 1
        status = self._next_failure()
        if status is not None:
            headers = {"Retry-After": "1"} if status == 429 else None
            return self._answer(status, {"message": "injected failure", "took": 0.0, "requestId": request_id}, headers)
        errors = self._errors(alert)
        if errors:
            return self._unprocessable(errors, request_id)
        with self.lock:
            wait = self.rate.retry_after(self.api_key, now)
        if wait is not None:
            return self._answer(429, {"message": "You are making too many requests! To avoid errors, we recommend "
                                      "you limit requests.", "took": 0.0, "requestId": request_id},
                                {"Retry-After": str(wait)})
        key = alias if isinstance(alias, str) and alias else request_id
        with self.lock:
            self.created.append(alert)
            if self.alerts.add(key, alert, now):
                self._record_receipt(key, now)
            else:
                self.repeats[key] += 1
        return self._answer(202, {"result": "Request will be processed", "took": 0.002, "requestId": request_id})

    @staticmethod
    def _errors(alert: dict[str, Any]) -> dict[str, str]:
        errors = {}
        message = alert.get("message")
        if not isinstance(message, str) or not message.strip():
            errors["message"] = "Message can not be empty."
        elif len(message) > 130:
            errors["message"] = "Message can not be longer than 130 characters."
        alias = alert.get("alias")
        if alias is not None and (not isinstance(alias, str) or len(alias) > 512):
            errors["alias"] = "Alias can not be longer than 512 characters."
        if alert.get("priority") is not None and alert["priority"] not in PRIORITIES:
            errors["priority"] = "Priority should be one of [P1, P2, P3, P4, P5]"
        details = alert.get("details")
        if details is not None and not (isinstance(details, dict) and all(isinstance(v, str) for v in details.values())):
            errors["details"] = "Details should be a map of strings."
        return errors

    def _unprocessable(self, errors: dict[str, str], request_id: str) -> web.StreamResponse:
        return self._answer(422, {"message": "Request body is not processable. Please check the errors.",
                                  "errors": errors, "took": 0.0, "requestId": request_id})

    def _answer(self, status: int, payload: Any, headers: dict | None = None) -> web.StreamResponse:
        with self.lock:
            self.statuses[status] += 1
        return json_response(status, payload, headers)
