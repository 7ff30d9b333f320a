"""One alert's story as data and as text: the trades of its book (:class:`Entry`), the whole
:class:`Explanation`, the pure steps that put the trades back together and check them against the alert's
figures, and the text the CLI prints. Nothing here reads Kafka or the ledger — cli/explain.py finds the
pieces and hands them here — so the story is tested without services, and the deliveries plugin's page shows
the same object.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from aldebaran.audit import parse
from aldebaran.audit import provenance
from aldebaran.model import Event

KINDS = {parse.REQUEST: "request", parse.PURCHASE: "purchase"}


@dataclass
class Entry:
    """One trade of the alert's book: where it lies on the trades topic and the event read back there
    (None: the message is gone, or it is not a valid trade; `note` says which)."""

    partition: int
    offset: int
    event: Event | None = None
    kafka_ts: int | None = None
    found: str = "kept"  # kept: its coordinates were in the book; scanned: found between them
    trigger: bool = False
    note: str | None = None

    @property
    def event_id(self) -> str | None:
        return None if self.event is None else self.event.event_id

    @property
    def kind(self) -> str | None:
        """The kind as the story shows it: request or purchase."""
        return None if self.event is None else KINDS[self.event.kind]

    @property
    def shares(self) -> int | None:
        return None if self.event is None else self.event.shares

    @property
    def order_id(self) -> str | None:
        return None if self.event is None else self.event.order_id

    def to_dict(self) -> dict:
        return {"partition": self.partition, "offset": self.offset, "event_id": self.event_id, "kind": self.kind,
                "shares": self.shares, "order_id": self.order_id, "kafka_ts": self.kafka_ts, "found": self.found,
                "trigger": self.trigger, "note": self.note}


@dataclass
class Explanation:
    alert_id: str
    alert: dict | None = None
    position: tuple[int, int] | None = None  # (partition, offset) on the alerts topic
    topic: str | None = None  # the trades topic
    events: int | None = None  # events the book had applied when the alert fired (None: unknown)
    trades: list[Entry] = field(default_factory=list)
    not_found: int = 0  # events of the book that could not be listed
    notes: list[str] = field(default_factory=list)
    deliveries: list[dict] = field(default_factory=list)
    fast: list[dict] = field(default_factory=list)  # per channel with a fast-lane story (delivery.fast.fast_view)

    @property
    def trigger(self) -> Entry | None:
        return next((t for t in self.trades if t.trigger), None)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["trades"] = [t.to_dict() for t in self.trades]
        return out


# --- the pure parts --------------------------------------------------------------------------------------
def trade_of(partition: int, offset: int, value: bytes | None, kafka_ts: int | None, found: str) -> Entry:
    """A trades-topic message as an Entry (validated as the auditor does)."""
    verdict = parse.validate(value, kafka_ts=kafka_ts)
    if isinstance(verdict, parse.Invalid):
        return Entry(partition, offset, kafka_ts=kafka_ts, found=found, note=f"not a valid trade: {verdict.reason}")
    return Entry(partition, offset, verdict._replace(partition=partition, offset=offset), kafka_ts, found)


def pick(messages, order_id: str, seen: set[str], wanted: int) -> list[Entry]:
    """From scanned (partition, offset, value, kafka_ts) messages, in order: the first `wanted` valid
    trades of `order_id` whose event ids are not in `seen` (updated), as the book applied them."""
    out: list[Entry] = []
    for partition, offset, value, kafka_ts in messages:
        if len(out) >= wanted:
            break
        t = trade_of(partition, offset, value, kafka_ts, "scanned")
        if t.order_id == order_id and t.event_id not in seen:
            seen.add(t.event_id)
            out.append(t)
    return out


def assemble(kept: list[Entry], scanned: list[Entry], sources: provenance.Sources, alert: dict) -> list[Entry]:
    """The book's trades in the order it applied them, the trigger marked: the kept ones, with what the scan
    found before the last kept one when the book had more events than it kept."""
    trades = kept if sources.complete else kept[:-1] + scanned + kept[-1:]
    trigger = alert.get("trigger_event_id")
    hit = next((t for t in reversed(trades) if trigger is not None and t.event_id == str(trigger)), None)
    if hit is not None:
        hit.trigger = True
    return trades


def check(ex: Explanation) -> None:
    """Notes on whether the trades listed account for the alert's figures."""
    if ex.alert is None or ex.events is None:
        return
    purchases = [t for t in ex.trades if t.kind == "purchase"]
    bought = sum(t.shares or 0 for t in purchases)
    if ex.not_found:
        ex.notes.append(f"{ex.not_found} of the book's {ex.events} events could not be listed (above)")
    elif (bought, len(purchases)) == (ex.alert.get("purchased"), ex.alert.get("purchase_count")):
        ex.notes.append(f"the {len(purchases)} purchases listed add up to {bought} shares, the alert's purchased")
    else:
        ex.notes.append(f"the purchases listed add up to {bought} shares in {len(purchases)}; the alert says "
                        f"{ex.alert.get('purchased')} in {ex.alert.get('purchase_count')}")
    if ex.trigger is None and ex.alert.get("trigger_event_id") is not None:
        ex.notes.append(f"the trigger event {ex.alert['trigger_event_id']} is not among the trades listed")


# --- text -----------------------------------------------------------------------------------------------
def render_text(ex: Explanation) -> str:
    a = ex.alert or {}
    lines = [f"alert {ex.alert_id}: {a.get('kind')} of order {a.get('order_id')} ({a.get('client')} "
             f"{a.get('stock')}), requested {a.get('requested')}, purchased {a.get('purchased')} in "
             f"{a.get('purchase_count')} purchases",
             f"  {a.get('message', '')}",
             f"  detected at {_when_ms(a.get('detected_at'))}; on the alerts topic at "
             + (f"partition {ex.position[0]} offset {ex.position[1]}" if ex.position else "(no longer there)"),
             "", f"trades that built its book (topic {ex.topic or '?'}, {_n(ex.events)} events):"]
    if ex.trades:
        lines.append(f"  {'partition':>9} {'offset':>10}  {'event id':<24} {'kind':<9} {'shares':>8}  found")
        for t in ex.trades:
            lines.append(f"  {t.partition:>9} {t.offset:>10}  {str(t.event_id or '-'):<24} {str(t.kind or '-'):<9} "
                         f"{_n(t.shares):>8}  {t.found}{'  <- trigger' if t.trigger else ''}"
                         f"{'  (' + t.note + ')' if t.note else ''}")
    trig = ex.trigger
    lines += ["", f"trigger: event {a.get('trigger_event_id')} at {_when_ms(a.get('trigger_event_ts'))}"
              + (f", {ex.topic}[{trig.partition}]@{trig.offset}, {trig.kind} of {trig.shares} shares" if trig else "")]
    lines += [f"note: {n}" for n in ex.notes]
    lines += ["", "deliveries:"]
    for d in ex.deliveries or [{"channel": "(no channel in the ledger)", "state": "-"}]:
        run = d.get("run")
        where = (f"record, attempt {d.get('attempt')}" if d.get("source") == "record" else
                 f"run {run['partition']}:{run['start']}-{run['end']} {run['state']} epoch {run['epoch']}" if run
                 else d.get("note", ""))
        lines.append(f"  {d['channel']}: {d.get('state')} ({where})")
        for h in d.get("history") or (run or {}).get("history") or []:
            lines.append(f"      {_when_s(h.get('at'))}  {h.get('state') or ''} {h.get('note') or ''}".rstrip())
    if ex.fast:
        lines += ["", "fast lane (channels with fast: true):"]
    for v in ex.fast:
        run = v.get("run") or {}
        if v.get("sent_by"):
            lines.append(f"  {v['channel']}: delivered by the {v['lane']} lane's run {run.get('topic')}[{run.get('partition')}]"
                         f"@{run.get('start')}-{run.get('end')} ({v.get('state')}, run {run.get('state')}); "
                         "the other lane's copy is a repeat")
        for what in ("retraction", "reinstatement"):
            rec = v.get(what)
            if rec:
                lines.append(f"  {v['channel']}: {what} {rec['alert_id']} {rec['state']} (attempt {rec['attempt']}, "
                             f"{_when_s(rec.get('updated_at'))})")
                if what == "retraction":
                    lines.append(f"      why: {(rec.get('alert') or {}).get('reason')}")
    return "\n".join(lines)


def _n(value) -> str:
    return "?" if value is None else str(value)


def _when_ms(ms) -> str:
    return "?" if ms is None else _when_s(ms / 1000)


def _when_s(s) -> str:
    if s is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(s))
