"""The book step: what one event does to its order's book, and what a book says when it expires.

Pure over the book: no files, no clock, no Spark. The state store (aldebaran.audit.state) finds or
opens the book, decides expiry and persists the result; this module owns the audit semantics every
rule shares (docs/design.md § Contracts):
- an event id already seen by the book counts once (the bus is at-least-once);
- the first request wins (a second request for the order has the order id as its event id: a duplicate);
- purchases add up (sum and count) and the first purchase is remembered;
- each rule is asked after every applied event and once at expiry; at most one alert per
  (kind, order) leaves, whatever the rules return;
- the book keeps the Kafka coordinates of its first events and of its latest one (a bounded trail,
  aldebaran.audit.provenance); an alert's trail as of the event that fired it goes to `trails`, a list
  kept aligned with `alerts`.

`step` is what the store's loop calls per event (it appends to the batch's alert list: a call per
event costs less than a generator feeding a loop here, docs/design.md §8); `apply` returns one
event's alerts, for rules and tests. The alerts are typed (:class:`aldebaran.model.Alert`), rendered
from the rules' findings (aldebaran.audit.findings.render).
"""

from __future__ import annotations

from sys import intern
from typing import Sequence

from aldebaran.audit import parse as events
from aldebaran.audit.findings import Book, Finding, render
from aldebaran.audit.provenance import KEPT, trail
from aldebaran.audit.rules import Rule
from aldebaran.model import Alert, Event

_REQUEST = events.REQUEST
_SLOTS = KEPT + 2  # length of a full Book.coords: [partition, offset] of the first event, then one per event


def step(book: Book, ev: Event, rules: Sequence[Rule], now_ms: int, alerts: list[Alert],
         trails: list | None = None) -> bool:
    """Apply one event to its book and append the alerts (detected at `now_ms`) to `alerts` (and, if
    given, each alert's trail to `trails`, aligned with `alerts`). False: the book had already seen the
    event, nothing changed. The state store's loop calls this per event."""
    event_id = ev.event_id
    seen = book.seen
    if event_id in seen:
        return False
    seen.append(event_id)
    coords = book.coords
    if coords is not None:  # the first KEPT events, then the latest (aldebaran.audit.provenance)
        if coords:
            p = ev.partition
            x = ev.offset - coords[1] if p == coords[0] else [p, ev.offset]
            if len(coords) < _SLOTS:
                coords.append(x)
            else:
                coords[-1] = x
        else:
            coords += (ev.partition, ev.offset)
    if ev.kind == _REQUEST:
        client, stock = ev.client, ev.stock  # interned: millions of books, a handful of names
        book.request = {"event_id": event_id, "shares": ev.shares, "client": client and intern(client),
                        "stock": stock and intern(stock), "ts": ev.event_ts}
    else:
        book.purchased += ev.shares
        book.purchase_count += 1
        if book.first_purchase is None:
            client, stock = ev.client, ev.stock
            book.first_purchase = {"event_id": event_id, "ts": ev.event_ts, "client": client and intern(client),
                                   "stock": stock and intern(stock)}
    for rule in rules:
        finding = rule.on_event(book, ev)
        if finding is not None:
            _fire(book, rule, finding, alerts, now_ms, trails)
    return True


def apply(book: Book, event: Event, rules: Sequence[Rule], now_ms: int, trails: list | None = None) -> list[Alert]:
    """The alerts of one event applied to its book (none for an event the book has already seen)."""
    alerts: list[Alert] = []
    step(book, event, rules, now_ms, alerts, trails)
    return alerts


def expire(book: Book, rules: Sequence[Rule], now_ms: int, alerts: list[Alert] | None = None,
           trails: list | None = None) -> list[Alert]:
    """The alerts of a book at its expiry (it is dropped afterwards), appended to `alerts` if given."""
    alerts = [] if alerts is None else alerts
    for rule in rules:
        finding = rule.on_expire(book)
        if finding is not None:
            _fire(book, rule, finding, alerts, now_ms, trails)
    return alerts


def _fire(book: Book, rule: Rule, finding: Finding, alerts: list[Alert], now_ms: int, trails: list | None) -> None:
    if finding.kind not in book.fired:  # at most one alert per (kind, order), whatever the rule says
        book.fired.append(finding.kind)
        alerts.append(render(book, finding, rule.name, now_ms))
        if trails is not None:
            trails.append(trail(book))

