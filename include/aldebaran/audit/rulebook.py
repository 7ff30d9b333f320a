"""The rules that ship with Aldebaran. Each is a few lines: what it keeps, when it fires, what it says."""

from __future__ import annotations

from aldebaran import events
from aldebaran.audit.rules import Alert, Book, EventRow, Rule, register


@register
class Overfill(Rule):
    """OVERFILL: purchased > requested, the first time it becomes true with the request known
    (equal is not over); ORPHAN: at expiry, purchases but never a request."""

    name = "overfill"
    kinds = ("OVERFILL", "ORPHAN")
    keeps = "nothing beyond the engine's shared facts (request, purchased, purchase_count)"

    def on_event(self, book: Book, event: EventRow) -> Alert | None:
        if book.request is not None and book.purchased > book.request["shares"]:
            return Alert(
                "OVERFILL",
                book.order_id,
                event.event_id,
                event.event_ts,
                f"purchased {book.purchased} shares of {book.request['shares']} requested "
                f"in {book.purchase_count} purchases",
            )
        return None

    def on_expire(self, book: Book) -> Alert | None:
        if book.request is None and book.purchase_count > 0:
            fp = book.first_purchase or {}
            return Alert(
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

    def on_event(self, book: Book, event: EventRow) -> Alert | None:
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

    def _alert(self, book: Book, event: EventRow, purchase_id, client, stock) -> Alert:
        r = book.request
        return Alert(
            "MISMATCH",
            book.order_id,
            event.event_id,
            event.event_ts,
            f"purchase {purchase_id} is for {client}/{stock}, the request for {r['client']}/{r['stock']}",
        )
