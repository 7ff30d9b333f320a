"""`aldebaran explain ALERT_ID`: one alert's whole story — the alert, the trades that built its book (topic,
partition, offset, event id, shares), the event that triggered it, and its delivery on every channel with
the history. :func:`explain` finds the pieces and builds it; the CLI and the deliveries plugin's page both show
what it returns. The story as data and text, and the pure steps that assemble it, are in cli/story.py.

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

from aldebaran.audit import provenance
from aldebaran.cli.story import Entry, Explanation, assemble, check, pick, render_text, trade_of
from aldebaran.exceptions import AlertNotFound

log = logging.getLogger(__name__)

MAX_SCAN = 1_000_000  # messages a scan for the events between kept coordinates reads at most


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
