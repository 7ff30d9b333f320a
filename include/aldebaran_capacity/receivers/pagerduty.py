"""A fake PagerDuty Events API v2, for tests and benchmarks: the published contract of ``POST /v2/enqueue``.

What it keeps of the contract (developer.pagerduty.com, Events API v2):

- a trigger event needs ``routing_key``, ``event_action`` and a ``payload`` with ``summary``, ``source`` and
  ``severity`` (critical, error, warning, info); otherwise 400 ``{"status": "invalid event", "message":
  "Event object is invalid", "errors": [...]}``. A routing key it does not know is refused the same way;
- 202 ``{"status": "success", "message": "Event processed", "dedup_key": <key>}``; a trigger without a
  ``dedup_key`` gets a new one;
- deduplication by ``dedup_key`` while the alert is open: a trigger with the key of an open alert is added
  to that alert and opens nothing. An alert stays open until a ``resolve`` event or, here, for `window`
  seconds (PagerDuty's alerts stay open until resolved; a finite window lets a test see the difference);
- over its rate (`per_minute` events per routing key, PagerDuty's is about 120) it answers 429 with
  ``Retry-After``; ``fail_next(n, 5xx)`` injects server errors, ``fail_next(n, 429)`` a throttle.

`opened` counts alerts opened per dedup key: "each alert exactly once" is every count being 1.
"""

from __future__ import annotations

import collections
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from aldebaran_capacity.receivers.base import LOCALHOST, HttpReceiver, json_response

SEVERITIES = ("critical", "error", "warning", "info")


@dataclass
class OpenAlert:
    """An alert the fake holds open: its key, when it opened, the events added to it since."""

    key: str
    opened_at: float
    first: dict
    events: int = 1
    closes_at: float = field(default=float("inf"))


class OpenAlerts:
    """Alerts by deduplication key, open for `window` seconds (or until closed): PagerDuty's dedup_key
    and Opsgenie's alias work the same way."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.open: dict[str, OpenAlert] = {}
        self.opened: collections.Counter = collections.Counter()  # alerts opened per key, over all time

    def add(self, key: str, event: dict, now: float) -> bool:
        """True if `event` opened an alert, False if it was added to the open one."""
        held = self.open.get(key)
        if held is not None and now < held.closes_at:
            held.events += 1
            return False
        self.open[key] = OpenAlert(key, now, event, closes_at=now + self.window)
        self.opened[key] += 1
        return True

    def close(self, key: str) -> bool:
        return self.open.pop(key, None) is not None


class RateLimit:
    """A fixed one-minute window of `per_minute` requests per key (None: unlimited)."""

    def __init__(self, per_minute: int | None) -> None:
        self.per_minute = per_minute
        self._windows: dict[str, tuple[int, int]] = {}

    def retry_after(self, key: str, now: float) -> int | None:
        """None if this request is within the rate, else the seconds until the next window."""
        if self.per_minute is None:
            return None
        minute = int(now // 60)
        start, used = self._windows.get(key, (minute, 0))
        if start != minute:
            start, used = minute, 0
        if used >= self.per_minute:
            return max(1, 60 - int(now % 60))
        self._windows[key] = (start, used + 1)
        return None


class FakePagerDuty(HttpReceiver):
    """PagerDuty's Events API v2 (module docstring) on 127.0.0.1. `routing_key`: the one key it accepts
    (default: a fresh one). `events` holds every accepted event, `alerts` the dedup bookkeeping."""

    def __init__(self, routing_key: str | None = None, *, window: float = 3600.0, per_minute: int | None = None,
                 host: str = LOCALHOST, port: int = 0) -> None:
        super().__init__(host, port)
        self.routing_key = routing_key or secrets.token_hex(16)
        self.alerts = OpenAlerts(window)
        self.rate = RateLimit(per_minute)
        self.events: list[dict] = []
        self.statuses: collections.Counter = collections.Counter()
        self.requests_per_key: collections.Counter = collections.Counter()

    @property
    def opened(self) -> collections.Counter:
        return self.alerts.opened

    def handle(self, request: web.BaseRequest, body: bytes, now: float) -> web.StreamResponse:
        if request.method != "POST" or request.path != "/v2/enqueue":
            return self._answer(404, {"status": "not found", "message": "POST /v2/enqueue"})
        try:
            event = json.loads(body)
        except ValueError:
            return self._invalid(["The request body is not JSON"])
        if not isinstance(event, dict):
            return self._invalid(["The event must be a JSON object"])
        key = event.get("dedup_key")
        with self.lock:
            if isinstance(key, str):
                self.requests_per_key[key] += 1
        status = self._next_failure()
        if status is not None:
            headers = {"Retry-After": "1"} if status == 429 else None
            return self._answer(status, {"status": "error", "message": "injected failure"}, headers)
        problems = self._problems(event)
        if problems:
            return self._invalid(problems)
        with self.lock:
            wait = self.rate.retry_after(event["routing_key"], now)
        if wait is not None:
            return self._answer(429, {"status": "throttled", "message": "Requests for this routing key are throttled"},
                                {"Retry-After": str(wait)})
        key = key if isinstance(key, str) and key else secrets.token_hex(16)
        with self.lock:
            self.events.append(event)
            if event["event_action"] == "resolve":
                self.alerts.close(key)
            elif event["event_action"] == "trigger" and self.alerts.add(key, event, now):
                self._record_receipt(key, now)
            elif event["event_action"] == "trigger":
                self.repeats[key] += 1
        return self._answer(202, {"status": "success", "message": "Event processed", "dedup_key": key})

    def _problems(self, event: dict[str, Any]) -> list[str]:
        problems = []
        if event.get("routing_key") != self.routing_key:
            problems.append("Invalid routing key")
        if event.get("event_action") not in ("trigger", "acknowledge", "resolve"):
            problems.append("'event_action' is invalid (must be one of: trigger, acknowledge, resolve)")
        key = event.get("dedup_key")
        if key is not None and (not isinstance(key, str) or len(key) > 255):
            problems.append("'dedup_key' must be a string of at most 255 characters")
        if event.get("event_action") == "trigger":
            payload = event.get("payload")
            if not isinstance(payload, dict):
                problems.append("'payload' is missing or not an object")
            else:
                for name in ("summary", "source"):
                    if not isinstance(payload.get(name), str) or not payload[name]:
                        problems.append(f"'payload.{name}' is missing or blank")
                if payload.get("severity") not in SEVERITIES:
                    problems.append("'payload.severity' is invalid (must be one of: critical, error, warning, info)")
        return problems

    def _invalid(self, errors: list[str]) -> web.StreamResponse:
        return self._answer(400, {"status": "invalid event", "message": "Event object is invalid", "errors": errors})

    def _answer(self, status: int, payload: Any, headers: dict | None = None) -> web.StreamResponse:
        with self.lock:
            self.statuses[status] += 1
        return json_response(status, payload, headers)
