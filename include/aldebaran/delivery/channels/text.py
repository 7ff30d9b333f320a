"""What the channels send: the machine body and its signature, and the texts people read.

Machines (webhook body, Kafka value) get :func:`alert_body`: the alert's compact JSON with sorted
keys; a webhook request is signed with :func:`signature` over its timestamp and body
(``X-Aldebaran-Timestamp``, ``X-Aldebaran-Signature``: :func:`signed_headers`), so a receiver can
refuse a replayed request (:func:`verify_signature`, :func:`timestamp_fresh`). People get an e-mail
(:func:`email_subject`, :func:`email_text`) or one short SMS (:func:`sms_text`). Display text never
carries control characters (header injection) and is bounded.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import time
from typing import Any

from pydantic import SecretStr

from aldebaran.model import Alert


def alert_body(alert: Alert) -> bytes:
    """The alert as sent to machines (webhook body, Kafka value): the bytes it arrived as on the alerts
    topic, else its compact JSON with sorted keys, ASCII (Alert.body)."""
    return alert.body()


SIGNATURE_HEADER = "X-Aldebaran-Signature"
TIMESTAMP_HEADER = "X-Aldebaran-Timestamp"
REPLAY_TOLERANCE_SECONDS = 300  # what a receiver should accept: clocks drift, requests wait for a connection


def signature(body: bytes, secret: str | SecretStr, timestamp: int | str) -> str:
    """``X-Aldebaran-Signature``: ``sha256=`` + hex HMAC-SHA256 of ``<timestamp>.<body>``: the exact
    ``X-Aldebaran-Timestamp`` value (epoch seconds), a dot, the exact body bytes. Signing the timestamp
    is what lets a receiver refuse an old request replayed with a fresh timestamp."""
    key = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    return "sha256=" + hmac.new(key.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def signed_headers(body: bytes, secret: str | SecretStr, now: float | None = None) -> dict[str, str]:
    """The two headers that sign a request with `body`, stamped `now` (default: the clock)."""
    stamp = str(int(time.time() if now is None else now))
    return {TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: signature(body, secret, stamp)}


def verify_signature(body: bytes, header: str | None, secret: str | SecretStr, timestamp: str | None) -> bool:
    """Receivers: constant-time check of an ``X-Aldebaran-Signature`` header against the request's
    ``X-Aldebaran-Timestamp`` (both required; the timestamp is digits). Its age is
    :func:`timestamp_fresh`'s to judge."""
    if not header or not timestamp or not timestamp.isascii() or not timestamp.isdigit():
        return False
    return hmac.compare_digest(header.encode(), signature(body, secret, timestamp).encode())


def timestamp_fresh(timestamp: str | None, tolerance: float = REPLAY_TOLERANCE_SECONDS,
                    now: float | None = None) -> bool:
    """Whether a (verified) ``X-Aldebaran-Timestamp`` is within `tolerance` seconds of `now`, either
    side: an older one is a replay (or a request held too long), a later one a wrong clock."""
    if not timestamp or not timestamp.isascii() or not timestamp.isdigit():
        return False
    return abs((time.time() if now is None else now) - int(timestamp)) <= tolerance


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def one_line(value: Any, limit: int = 80) -> str:
    """One line of display text from a field: no control characters (header injection), bounded."""
    text = _CONTROL.sub(" ", str(value)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def utc_iso(epoch_ms: Any) -> str:
    """Epoch milliseconds → ``2024-05-01T12:00:00.000Z``; ``unknown`` if it is not a number."""
    if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, (int, float)):
        return "unknown"
    try:
        moment = dt.datetime.fromtimestamp(epoch_ms / 1000, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return "unknown"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def email_subject(alert: Alert) -> str:
    """``[Aldebaran] OVERFILL on order 1 (Sendence AAPL)``."""
    who = " ".join(one_line(v, 40) for v in (alert.client, alert.stock) if v)
    subject = f"[Aldebaran] {one_line(alert.kind, 20)} on order {one_line(alert.order_id, 60)}"
    return subject + (f" ({who})" if who else "")


def email_text(alert: Alert, channel: str = "email") -> str:
    """The plain-text body of the alert e-mail: what happened, in words and UTC times."""
    requested, purchased, count = alert.requested, alert.purchased, alert.purchase_count
    bought = f"{purchased} shares" + (f" in {count} purchase{'s' if count != 1 else ''}" if count is not None else "")
    if requested is not None and purchased is not None:
        delta = purchased - requested
        bought += f" ({delta} over the request)" if delta > 0 else ""
        asked = f"{requested} shares"
    else:
        asked = "no purchase request seen"
    lines = [
        f"Aldebaran raised an {one_line(alert.kind, 20)} alert.",
        "",
        f"Order:          {one_line(alert.order_id, 128)}",
        f"Client:         {one_line(alert.client or 'unknown')}",
        f"Stock:          {one_line(alert.stock or 'unknown')}",
        f"Requested:      {asked}",
        f"Purchased:      {bought}",
        f"Trigger event:  {one_line(alert.trigger_event_id or 'unknown', 128)} at {utc_iso(alert.trigger_event_ts)}",
        f"Detected at:    {utc_iso(alert.detected_at)}",
    ]
    if alert.extra.get("message"):
        lines += ["", one_line(alert.extra["message"], 1000)]
    lines += [
        "",
        "--",
        f"Alert id {alert.alert_id}: Aldebaran sends one e-mail per alert.",
        f"Delivery record: aldebaran deliveries show --channel {channel} --alert-id {alert.alert_id}",
    ]
    return "\n".join(lines) + "\n"


def sms_text(alert: Alert) -> str:
    """``Aldebaran OVERFILL order 1: bought 120/100 AAPL``: short enough for one GSM-7 SMS."""
    kind, order = one_line(alert.kind, 20), one_line(alert.order_id, 40)
    # A retraction (or its withdrawal) of a fast-lane alert is about another alert (aldebaran.delivery.retraction).
    if alert.extra.get("retracts"):
        return f"Aldebaran {kind} order {order}: alert {one_line(alert.extra['retracts'], 40)} withdrawn (not confirmed)"
    if alert.extra.get("reinstates"):
        return f"Aldebaran {kind} order {order}: alert {one_line(alert.extra['reinstates'], 40)} stands (confirmed late)"
    # The platform's on-call page (aldebaran.platform.oncall) is about a health finding, not an order.
    if alert.extra.get("finding") and alert.extra.get("message"):
        return f"Aldebaran {kind} {order}: {one_line(alert.extra['message'], 300)}"
    stock = f" {one_line(alert.stock, 20)}" if alert.stock else ""
    if alert.requested is None:
        return f"Aldebaran {kind} order {order}: bought {alert.purchased}{stock} without a request"
    return f"Aldebaran {kind} order {order}: bought {alert.purchased}/{alert.requested}{stock}"
