"""Parse and validate trade events in the shard task, in Python: raw Kafka values in, EventRows (or the
reference's verdict) out. The alternative to the JVM parse (aldebaran.audit.sparkjob.jvmparse); `ALDEBARAN_AUDIT_PARSER`
picks one, and docs/benchmarks.md compares them in one run.

**Fast path.** msgspec decodes a message into a typed struct of the contract's fields (``id`` and
``initial_order_id`` a string or an integer, ``#shares`` and ``ts`` integers, ``client``/``stock`` strings)
in one pass of C. msgspec already refuses what the contract refuses there: invalid UTF-8, an unpaired
surrogate escape, trailing content, a float or a boolean where an integer belongs, a wrong type. What it
does not check is checked after, cheaply:

- no repeated, unknown or null-valued key: the message holds exactly as many ``:`` bytes as the struct
  has fields set. Every key occurrence has a colon, so equality leaves no room for a second occurrence,
  an extra key, a null value or a colon inside a string (each of which sends the message to the slow path);
- the size limit, the id rules (non-empty, within the length limit, printable: no control character; an
  integer id below ``events.MAX_INT_ID``), ``#shares`` within 0..max, ``ts`` within 0..2**63, and a request's
  ``client`` and ``stock``.

**Slow path.** Every message the fast path does not accept goes to :func:`aldebaran.events.validate`, the
reference validator itself, for its verdict and reason. So the fast path never decides that a message is
invalid, and its only obligation is soundness: what it accepts, the reference accepts with the same
fields. tests/unit/test_pyparse.py holds it to that on the event corpus and on random messages.
"""

from __future__ import annotations

import itertools
from typing import Iterable

import msgspec

from aldebaran import events
from aldebaran.audit.model import EventRow


class _Trade(msgspec.Struct, gc=False):
    id: str | int
    shares: int = msgspec.field(name="#shares")
    initial_order_id: str | int | None = None
    client: str | None = None
    stock: str | None = None
    ts: int | None = None


_DECODER = msgspec.json.Decoder(_Trade)
_TS_LIMIT = 2**63


class Parser:
    """One parser per limits; :meth:`parse` handles a batch of Kafka values."""

    def __init__(self, limits: events.Limits = events.Limits()) -> None:
        self.limits = limits
        self.fast = self.slow = 0  # messages each path decided (for the bench and the batch figures)

    def parse(self, values: Iterable[bytes | None], kafka_ts: Iterable[int],
              invalid: list[tuple[int, events.Invalid]], partition: int = -1,
              offsets: Iterable[int] | None = None) -> list[EventRow]:
        """The valid events of `values` (in order); each invalid one appends (its index, the reference's
        Invalid) to `invalid`. `kafka_ts`: each message's Kafka timestamp (its event time without ``ts``);
        `partition` and `offsets`: where the messages were read (-1: unknown)."""
        decode = _DECODER.decode
        max_bytes, max_id, max_shares = self.limits.max_message_bytes, self.limits.max_id_length, self.limits.max_shares
        max_int_id = events.MAX_INT_ID
        request, purchase = events.REQUEST, events.PURCHASE
        make = EventRow
        out: list[EventRow] = []
        append = out.append
        slow, n = 0, -1
        offsets = itertools.repeat(-1) if offsets is None else offsets
        for n, (raw, kts, off) in enumerate(zip(values, kafka_ts, offsets)):
            try:
                if raw is None or len(raw) > max_bytes:
                    raise ValueError
                t = decode(raw)
                event_id, oid, client, stock, ts = t.id, t.initial_order_id, t.client, t.stock, t.ts
                fields = 2 + (oid is not None) + (client is not None) + (stock is not None) + (ts is not None)
                if raw.count(b":") != fields or not 0 <= t.shares <= max_shares:
                    raise ValueError
                if ts is None:
                    ts = kts
                elif not 0 <= ts < _TS_LIMIT:
                    raise ValueError
                if event_id.__class__ is int:
                    event_id = str(event_id)  # an integer id counts against the length limit by its text
                    if len(event_id) > max_id or not -max_int_id < t.id < max_int_id:
                        raise ValueError
                elif not (0 < len(event_id) <= max_id and event_id.isprintable()):
                    raise ValueError
                if oid is None:
                    if client is None or stock is None:
                        raise ValueError
                    append(make(request, event_id, event_id, t.shares, client, stock, ts, partition, off))
                    continue
                if oid.__class__ is int:
                    if not -max_int_id < oid < max_int_id:
                        raise ValueError
                    oid = str(oid)
                    if len(oid) > max_id:
                        raise ValueError
                elif not (0 < len(oid) <= max_id and oid.isprintable()):
                    raise ValueError
                append(make(purchase, event_id, oid, t.shares, client, stock, ts, partition, off))
            except (msgspec.DecodeError, ValueError, RecursionError):
                slow += 1
                verdict = events.validate(raw, max_message_bytes=max_bytes, max_id_length=max_id,
                                          max_shares=max_shares)
                if isinstance(verdict, events.Invalid):
                    invalid.append((n, verdict))
                else:
                    append(make(verdict.kind, verdict.event_id, verdict.order_id, verdict.shares, verdict.client,
                                verdict.stock, verdict.ts if verdict.ts is not None else kts, partition, off))
        self.slow += slow
        self.fast += n + 1 - slow
        return out
