"""Retractions: a fast channel's recipient is told when a fast-lane alert it got is not confirmed.

The fast lane (Spark real-time mode) may raise an alert the exact lane never raises (the exact lane is the
source of truth; docs/design.md, "The low-latency lane"). A channel that opted in to the fast lane
(``fast: true``) has been sent it. When the lane's reconciler judges it unconfirmed
(aldebaran.lanes.reconciler), it produces a **retraction** to the fast alerts topic
(``ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC``): a message shaped like an alert (so every channel kind can send it),
kind ``RETRACTION``, id and Kafka key ``retract-<alert id>``, with the retracted alert's order fields and

    "retracts": <the alert id>, "retracted_kind": <its kind>, "lane": <the lane>, "reason": <why>

If the exact lane confirms the alert later after all (``confirmed_late``), it produces a ``REINSTATEMENT``
(id and key ``reinstate-<alert id>``, ``"reinstates": <the alert id>``): the alert stands. The exact lane's
copy itself is not delivered again: its alert id is the one the recipient already holds, and the ledger
records it as a repeat of the fast run.

The fast dispatcher (``aldebaran dispatch --fast``) delivers both as ordinary runs, like any fast alert:
once per fast channel, a failed send retried by its sweep, an unknown outcome on a channel that cannot
deduplicate IN_DOUBT. The reconciler produces (acknowledged) before it writes the record that marks the
alert judged, so a keeper that dies in between judges it again and produces a second copy under the same
id: the fast dispatcher takes it for a repeat (the run's recent ids, else the alert's sent marker, which a
fast channel keeps whatever it can do otherwise; aldebaran.delivery.settle), not a second send. The
reconciler skips these two kinds when it reads the fast topic (:func:`is_own`); nothing is written to the
exact alerts topic (its contract holds only audit alerts).
"""

from __future__ import annotations

import logging
import time

from aldebaran.model import Alert
from aldebaran.storage.store import safe_segment

log = logging.getLogger(__name__)

RETRACTION, REINSTATEMENT = "RETRACTION", "REINSTATEMENT"
_ORDER_FIELDS = ("client", "stock", "requested", "purchased", "purchase_count", "trigger_event_id",
                 "trigger_event_ts")


def retraction_id(alert_id: str) -> str:
    """The id (and Kafka key) of `alert_id`'s retraction: deterministic, so a second copy is a repeat."""
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


def is_own(alert: Alert) -> bool:
    """Whether `alert` is a retraction or a reinstatement (not a fast alert to judge)."""
    return alert.kind in (RETRACTION, REINSTATEMENT)


class RetractionSink:
    """The reconciler's writer of retractions and reinstatements to the fast alerts topic, keyed by their own
    ids. :meth:`send` returns once every message is acknowledged (idempotent producer, acks=all), so the
    caller may then write what marks the alert judged; RetryableError if one is not (the caller asks again).
    `producer`: a confluent-kafka Producer, or a stand-in (tests); default, one from the Kafka settings."""

    def __init__(self, kafka, producer=None, timeout: float = 10.0) -> None:
        self.topic = kafka.fast_alerts_topic
        self.kafka, self.timeout = kafka, timeout
        self._producer = producer

    def send(self, messages: list[Alert]) -> int:
        from confluent_kafka import KafkaException

        from aldebaran.delivery.exceptions import RetryableError
        from aldebaran.exceptions import AldebaranError
        from aldebaran.kafka.io import produce_all, producer

        if not messages:
            return 0
        if self._producer is None:
            self._producer = producer(self.kafka, **{"linger.ms": 0})
        try:
            produce_all(self._producer, self.topic, [(m.alert_id.encode(), m.to_json()) for m in messages],
                        timeout=self.timeout)
        except (KafkaException, AldebaranError) as exc:  # not acknowledged: the caller asks again
            raise RetryableError(f"producing {len(messages)} retraction(s) to {self.topic}: {exc}") from None
        for m in messages:
            log.warning("%s %s of alert %s produced to %s", m.kind.lower(), m.alert_id,
                        m.extra.get("retracts") or m.extra.get("reinstates"), self.topic)
        return len(messages)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)
            self._producer = None
