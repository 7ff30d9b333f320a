"""Opsgenie channel: the Alert API's create request, one per alert, deduplicated by ``alias``.

``POST {base}/v2/alerts`` (base default https://api.opsgenie.com; the EU instance is
https://api.eu.opsgenie.com) with ``Authorization: GenieKey <the API integration's key>``::

    {"message": <one line, at most 130 characters>, "alias": <alert_id>, "description": <the alert report>,
     "entity": "order <order_id>", "source": "aldebaran", "priority": <extra priority>,
     "tags": [<kind>, <extra tags>...], "details": {<alert field>: <string>, ...}}

Opsgenie keeps one open alert per ``alias``: a create request with the alias of an open alert raises
that alert's count and notifies nobody again. The alert id is that alias, so a resend after a crash between
send and record is harmless; once the alert is closed the same alias would open a new one, which the
dispatcher's dedupe window prevents for repeats it still remembers.

Opsgenie processes a create request asynchronously: 202 (``{"result": ..., "requestId": ...}``) →
delivered, the request id in the receipt; 400/422 (a request it refuses), 401/403 (a bad key) → permanent;
429 (over the plan's API rate) and 5xx → retry, with the ``Retry-After`` it sent named in the error; a
timeout after the request was written → unknown (safe to resend: same alias).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar
from urllib.parse import quote

from pydantic import SecretStr

from aldebaran.delivery.channels.base import Promise, register
from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.channels.provider import EventApiChannel, description
from aldebaran.delivery.channels.text import one_line, sms_text
from aldebaran.model import Alert

DEFAULT_URL = "https://api.opsgenie.com"
ALERTS_PATH = "/v2/alerts"
PRIORITIES = ("P1", "P2", "P3", "P4", "P5")
MESSAGE_MAX, DESCRIPTION_MAX, DETAIL_MAX = 130, 15000, 8000  # Opsgenie's field limits


def create_request(alert: Alert, channel: str, *, priority: str, tags: list[str]) -> dict:
    """The create-alert request of `alert` (module docstring)."""
    details = {k: one_line(v, DETAIL_MAX) for k, v in alert.to_dict().items() if v is not None}
    return {"message": one_line(sms_text(alert), MESSAGE_MAX), "alias": alert.alert_id,
            "description": description(alert, channel)[:DESCRIPTION_MAX], "entity": one_line(f"order {alert.order_id}", 512),
            "source": "aldebaran", "priority": priority, "tags": [one_line(alert.kind, 50), *tags], "details": details}


@register("opsgenie", conn_types=("opsgenie_alerts",))
class OpsgenieChannel(EventApiChannel):
    """Opsgenie Alert API (module docstring): ``alias`` = alert id."""

    can_dedupe: ClassVar[bool] = True
    dedupe_key: ClassVar[str | None] = "alias = alert id, while Opsgenie's alert is open"
    in_doubt_policy: ClassVar[str] = "re-sent with the same alias: Opsgenie counts it on the open alert"
    provider_rate: ClassVar[str | None] = "per Opsgenie plan's API rate limit (429 above)"
    delivery_promise: ClassVar[Promise] = Promise.EXACTLY_ONCE  # while Opsgenie's alert is open (dedupe_key)

    def __init__(self, name: str, api_key: str | SecretStr, *, base_url: str = DEFAULT_URL, priority: str = "P3",
                 tags: list[str] | None = None, timeout: float = 10.0, verify: bool | str = True,
                 concurrency: int = 16, max_run: int | None = None) -> None:
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}")
        super().__init__(name, base_url.rstrip("/") + ALERTS_PATH, api_key, timeout=timeout, verify=verify,
                         concurrency=concurrency, max_run=max_run)
        self.priority = priority
        self.tags = list(tags or [])

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "OpsgenieChannel":
        """password = the API integration's key (GenieKey); host = the API (default https://api.opsgenie.com);
        extras ``priority`` (P1-P5, default P3), ``tags`` (list or comma string), ``timeout``, ``verify``,
        ``concurrency``."""
        if not conn.host:
            conn = dataclasses.replace(conn, host=DEFAULT_URL)
        tags = conn.extra_list("tags", "tags") if conn.extra.get("tags") else []
        return cls(name, conn.secret("the API integration's key (GenieKey)"),
                   base_url=conn.base_url(default_scheme="https"),
                   priority=conn.extra_str("priority", "P3") or "P3", tags=tags,
                   timeout=conn.extra_seconds("timeout", 10.0), verify=conn.extra_verify(),
                   concurrency=conn.extra_int("concurrency", 16, maximum=256))

    def request(self, alert: Alert) -> tuple[dict, dict[str, str]]:
        body = create_request(alert, self.name, priority=self.priority, tags=self.tags)
        return body, {"Authorization": f"GenieKey {self._key.get_secret_value()}"}

    def resolve_request(self, alert: Alert) -> tuple[str, dict, dict[str, str]]:
        """Close the open alert whose ``alias`` is the alert id (``POST /v2/alerts/<alias>/close``)."""
        return (f"{self.url}/{quote(alert.alert_id, safe='')}/close?identifierType=alias",
                {"source": "aldebaran", "note": one_line(sms_text(alert), 500)},
                {"Authorization": f"GenieKey {self._key.get_secret_value()}"})

    def receipt(self, answer: dict) -> dict:
        return {"request_id": answer.get("requestId"), "result": answer.get("result")}
