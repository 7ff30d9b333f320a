"""Audit rules: small declarative modules over one order's book, registered by name.

The engine (aldebaran.audit.books) keeps for every order the facts all rules share — the first
request, the deduplicated purchases (sum and count), the first event — and gives each rule a slot of
its own in the book (`Rule.keeps`). A rule says *when it fires* (`on_event`, `on_expire`) and *what it
says* (the Alert it returns). The engine guarantees at most one alert per (kind, order): a rule never
has to remember that it fired.

Adding a rule: write a subclass, decorate it with @register, select it with
ALDEBARAN_AUDIT_RULES=overfill,mismatch,<yours> (or `--rules`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from aldebaran import events


@dataclass(slots=True)
class Book:
    """One order's state. Persisted frozen, as one JSON array (books.freeze/thaw); keep fields JSON-friendly.
    Slotted: a shard holds millions of these (no per-instance __dict__, faster attribute access)."""

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


class EventRow(NamedTuple):
    """One valid event as the JVM parse hands it to the books (a tuple: built once per event)."""

    kind: str  # events.REQUEST | events.PURCHASE
    event_id: str
    order_id: str
    shares: int
    client: str | None
    stock: str | None
    event_ts: int


@dataclass(frozen=True)
class Alert:
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


class Rule:
    name: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]
    keeps: ClassVar[str] = ""  # what the rule keeps in its slot, for the docs

    def on_event(self, book: Book, event: EventRow) -> Alert | None:
        """Called after the engine applied a (non-duplicate) event to the book."""
        return None

    def on_expire(self, book: Book) -> Alert | None:
        """Called once when the book expires, before it is dropped."""
        return None


REGISTRY: dict[str, type[Rule]] = {}


def register(cls: type[Rule]) -> type[Rule]:
    if cls.name in REGISTRY:
        raise ValueError(f"rule {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def resolve(names: list[str] | tuple[str, ...]) -> list[Rule]:
    from aldebaran.exceptions import ConfigError

    import aldebaran.audit.rulebook  # noqa: F401  (registers the shipped rules)

    unknown = [n for n in names if n not in REGISTRY]
    if unknown or not names:
        raise ConfigError(
            f"ALDEBARAN_AUDIT_RULES: unknown rule(s) {unknown or names}; known: {', '.join(sorted(REGISTRY))}"
        )
    return [REGISTRY[n]() for n in names]


def render(book: Book, alert: Alert, rule: str, detected_at_ms: int) -> dict:
    """The alert contract (../shared/BRIEF.md §2)."""
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


__all__ = ["Alert", "Book", "EventRow", "Rule", "REGISTRY", "register", "resolve", "render", "alert_id", "events"]
