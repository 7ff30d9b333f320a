"""`aldebaran explain ALERT_ID`: one alert's whole story — the alert, the trades that built its book (topic,
partition, offset, event id, shares), the event that triggered it, and its delivery on every channel with
the history. :func:`explain` builds it; the CLI and the deliveries plugin's page both show what it returns.

How it is found, without listing anything:

1. the alert: its message on the alerts topic, found by the deliveries' own lookup
   (:func:`aldebaran.delivery.tools.locate_alert`: the topic's keys read newest first, its own partition
   first, a bounded number of messages; ``--scan`` reads the whole topic, slowly), read once with its headers;
2. the trades: the alert's ``aldebaran.sources`` header (aldebaran.audit.provenance) names the trades
   topic, how many events the book had applied and the coordinates it kept (its first ``KEPT`` events and
   its latest). Those messages are read exactly (assign + seek). A book with more events than it kept
   coordinates for: the rest lie in the latest one's partition between the last kept offset before it and
   it; that range is scanned for messages of this order id (at most ``max_scan`` messages). Every message
   is validated by the input contract's validator (aldebaran.audit.parse), and an event id met twice counts once,
   as it did in the book;
3. the deliveries: :func:`aldebaran.delivery.tools.find` per channel — the alert's own record (with its
   history) or its entry in a group-commit run (with the run's history);
4. the fast lane (:func:`aldebaran.delivery.fast.fast_view` per channel): which lane's run holds the alert's
   sent marker (a channel with ``fast: true`` is delivered from both lanes; the second copy is a repeat),
   and a retraction (and its reinstatement) where the exact lane did not confirm the alert. An alert the
   exact lane never raised is not on the alerts topic: it is shown from its retraction.

What cannot be shown is said, not guessed: an alert older than the alerts topic's retention (its record in
the ledger is still shown, its trail is gone with the message); trades older than the trades topic's
retention; an alert written before books kept coordinates (no header); events of an order that producers
did not key to one partition (counted as not found).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass, field

from aldebaran.audit import parse as events
from aldebaran.audit import provenance
from aldebaran.exceptions import AlertNotFound
from aldebaran.model import Event

log = logging.getLogger(__name__)

MAX_SCAN = 1_000_000  # messages a scan for the events between kept coordinates reads at most
KINDS = {events.REQUEST: "request", events.PURCHASE: "purchase"}


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
    verdict = events.validate(value, kafka_ts=kafka_ts)
    if isinstance(verdict, events.Invalid):
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


# --- reading Kafka -------------------------------------------------------------------------------------
def _consumer(kafka):
    from aldebaran.kafka.io import consumer

    return consumer(kafka, f"aldebaran-explain-{time.time_ns()}", **{"enable.partition.eof": True})


def read_at(kafka, topic: str, coords, timeout: float = 10.0) -> dict[tuple[int, int], object]:
    """The messages at exactly these (partition, offset)s: each read with assign + seek. A coordinate the
    topic no longer holds (retention) is missing from the result."""
    from confluent_kafka import KafkaError, TopicPartition

    out: dict = {}
    c = _consumer(kafka)
    try:
        for partition, offset in sorted(set(coords)):
            c.assign([TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        break
                    raise AlertNotFound(f"reading {topic}[{partition}]@{offset}: {msg.error()}")
                if msg.offset() == offset:
                    out[(partition, offset)] = msg
                break  # an offset past the one asked for: that message is gone
    finally:
        c.close()
    return out


def scan(kafka, topic: str, partition: int, after: int, before: int, limit: int, timeout: float = 60.0):
    """(partition, offset, value, kafka ts) of the messages strictly between two offsets, at most `limit`."""
    from confluent_kafka import KafkaError, TopicPartition

    c = _consumer(kafka)
    try:
        c.assign([TopicPartition(topic, partition, after + 1)])
        n, deadline = 0, time.monotonic() + timeout
        while n < limit and time.monotonic() < deadline:
            for msg in c.consume(num_messages=min(10_000, limit - n), timeout=0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return
                    continue
                if msg.offset() >= before:
                    return
                n += 1
                yield partition, msg.offset(), msg.value(), msg.timestamp()[1]
    finally:
        c.close()


# --- the explanation -------------------------------------------------------------------------------------
def explain(alert_id: str, ledger, channels: list[str] | None = None, kafka=None, max_scan: int = MAX_SCAN,
            locate_timeout: float = 30.0, run_max: int = 100_000, scan: bool = False) -> Explanation:
    """Everything known about one alert. AlertNotFound if neither the alerts topic nor the ledger has it."""
    from aldebaran.delivery.decode import Rejected, decode
    from aldebaran.delivery.fast import fast_view
    from aldebaran.delivery.tools import find, locate_alert
    from aldebaran.settings import KafkaSettings, load

    kafka = kafka or load(KafkaSettings)
    ex = Explanation(alert_id)
    channels = channels if channels else ledger.channels()
    ex.position = locate_alert(alert_id, timeout=locate_timeout, scan=scan)
    ex.deliveries = [find(ledger, c, alert_id, ex.position, run_max) for c in channels]
    ex.fast = [v for c in channels if (v := fast_view(ledger, c, alert_id, kafka.fast_alerts_topic)) is not None]
    if ex.position is not None:
        msg = read_at(kafka, kafka.alerts_topic, [ex.position]).get(ex.position)
        got = decode(msg) if msg is not None else None
        if isinstance(got, Rejected):  # its key names the alert, its bytes are none: told, not fatal
            log.warning("explain %s: the message at %s is not an alert: %s", alert_id, got.where(), got.reason)
            ex.notes.append(f"the message keyed {alert_id} at {got.where()} is not a valid alert ({got.reason}); "
                            f"the dispatchers dead-letter it to {kafka.alerts_dlq_topic}")
        elif got is not None:
            ex.alert = got.to_dict()
            try:
                _trades(ex, kafka, provenance.from_headers(msg.headers()), max_scan)
            except ValueError as exc:  # an unreadable header: the rest of the story still stands
                ex.notes.append(str(exc))
    if ex.alert is None:
        records = [d for d in ex.deliveries if d.get("source") == "record"]
        retracted = [v["retraction"] for v in ex.fast if v.get("retraction")]
        if records:
            ex.alert = records[0].get("alert")
            ex.notes.append("the alerts topic no longer holds this alert: it is shown from its delivery record, "
                            "and the trades that built its book are not known")
        elif retracted:
            ex.alert = _from_retraction(alert_id, retracted[0]["alert"])
            ex.notes.append("the exact lane never raised this alert (it is not on the alerts topic): the fast lane "
                            "did, and it was retracted; shown from its retraction")
        else:
            raise AlertNotFound(f"no alert {alert_id!r} on the alerts topic {kafka.alerts_topic} "
                                f"({'every message read' if scan else 'its newest messages read; --scan reads all'}) "
                                f"nor in the delivery ledger {ledger.prefix} ({', '.join(channels) or 'no channels'})")
    check(ex)
    return ex


def _from_retraction(alert_id: str, retraction: dict) -> dict:
    """The retracted alert as its retraction describes it (its order fields, its kind)."""
    from aldebaran.model import Alert

    skip = {"alert_id", "kind", "retracts", "retracted_kind", "reason", "message", "detected_at"}
    return {"alert_id": alert_id, "kind": retraction.get("retracted_kind"),
            **{k: v for k, v in retraction.items() if k in Alert.FIELDS and k not in skip},
            "message": f"retracted: {retraction.get('reason')}"}


def _trades(ex: Explanation, kafka, sources: provenance.Sources | None, max_scan: int) -> None:
    if sources is None:
        ex.notes.append("the alert carries no aldebaran.sources header (written before books kept the "
                        "coordinates of their trades, or its book was opened before): its trades are not known")
        return
    ex.topic, ex.events = sources.topic, sources.events
    got = read_at(kafka, sources.topic, sources.at)
    kept = []
    for p, o in sources.at:
        msg = got.get((p, o))
        if msg is None:
            kept.append(Entry(p, o, note="no longer in the topic (retention)"))
        else:
            kept.append(trade_of(p, o, msg.value(), msg.timestamp()[1], "kept"))
    scanned: list[Entry] = []
    if not sources.complete:
        gap = sources.gap()
        if gap is None:
            ex.notes.append(f"{sources.missing} events lie between kept coordinates in different partitions "
                            "(the order's trades were not keyed to one partition): not searched")
        else:
            partition, after, before = gap
            seen = {t.event_id for t in kept if t.event_id is not None}
            scanned = pick(scan(kafka, sources.topic, partition, after, before, max_scan), ex.alert["order_id"],
                           seen, sources.missing)
            if len(scanned) < sources.missing:
                ex.notes.append(f"scanned {sources.topic}[{partition}] offsets {after + 1}..{before - 1} (at most "
                                f"{max_scan:,} messages) for {sources.missing} events, found {len(scanned)}")
    ex.trades = assemble(kept, scanned, sources, ex.alert)
    ex.not_found = sources.events - sum(1 for t in ex.trades if t.event_id is not None)


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


# --- CLI -------------------------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("alert_id", help="the alert's id (its Kafka key on the alerts topic)")
    p.add_argument("--channel", action="append", help="delivery channel (repeatable; default: every channel in the ledger)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.add_argument("--max-scan", type=int, default=MAX_SCAN,
                   help=f"messages a scan between kept coordinates reads at most (default {MAX_SCAN:,})")
    p.add_argument("--prefix", help="ledger key prefix (default ALDEBARAN_DELIVERY_PREFIX)")
    p.add_argument("--scan", action="store_true",
                   help="find the alert by reading the whole alerts topic from its beginning (slow on a long "
                        "topic; default: its newest messages, bounded: aldebaran.delivery.locate)")


def main(args: argparse.Namespace) -> int:
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import load

    settings = load(DeliverySettings, prefix=args.prefix)
    try:
        ex = explain(args.alert_id, Ledger.from_settings(settings), args.channel, max_scan=args.max_scan,
                     run_max=settings.run_max, scan=args.scan)
    except AlertNotFound as exc:
        log.error("%s", exc)
        return 1
    print(json.dumps(ex.to_dict(), indent=2, default=str) if args.json else render_text(ex))
    return 0
