"""The audit's own data model: one order's book, and the finding a rule reports; and how a finding
becomes the typed alert (:class:`aldebaran.model.Alert`) the auditor emits.

The event the books apply is :class:`aldebaran.model.Event`. Plain types with no behaviour beyond their
own fields, so every other room of the package (the rules, the book step, the state store, the Spark
glue) and the reference model can import them without importing each other.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from aldebaran.model import Alert


@dataclass(slots=True)
class Book:
    """One order's state. Persisted frozen, as one JSON array (audit.state.rows freeze/thaw); keep fields
    JSON-friendly. Slotted: a shard holds millions of these (no per-instance __dict__, faster attribute
    access)."""

    order_id: str
    first_ts: int  # event time of the first event (ms): the book expires ttl after it
    first_seen_ms: int  # processing time the book was opened (ms): the idle-stream fallback
    request: dict | None = None  # {"event_id","shares","client","stock","ts"}: the first request wins
    purchased: int = 0
    purchase_count: int = 0
    first_purchase: dict | None = None  # {"event_id","ts","client","stock"}
    seen: list[str] = field(default_factory=list)  # event ids applied (the bus is at-least-once)
    fired: list[str] = field(default_factory=list)  # alert kinds already emitted for this order
    slots: dict[str, Any] = field(default_factory=dict)  # per-rule state, keyed by rule name
    # Where its first audit.provenance.KEPT applied events were read, then one slot that follows the latest:
    # [partition, offset of the first, then per event its offset minus that one's (or [partition, offset]
    # if it came from another partition)], at most KEPT + 2 items (audit.provenance). None: a book frozen
    # by a version that kept none (its coordinates are unknown).
    coords: list[int] | None = field(default_factory=list)


@dataclass(frozen=True)
class Finding:
    """What a rule says when it fires; :func:`render` turns it, with the book, into the alert."""

    kind: str
    order_id: str
    trigger_event_id: str | None
    trigger_event_ts: int | None
    message: str

    def alert_id(self) -> str:
        return alert_id(self.kind, self.order_id)


def alert_id(kind: str, order_id: str) -> str:
    """Deterministic: the same (kind, order) always gets the same id, so replays and repeats dedupe."""
    return hashlib.sha256(f"{kind}\x1f{order_id}".encode()).hexdigest()[:32]


def render(book: Book, finding: Finding, rule: str, detected_at_ms: int) -> Alert:
    """The alert of a finding (docs/design.md § Contracts): the book's figures as of now, and the audit's two
    fields of its own, ``rule`` and ``message``, as the alert's extras."""
    request = book.request or {}
    fp = book.first_purchase or {}
    return Alert(finding.alert_id(), finding.kind, book.order_id, request.get("client", fp.get("client")),
                 request.get("stock", fp.get("stock")), request.get("shares"), book.purchased, book.purchase_count,
                 finding.trigger_event_id, finding.trigger_event_ts, detected_at_ms,
                 {"rule": rule, "message": finding.message})


def alert_json(alert: Alert) -> str:
    """The JSON the auditor writes to the alerts topic and the archive: compact, ``rule`` right after
    ``kind`` and ``message`` last, the order the auditor has always written, so a replay by a newer
    auditor writes the same bytes as the run it repeats. Built field by field rather than reordered from
    ``to_dict``: it runs once per alert in the shard task."""
    extra = alert.extra
    return _ENCODE({"alert_id": alert.alert_id, "kind": alert.kind, "rule": extra.get("rule"),
                    "order_id": alert.order_id, "client": alert.client, "stock": alert.stock,
                    "requested": alert.requested, "purchased": alert.purchased, "purchase_count": alert.purchase_count,
                    "trigger_event_id": alert.trigger_event_id, "trigger_event_ts": alert.trigger_event_ts,
                    "detected_at": alert.detected_at, "message": extra.get("message")})


# One encoder for every alert (json.dumps with separators builds a new one per call).
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


__all__ = ["Book", "Finding", "alert_id", "alert_json", "render"]
