"""Retractions: a fast channel's recipient is told when a fast-lane alert it got is not confirmed.

The fast lane (Spark real-time mode) may raise an alert the exact lane never raises (the exact lane is the
source of truth; docs/design.md, "The low-latency lane"). A channel that opted in to the fast lane
(``fast: true``) has been sent it. When the lane's reconciler judges it unconfirmed
(aldebaran.lanes.reconciler), each fast channel is sent a **retraction**: a message shaped like an alert
(so every channel kind can send it), kind ``RETRACTION``, id ``retract-<alert id>``, with the retracted
alert's order fields and

    "retracts": <the alert id>, "retracted_kind": <its kind>, "lane": <the lane>, "reason": <why>

If the exact lane confirms the alert later after all (``confirmed_late``), each channel that was sent the
retraction is sent a ``REINSTATEMENT`` (id ``reinstate-<alert id>``, ``"reinstates": <the alert id>``):
the alert stands. The exact lane's copy itself is not delivered again: its alert id is the one the
recipient already holds (a deduplicating recipient would drop it anyway), and the ledger records it as a
repeat of the fast run.

Both go through the per-alert record path (:func:`aldebaran.delivery.dispatcher.deliver_direct`, like
the supervisor's page): once per channel, however often the reconciler asks, a failed send is retried by
the channel's dispatchers' sweep, an unknown outcome on a channel that cannot deduplicate is IN_DOUBT.
Nothing is written to the alerts topic (its contract holds only audit alerts).
"""

from __future__ import annotations

import logging
import os
import socket
import time

from aldebaran.model import Alert
from aldebaran.storage.store import safe_segment

log = logging.getLogger(__name__)

RETRACTION, REINSTATEMENT = "RETRACTION", "REINSTATEMENT"
CORRUPT = "corrupt"  # a channel's outcome when its ledger record cannot be read (skipped, logged)
_ORDER_FIELDS = ("client", "stock", "requested", "purchased", "purchase_count", "trigger_event_id",
                 "trigger_event_ts")


def retraction_id(alert_id: str) -> str:
    """The id of `alert_id`'s retraction: deterministic, so every attempt meets the same ledger record."""
    return safe_segment(f"retract-{alert_id}", "alert id")


def reinstatement_id(alert_id: str) -> str:
    return safe_segment(f"reinstate-{alert_id}", "alert id")


def retraction(record: dict) -> Alert:
    """The retraction of an unconfirmed fast alert, from the reconciler's record of it
    (``{"alert_id", "lane", "reported_at", "why", "alert": <the fast alert's fields> | None}``)."""
    retracted = record["alert_id"]
    alert = record.get("alert") or {}
    order = str(alert.get("order_id") or "unknown")
    kind = alert.get("kind") or "alert"
    return Alert.from_dict({
        "alert_id": retraction_id(retracted), "kind": RETRACTION, "order_id": order,
        **{k: alert.get(k) for k in _ORDER_FIELDS},
        "detected_at": int(float(record.get("reported_at") or time.time()) * 1000),
        "retracts": retracted, "retracted_kind": kind, "lane": record.get("lane"), "reason": record.get("why"),
        "message": (f"RETRACTED: the fast lane's {kind} alert {retracted} on order {order} was not confirmed by "
                    "the exact lane; treat it as withdrawn. " + str(record.get("why") or "")).strip(),
    })


def reinstatement(retraction_alert: Alert, confirmed_at: float) -> Alert:
    """The withdrawal of a retraction: the exact lane confirmed the alert after it had been retracted."""
    retracted = retraction_alert.extra["retracts"]
    return Alert.from_dict({
        **{k: v for k, v in retraction_alert.to_dict().items() if k not in ("retracts", "reason")},
        "alert_id": reinstatement_id(retracted), "kind": REINSTATEMENT,
        "detected_at": int(confirmed_at * 1000), "reinstates": retracted,
        "message": (f"REINSTATED: the exact lane confirmed alert {retracted} on order "
                    f"{retraction_alert.order_id} after its retraction; the alert stands."),
    })


class Retractor:
    """Sends retractions (and reinstatements) to the fast channels, each exactly once per channel."""

    def __init__(self, ledger, channels: list, owner: str | None = None) -> None:
        self.ledger = ledger
        self.channels = channels
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:retractions"

    def retract(self, record: dict) -> dict[str, str]:
        """Send `record`'s retraction to every fast channel: channel → "sent" | "already" | "failed" |
        "in_doubt" | "busy" (another worker holds it under a live lease: ask again later) | "corrupt"."""
        return self._deliver(retraction(record), self.channels)

    def reinstate(self, alert_id: str, confirmed_at: float) -> dict[str, str]:
        """Send a reinstatement to each fast channel that has a retraction of `alert_id` on record."""
        from aldebaran.delivery.corrupt import record

        out: dict[str, str] = {}
        for channel in self.channels:
            corrupt: list = []
            got = record(self.ledger, channel.name, retraction_id(alert_id), corrupt, "retractions")
            if got is not None:
                out.update(self._deliver(reinstatement(got[0].alert, confirmed_at), [channel]))
            elif corrupt:
                out[channel.name] = CORRUPT
        return out

    def _deliver(self, message: Alert, channels: list) -> dict[str, str]:
        from aldebaran.delivery.stats import DispatchStats

        stats = DispatchStats()
        out = {c.name: self._direct(c, message, stats) for c in channels}
        log.warning("%s %s of alert %s: %s", message.kind.lower(), message.alert_id,
                    message.extra.get("retracts") or message.extra.get("reinstates"), out)
        return out

    def _direct(self, channel, message: Alert, stats) -> str:
        """deliver_direct, or CORRUPT when the message's record on this channel cannot be read: skipped and
        logged with its key (the channel's dispatcher sweep quarantines it if it is in an index), so the other
        channels, and the reconciler, go on. Not re-created here: it may have been sent already."""
        from aldebaran.delivery.corrupt import noted
        from aldebaran.delivery.dispatcher import deliver_direct
        from aldebaran.exceptions import LedgerCorrupt

        try:
            return deliver_direct(self.ledger, channel, message, self.owner, stats)
        except LedgerCorrupt as exc:
            noted(exc, None, f"retractions ({channel.name})")
            return CORRUPT

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
