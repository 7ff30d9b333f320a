"""Audit rules: small declarative classes over one order's book, registered by name.

The book step (aldebaran.audit.book) keeps for every order the facts all rules share — the first
request, the deduplicated purchases (sum and count), the first event — and gives each rule a slot of
its own in the book (`Rule.keeps`). A rule says *when it fires* (`on_event`, `on_expire`) and *what it
says* (the Finding it returns). The step guarantees at most one alert per (kind, order): a rule never
has to remember that it fired.

Adding a rule: write a subclass (in this module or your own, importing `Rule` and `register` from
here), decorate it with @register, select it with ALDEBARAN_AUDIT_RULES=overfill,mismatch,<yours>
(or `--rules`); a rule of your own module must be imported before `resolve` runs. A rule with an
`on_expire` may also say when it is sure to stay quiet (`quiet_at_expiry`): expiring books it cannot
alert on are then dropped without being decoded.

The shipped rules live at the bottom of this module, so the registry has them without importing
anything that imports it back.
"""

from __future__ import annotations

from typing import ClassVar

from aldebaran.audit import parse as events
# The data model a rule sees, re-exported for rule authors.
from aldebaran.audit.findings import Book, Finding, alert_id
from aldebaran.model import Event


class Rule:
    name: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]
    keeps: ClassVar[str] = ""  # what the rule keeps in its slot, for the docs

    def on_event(self, book: Book, event: Event) -> Finding | None:
        """Called after the book step applied a (non-duplicate) event to the book."""
        return None

    def on_expire(self, book: Book) -> Finding | None:
        """Called once when the book expires, before it is dropped."""
        return None

    def quiet_at_expiry(self, request_known: bool) -> bool:
        """True when `on_expire` surely returns None for a book whose request is (or is not) known. The
        store then drops such a book at expiry without decoding it, if every rule agrees: most expiring
        books never alert, and decoding them was about half of the expiry's cost (docs/design.md §8).
        Default: quiet only if the rule does not override `on_expire`."""
        return type(self).on_expire is Rule.on_expire


REGISTRY: dict[str, type[Rule]] = {}


def register(cls: type[Rule]) -> type[Rule]:
    if cls.name in REGISTRY:
        raise ValueError(f"rule {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def resolve(names: list[str] | tuple[str, ...]) -> list[Rule]:
    """One instance of each named rule, in the order given."""
    from aldebaran.exceptions import ConfigError

    unknown = [n for n in names if n not in REGISTRY]
    if unknown or not names:
        raise ConfigError(
            f"ALDEBARAN_AUDIT_RULES: unknown rule(s) {unknown or names}; known: {', '.join(sorted(REGISTRY))}"
        )
    return [REGISTRY[n]() for n in names]


# --- the rules that ship with Aldebaran: what each keeps, when it fires, what it says --------------
@register
class Overfill(Rule):
    """OVERFILL: purchased > requested, the first time it becomes true with the request known
    (equal is not over); ORPHAN: at expiry, purchases but never a request."""

    name = "overfill"
    kinds = ("OVERFILL", "ORPHAN")
    keeps = "nothing beyond the book's shared facts (request, purchased, purchase_count)"

    def on_event(self, book: Book, event: Event) -> Finding | None:
        if book.request is not None and book.purchased > book.request["shares"]:
            return Finding(
                "OVERFILL",
                book.order_id,
                event.event_id,
                event.event_ts,
                f"purchased {book.purchased} shares of {book.request['shares']} requested "
                f"in {book.purchase_count} purchases",
            )
        return None

    def quiet_at_expiry(self, request_known: bool) -> bool:
        return request_known  # ORPHAN needs the request missing

    def on_expire(self, book: Book) -> Finding | None:
        if book.request is None and book.purchase_count > 0:
            fp = book.first_purchase or {}
            return Finding(
                "ORPHAN",
                book.order_id,
                fp.get("event_id"),
                fp.get("ts"),
                f"purchased {book.purchased} shares without a request",
            )
        return None


@register
class Mismatch(Rule):
    """MISMATCH: a purchase whose client or stock differs from its request's (a purchase that
    carries neither field is not compared). Purchases seen before the request are remembered."""

    name = "mismatch"
    kinds = ("MISMATCH",)
    keeps = "until the request arrives: the first purchase of each distinct (client, stock) pair (at most 8)"
    max_pairs = 8

    @staticmethod
    def _differs(request: dict, client: str | None, stock: str | None) -> bool:
        return (client is not None and client != request["client"]) or (
            stock is not None and stock != request["stock"]
        )

    def on_event(self, book: Book, event: Event) -> Finding | None:
        pending: list = book.slots.setdefault(self.name, [])
        if book.request is None:
            if event.kind == events.PURCHASE and len(pending) < self.max_pairs:
                pair = [event.client, event.stock]
                if all(p[1:] != pair for p in pending):
                    pending.append([event.event_id, event.client, event.stock])
            return None
        if event.kind == events.PURCHASE:
            if self._differs(book.request, event.client, event.stock):
                return self._alert(book, event, event.event_id, event.client, event.stock)
            return None
        # The request just arrived: compare the purchases that came before it.
        book.slots.pop(self.name, None)
        for purchase_id, client, stock in pending:
            if self._differs(book.request, client, stock):
                return self._alert(book, event, purchase_id, client, stock)
        return None

    def _alert(self, book: Book, event: Event, purchase_id, client, stock) -> Finding:
        r = book.request
        return Finding(
            "MISMATCH",
            book.order_id,
            event.event_id,
            event.event_ts,
            f"purchase {purchase_id} is for {client}/{stock}, the request for {r['client']}/{r['stock']}",
        )


__all__ = ["Book", "Event", "Finding", "Rule", "REGISTRY", "register", "resolve", "alert_id", "Overfill",
           "Mismatch"]
