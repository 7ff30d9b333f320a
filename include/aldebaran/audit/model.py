"""The audit's data model: the event a shard applies, one order's book, and the alert.

Plain types with no behaviour beyond their own fields, so every other room of the package (the rules,
the book step, the state store, the Spark glue) and the reference model can import them without
importing each other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class EventRow(NamedTuple):
    """One valid event as the parse hands it to the books (a tuple: built once per event)."""

    kind: str  # events.REQUEST | events.PURCHASE
    event_id: str
    order_id: str
    shares: int
    client: str | None
    stock: str | None
    event_ts: int
    # Where the event was read (trades topic): kept in its book for `aldebaran explain` (audit.provenance).
    # -1: unknown (events built by hand, the reference model).
    partition: int = -1
    offset: int = -1


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
class Alert:
    """What a rule says when it fires; `render` turns it, with the book, into the alert contract."""

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


def render(book: Book, alert: Alert, rule: str, detected_at_ms: int) -> dict:
    """The alert contract (../shared/BRIEF.md §2): the JSON of the `alerts` topic and the archive."""
    request = book.request or {}
    fp = book.first_purchase or {}
    return {
        "alert_id": alert.alert_id(),
        "kind": alert.kind,
        "rule": rule,
        "order_id": book.order_id,
        "client": request.get("client", fp.get("client")),
        "stock": request.get("stock", fp.get("stock")),
        "requested": request.get("shares"),
        "purchased": book.purchased,
        "purchase_count": book.purchase_count,
        "trigger_event_id": alert.trigger_event_id,
        "trigger_event_ts": alert.trigger_event_ts,
        "detected_at": detected_at_ms,
        "message": alert.message,
    }
