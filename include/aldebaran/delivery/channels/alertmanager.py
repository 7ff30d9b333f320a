"""Alertmanager channel: alerts posted to Prometheus Alertmanager's API, deduplicated by their label set.

``POST {base}/api/v2/alerts`` with a JSON list of alerts, each::

    {"labels": {"alertname": "AldebaranOverfill", "alert_id": ..., "kind": ..., "order_id": ...,
                "client": ..., "stock": ..., <the connection's extra labels>},
     "annotations": {"summary": <one line>, "description": <the alert report>},
     "startsAt": <detected_at, RFC 3339>}

Alertmanager identifies an alert by its label set. A resend of an alert id carries the same labels (they
are all fixed by the alert), so it merges into the alert Alertmanager already holds instead of notifying
again: that is this channel's deduplication, as long as Alertmanager still holds the alert (until it
resolves, ``resolve_timeout`` after its last update, 5 min by default, and for its ``data.retention``
afterwards). An older repeat is caught by the dispatcher's dedupe window first. A label whose value would be
empty (an alert without client or stock) is left out: Prometheus treats an empty label as an absent one.

A run goes out in requests of up to ``batch`` alerts (extra, default 100): Alertmanager takes a list and
answers for all of it. 200 → every alert of the request delivered; 400 (a payload Alertmanager refuses),
401/403/404 → permanent; 408/429/5xx → retry; a timeout after the request was written → unknown, which is
safe to resend. Optional basic auth (login/password) for an Alertmanager behind ``--web.config.file``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import ClassVar

from pydantic import SecretStr

from aldebaran.delivery.channels.base import Channel, Outcome, Promise, register
from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.channels.http import HttpClient, target
from aldebaran.delivery.channels.provider import description, post_json, status_error
from aldebaran.delivery.channels.text import one_line, sms_text, utc_iso
from aldebaran.delivery.exceptions import PermanentError, RetryableError
from aldebaran.model import Alert

API_PATH = "/api/v2/alerts"
DEFAULT_BATCH = 100
MAX_BATCH = 1000
# The alert's own labels: every one is fixed by the alert, so a resend has the same label set.
ALERT_LABELS = ("alert_id", "kind", "order_id", "client", "stock")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def alertname(kind: str) -> str:
    """``OVERFILL`` → ``AldebaranOverfill``: Alertmanager's routes and groupings key on ``alertname``."""
    return "Aldebaran" + "".join(part.capitalize() for part in kind.replace("-", "_").split("_") if part)


def labels(alert: Alert, extra: dict[str, str]) -> dict[str, str]:
    """The alert's label set: the connection's extra labels, then the alert's own (which win)."""
    out = dict(extra)
    out["alertname"] = alertname(one_line(alert.kind, 40))
    for name in ALERT_LABELS:
        value = getattr(alert, name)
        if value not in (None, ""):
            out[name] = str(value)
    return out


def payload(alert: Alert, extra_labels: dict[str, str], channel: str, ends_at: float | None = None) -> dict:
    """One alert as Alertmanager's API takes it (module docstring); `ends_at` (epoch seconds) a resolve when
    past, or how long a firing alert is held without a repost (the platform's on-call page)."""
    item = {"labels": labels(alert, extra_labels),
            "annotations": {"summary": sms_text(alert), "description": description(alert, channel)}}
    if alert.detected_at is not None:
        item["startsAt"] = utc_iso(alert.detected_at)
    if ends_at is not None:
        item["endsAt"] = utc_iso(int(ends_at * 1000))
    return item


@register("alertmanager", conn_types=("prometheus_alertmanager",))
class AlertmanagerChannel(Channel):
    """Alerts to Prometheus Alertmanager (module docstring); deduplicated by label set."""

    can_dedupe: ClassVar[bool] = True
    dedupe_key: ClassVar[str | None] = "label set (alert_id, kind, order_id, client, stock), while Alertmanager holds the alert"
    in_doubt_policy: ClassVar[str] = "re-sent: the same label set merges into the alert Alertmanager holds"
    provider_rate: ClassVar[str | None] = "none published (your own Alertmanager)"
    delivery_promise: ClassVar[Promise] = Promise.EXACTLY_ONCE  # while Alertmanager holds the alert (dedupe_key)

    def __init__(self, name: str, base_url: str, *, labels: dict[str, str] | None = None, login: str | None = None,
                 password: str | SecretStr | None = None, timeout: float = 10.0, verify: bool | str = True,
                 batch: int = DEFAULT_BATCH, concurrency: int = 8, max_run: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency, max_run=max_run)
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"batch must be 1-{MAX_BATCH}")
        clash = sorted(set(labels or {}) & {"alertname", *ALERT_LABELS})
        if clash:
            raise ValueError(f"extra labels may not set the alert's own labels: {', '.join(clash)}")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + API_PATH
        self.target = target(self.url)
        self.extra_labels = dict(labels or {})
        self.login = login
        self._password = password if isinstance(password, SecretStr) or password is None else SecretStr(password)
        self.timeout = timeout
        self.batch = batch
        self._http = HttpClient(f"alertmanager-{name}", limit=concurrency, verify=verify)

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "AlertmanagerChannel":
        """host/schema/port = Alertmanager (e.g. http://127.0.0.1:9093), login/password = optional basic
        auth; extras ``labels`` (an object of extra labels, e.g. severity, team), ``batch``, ``timeout``,
        ``verify``, ``concurrency``."""
        extra_labels = conn.extra.get("labels") or {}
        if not isinstance(extra_labels, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in extra_labels.items()):
            raise conn.error("field extra.labels", "must be an object of label names to string values")
        bad = sorted(k for k in extra_labels if not LABEL_NAME.match(k))
        if bad:
            raise conn.error("field extra.labels", f"has invalid label names: {', '.join(bad)}")
        return cls(name, conn.base_url(default_scheme="http"), labels=extra_labels, login=conn.login,
                   password=conn.password, timeout=conn.extra_seconds("timeout", 10.0), verify=conn.extra_verify(),
                   batch=conn.extra_int("batch", DEFAULT_BATCH, maximum=MAX_BATCH),
                   concurrency=conn.extra_int("concurrency", 8, maximum=256))

    def __repr__(self) -> str:
        return f"AlertmanagerChannel(name={self.name!r}, target={self.target!r}, batch={self.batch})"

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        return self.send_many([alert])[0].result()

    def send_many(self, alerts: Sequence[Alert], ends_at: float | None = None) -> list[Outcome]:
        """`ends_at`: see :func:`payload` (the same label set with a past ``endsAt`` resolves the alert)."""
        batch = list(alerts)
        return self._http.run(self._post_all(batch, ends_at)) if batch else []

    async def _post_all(self, alerts: list[Alert], ends_at: float | None = None) -> list[Outcome]:
        chunks = [alerts[i:i + self.batch] for i in range(0, len(alerts), self.batch)]
        results = await asyncio.gather(*(self._post(chunk, ends_at) for chunk in chunks))
        return [outcome for chunk in results for outcome in chunk]

    async def _post(self, alerts: list[Alert], ends_at: float | None = None) -> list[Outcome]:
        import aiohttp

        where = f"alertmanager {self.name} ({self.target})"
        auth = None
        if self.login and self._password is not None:
            auth = aiohttp.BasicAuth(self.login, self._password.get_secret_value())
        body = [payload(a, self.extra_labels, self.name, ends_at) for a in alerts]
        try:
            resp, elapsed = await post_json(self._http, where, self.url, body, timeout=self.timeout, auth=auth)
        except (RetryableError, PermanentError) as exc:
            return [Outcome.failed(a.alert_id, exc) for a in alerts]
        if 200 <= resp.status < 300:
            receipt = {"status": resp.status, "elapsed_ms": elapsed, "batch": len(alerts)}
            return [Outcome.delivered(a.alert_id, receipt) for a in alerts]
        secrets = [self._password.get_secret_value()] if self._password is not None else []
        error = status_error(where, resp.status, resp.body, resp.headers, secrets)
        return [Outcome.failed(a.alert_id, error) for a in alerts]

    def close(self) -> None:
        self._http.close()
        super().close()
