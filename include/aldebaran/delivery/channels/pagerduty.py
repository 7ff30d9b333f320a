"""PagerDuty channel: the Events API v2, one trigger event per alert, deduplicated by ``dedup_key``.

``POST {base}/v2/enqueue`` (base default https://events.pagerduty.com)::

    {"routing_key": <the integration's key: the connection's password>, "event_action": "trigger",
     "dedup_key": <alert_id>, "client": "Aldebaran",
     "payload": {"summary": <one line>, "source": <extra source>, "severity": <extra severity>,
                 "timestamp": <detected_at>, "component": <stock>, "group": <client>, "class": <kind>,
                 "custom_details": <the alert>}}

PagerDuty keeps one alert per ``dedup_key`` while it is open: a trigger with the key of an open alert is
recorded on that alert and pages nobody again. The alert id is that key, so a resend after a crash between
send and record is harmless; once the alert is resolved, the same key would open a new one, which the
dispatcher's dedupe window prevents for repeats it still remembers.

202 → delivered (receipt: PagerDuty's ``dedup_key`` and message); 400 (an event PagerDuty refuses) →
permanent; 429 (over the integration's rate, about 120 events/min per routing key) and 5xx → retry, with
the ``Retry-After`` it sent named in the error; a timeout after the request was written → unknown (safe to
resend: same key).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from pydantic import SecretStr

from aldebaran.delivery.channels.base import Promise, register
from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.channels.provider import EventApiChannel
from aldebaran.delivery.channels.text import one_line, sms_text, utc_iso
from aldebaran.model import Alert

DEFAULT_URL = "https://events.pagerduty.com"
ENQUEUE_PATH = "/v2/enqueue"
SEVERITIES = ("critical", "error", "warning", "info")
SUMMARY_MAX = 1024  # PagerDuty truncates longer summaries


def event(alert: Alert, routing_key: str, *, source: str, severity: str) -> dict:
    """The Events API v2 trigger event of `alert` (module docstring)."""
    body = {"summary": one_line(sms_text(alert), SUMMARY_MAX), "source": source, "severity": severity,
            "class": one_line(alert.kind, 100), "custom_details": alert.to_dict()}
    if alert.detected_at is not None:
        body["timestamp"] = utc_iso(alert.detected_at)
    if alert.stock:
        body["component"] = one_line(alert.stock, 100)
    if alert.client:
        body["group"] = one_line(alert.client, 100)
    return {"routing_key": routing_key, "event_action": "trigger", "dedup_key": alert.alert_id,
            "client": "Aldebaran", "payload": body}


@register("pagerduty", conn_types=("pagerduty_events",))
class PagerDutyChannel(EventApiChannel):
    """PagerDuty Events API v2 (module docstring): ``dedup_key`` = alert id."""

    can_dedupe: ClassVar[bool] = True
    dedupe_key: ClassVar[str | None] = "dedup_key = alert id, while PagerDuty's alert is open"
    in_doubt_policy: ClassVar[str] = "re-sent with the same dedup_key: PagerDuty adds it to the open alert"
    provider_rate: ClassVar[str | None] = "about 120 events/min per routing key (429 above)"
    delivery_promise: ClassVar[Promise] = Promise.EXACTLY_ONCE  # while PagerDuty's alert is open (dedupe_key)

    def __init__(self, name: str, routing_key: str | SecretStr, *, base_url: str = DEFAULT_URL,
                 source: str = "aldebaran", severity: str = "error", timeout: float = 10.0,
                 verify: bool | str = True, concurrency: int = 16, max_run: int | None = None) -> None:
        if severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}")
        super().__init__(name, base_url.rstrip("/") + ENQUEUE_PATH, routing_key, timeout=timeout, verify=verify,
                         concurrency=concurrency, max_run=max_run)
        self.source = source
        self.severity = severity

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "PagerDutyChannel":
        """password = the integration's routing key; host = the API (default https://events.pagerduty.com);
        extras ``severity`` (critical, error, warning, info; default error), ``source`` (default aldebaran),
        ``timeout``, ``verify``, ``concurrency``."""
        if not conn.host:
            conn = dataclasses.replace(conn, host=DEFAULT_URL)
        return cls(name, conn.secret("the integration's routing key (Events API v2)"),
                   base_url=conn.base_url(default_scheme="https"),
                   source=conn.extra_str("source", "aldebaran") or "aldebaran",
                   severity=conn.extra_str("severity", "error") or "error",
                   timeout=conn.extra_seconds("timeout", 10.0), verify=conn.extra_verify(),
                   concurrency=conn.extra_int("concurrency", 16, maximum=256))

    def request(self, alert: Alert) -> tuple[dict, dict[str, str]]:
        return event(alert, self._key.get_secret_value(), source=self.source, severity=self.severity), {}

    def resolve_request(self, alert: Alert) -> tuple[str, dict, dict[str, str]]:
        """A resolve event for the alert keyed ``dedup_key`` = alert id."""
        return self.url, {"routing_key": self._key.get_secret_value(), "event_action": "resolve",
                          "dedup_key": alert.alert_id}, {}

    def receipt(self, answer: dict) -> dict:
        return {"dedup_key": answer.get("dedup_key"), "message": answer.get("message")}
