"""Where an alert came from: the Kafka coordinates of the events that built its book (for
`aldebaran explain`).

**The bound.** A book keeps the (partition, offset) of its first ``KEPT`` applied events and of its
latest one: at most ``KEPT + 1`` coordinates, whatever the order's size. ``Book.coords`` holds them
compactly, as ``[p0, o0, x1, x2, ...]`` (at most ``KEPT + 2`` items): the first event's partition and
offset, then per event its offset minus ``o0`` when it is in partition ``p0`` (producers key by order id,
so that is the rule) or ``[partition, offset]`` when it is not; the last item is overwritten by every
event past the first ``KEPT``. A duplicate event (an id the book has seen) records nothing. What it costs
per book, against absolute pairs, is measured in docs/design.md §8 ("What explain keeps").

**The trail.** When a rule fires, the step takes the book's trail: how many events it had applied and
the pairs it kept, as of that event. The auditor sends it beside the alert as the Kafka header
``aldebaran.sources`` on the alerts topic (the alert JSON is a fixed contract, BRIEF §2). The pairs
are, in the order the book applied them:

- ``events <= KEPT + 1``: every event of the alert, the trigger last (for a rule that fires on an event);
- more: the first ``KEPT`` and the last. The events in between lie after the ``KEPT``-th in the last
  one's partition, before the last one: producers key each trade by its order id, so one order's events
  share a partition (BRIEF §2) and a scan of that one range, keeping this order's messages, finds them
  (:func:`gap`). On a topic not keyed that way an order's events spread over partitions: the scan finds
  only those in that partition, and explain says how many it could not place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

KEPT = 4  # the first events of a book whose coordinates are kept (then one for the latest); at least 1:
# the first event's slot is the base of the others' offsets (Book.coords)
HEADER = "aldebaran.sources"


@dataclass(frozen=True)
class Sources:
    """The trail of one alert, as its header carries it."""

    topic: str  # the trades topic the auditor read
    events: int  # events the book had applied when the alert fired
    at: tuple[tuple[int, int], ...]  # (partition, offset) kept: see the module docstring

    @property
    def complete(self) -> bool:
        """Every event's coordinates are in `at`."""
        return len(self.at) >= self.events

    def gap(self) -> tuple[int, int, int] | None:
        """(partition, from offset, to offset), both exclusive: where the events not kept lie; None when
        nothing is missing or no range can be bounded (the last event's partition holds none of the
        kept ones before it: the order's events were not keyed to one partition)."""
        if self.complete or len(self.at) < 2:
            return None
        partition, last = self.at[-1]
        before = [o for p, o in self.at[:-1] if p == partition and o < last]
        return (partition, max(before), last) if before else None

    @property
    def missing(self) -> int:
        """Events whose coordinates are not in `at`."""
        return max(self.events - len(self.at), 0)


def pairs(coords: list) -> list[tuple[int, int]]:
    """The (partition, offset)s of a compact ``Book.coords``, in the order the book applied them."""
    if not coords:
        return []
    p0, o0 = coords[0], coords[1]
    return [(p0, o0)] + [(x[0], x[1]) if x.__class__ is list else (p0, o0 + x) for x in coords[2:]]


def trail(book) -> tuple[int, list[tuple[int, int]]] | None:
    """(events applied, the kept coordinates) of a live book; None if the book kept none (a row frozen
    before coordinates were kept)."""
    coords = book.coords
    return None if coords is None else (len(book.seen), pairs(coords))


def encode(topic: str, kept: tuple[int, list[tuple[int, int]]] | None) -> bytes | None:
    """The header value for a trail (None: no header)."""
    if kept is None:
        return None
    events, at = kept
    return json.dumps({"topic": topic, "events": events, "at": at}, separators=(",", ":")).encode()


def decode(value: bytes | str | None) -> Sources | None:
    """The Sources of a header value; None for no header. ValueError if it cannot be read."""
    if value is None:
        return None
    try:
        body = json.loads(value)
        at = tuple((int(p), int(o)) for p, o in body["at"])
        return Sources(str(body["topic"]), int(body["events"]), at)
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"{HEADER} header cannot be read: {exc}") from None


def from_headers(headers) -> Sources | None:
    """The Sources in a Kafka message's headers (a list of (name, bytes) or None)."""
    for name, value in headers or ():
        if name == HEADER:
            return decode(value)
    return None
