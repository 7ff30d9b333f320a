"""`aldebaran deliveries channels|stats|list|runs|show|retry|resolve|quarantine`: look into and settle the ledger.

    aldebaran deliveries channels                           the configured channels: kind and promise
    aldebaran deliveries stats                              per-channel table (promise, backlog from Kafka, exceptions)
    aldebaran deliveries list --channel sms --state IN_DOUBT
    aldebaran deliveries runs --channel webhook --partition 0 [--from-offset N]
    aldebaran deliveries show <alert_id> [--channel webhook]   its outcome and history on every channel
    aldebaran deliveries resolve --channel sms --alert-id <id> --outcome DELIVERED --reason "provider log shows SM123"
    aldebaran deliveries retry --channel webhook --alert-id <id> --reason "endpoint fixed"
    aldebaran deliveries quarantine                         corrupt ledger objects set aside: key, reason, copy

`show` finds an alert without listing the ledger: its own record (failures, SMS) is one GET; a
delivered alert is found in its run: the alert's partition and offset come from the alerts topic
(its keys read newest first, bounded: aldebaran.delivery.locate; ``--scan`` reads the whole topic,
slowly), then a StartAfter listing of run keys finds the run (Ledger.run_covering).

`stats` reads the small index, the consumer groups' offsets and a capped quarantine count; the channels
come from one short listing per channel (Ledger.channels): none of it grows with the ledger's history.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging

from aldebaran.delivery.records import DEAD, DELIVERED, IN_DOUBT, RETRY, STATES

# A run entry's status letter (aldebaran.delivery.runs) as the state an operator reads.
ENTRY_STATES = {"D": DELIVERED, "S": "REPEAT", "M": "MALFORMED", "R": RETRY, "X": DEAD, "U": IN_DOUBT, "?": "CLAIMED"}

log = logging.getLogger(__name__)

STAT_COLUMNS = ["channel", "promise", "backlog", "committed", "retrying", "dead", "in_doubt", "lease_seconds", "max_attempts"]


CHANNEL_COLUMNS = ["channel", "kind", "promise"]


ACTIONS = {
    "channels": "the configured channels, each with its kind and its promise (exactly-once, "
                "at-most-once+in-doubt or at-least-once-stable-key)",
    "stats": "per-channel table: promise, backlog from Kafka, committed runs, exceptions",
    "list": "the records that need an operator (RETRY, DEAD, IN_DOUBT)",
    "runs": "a channel's group-committed runs on one alerts-topic partition",
    "show": "one alert's outcome and history on every channel (found without listing the ledger)",
    "retry": "send a DEAD or IN_DOUBT delivery again, with a reason",
    "resolve": "settle an IN_DOUBT or DEAD delivery as DELIVERED or DEAD, with a reason",
    "quarantine": "the corrupt ledger objects a dispatcher set aside: original key, reason, reader, copy",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from aldebaran.runtime.cliparse import add_modes, opt

    add_modes(p, "action", ACTIONS, [
        opt("alert", modes="show,retry,resolve", nargs="?", help="the alert id (same as --alert-id)"),
        opt("--channel", help={"*": "channel name (default: every channel in the ledger)",
                               "retry": "channel name (required)", "resolve": "channel name (required)"}),
        opt("--alert-id", modes="show,retry,resolve", help="the alert id"),
        opt("--state", modes="list", choices=[RETRY, DEAD, IN_DOUBT], help="records in this state (default: all three)"),
        opt("--partition", modes="runs", type=int, default=0, help="the alerts-topic partition"),
        opt("--from-offset", modes="runs", type=int, default=0, help="first offset"),
        opt("--limit", modes="list,runs,quarantine", type=int, default=50, help="at most this many rows"),
        opt("--outcome", modes="resolve", choices=[DELIVERED, DEAD], help="what really happened"),
        opt("--reason", modes="retry,resolve", help="why (recorded in the record's history)"),
        opt("--prefix", help="ledger key prefix (default ALDEBARAN_DELIVERY_PREFIX)"),
        opt("--scan", modes="show", action="store_true",
            help="find the alert by reading the whole alerts topic from its beginning (slow on a long topic; "
                 "default: its newest messages, bounded)"),
    ], title="actions")


def with_backlog(stats: dict, group: str | None = None) -> dict:
    """Add the channel's backlog (alerts its consumer group has not settled) and committed offsets."""
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.exceptions import AldebaranError
    from aldebaran.kafka.admin import consumer_lag
    from aldebaran.settings import KafkaSettings, load

    kafka = load(KafkaSettings)
    try:
        lag = consumer_lag(kafka, f"{group or load(DeliverySettings).group}-{stats['channel']}", kafka.alerts_topic)
    except AldebaranError:
        lag = {}
    return {**stats, "backlog": lag.get("lag"), "committed": lag.get("committed")}


def channel_rows(names: list[str] | None = None) -> list[dict]:
    """The configured channels (or `names`) with their kind and promise, from their connections in this
    process's environment (no ledger, no Kafka)."""
    from aldebaran.delivery.channels import channel_names
    from aldebaran.delivery.pages import channel_promise

    rows = []
    for name in channel_names(names):
        promise = channel_promise(name)
        rows.append({"channel": name, "kind": promise["kind"] if promise else None,
                     "promise": promise["promise"] if promise else "unknown (no connection here)"})
    return rows


def promise_of(channel: str) -> str | None:
    """A ledger channel's promise word (None when its kind is unknown here)."""
    from aldebaran.delivery.pages import channel_promise

    return (channel_promise(channel) or {}).get("promise")


def format_table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max([len(c)] + [len(_cell(r.get(c))) for r in rows]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(_cell(r.get(c)).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def _cell(value) -> str:
    return "-" if value is None else str(value)


def locate_alert(alert_id: str, timeout: float = 30.0, scan: bool = False) -> tuple[int, int] | None:
    """(partition, offset) of the alert's first message on the alerts topic: newest first, bounded
    (aldebaran.delivery.locate); `scan` reads every partition from its beginning (slow on a long topic).
    None when not found."""
    from aldebaran.delivery.locate import locate
    from aldebaran.settings import KafkaSettings, load

    return locate(load(KafkaSettings), alert_id, timeout=timeout, scan=scan)


def find(ledger, channel: str, alert_id: str, position: tuple[int, int] | None, max_run: int = 100_000) -> dict:
    """One channel's view of an alert: its own record if it has one, else its entry in the run. A corrupt
    record or run is skipped, never fatal: the view says CORRUPT with its key and reason (`corrupt`)."""
    from aldebaran.delivery.corrupt import record

    corrupt: list = []
    got = record(ledger, channel, alert_id, corrupt, "deliveries show")
    if got is not None:
        return {"channel": channel, "source": "record", **got[0].to_dict()}
    if position is None:
        if corrupt:
            return {"channel": channel, "state": "CORRUPT", "corrupt": corrupt, "note": _unreadable(corrupt)}
        return {"channel": channel, "state": "UNKNOWN",
                "note": "no record, and not found on the alerts topic (the look-up reads its newest messages: "
                        "--scan reads it all, slowly; or the topic no longer holds it)"}
    from aldebaran.settings import KafkaSettings, load

    topic = load(KafkaSettings).alerts_topic
    partition, offset = position
    run = ledger.run_covering(channel, topic, partition, offset, max_run, corrupt=corrupt)
    if run is None and corrupt:  # the record, or a run that may hold the alert, cannot be read
        return {"channel": channel, "state": "CORRUPT", "partition": partition, "offset": offset, "corrupt": corrupt,
                "note": _unreadable(corrupt)}
    if run is None:
        return {"channel": channel, "state": "PENDING", "partition": partition, "offset": offset,
                "note": "not yet in a run on this channel"}
    entry = next((e for e in run.entries if e[0] == offset), None)
    state = ENTRY_STATES.get(entry[2] if entry else "?")
    return {"channel": channel, "source": "run", "state": state, "receipt": entry[3] if entry else None,
            "run": {"partition": run.partition, "start": run.start, "end": run.end, "state": run.state,
                    "owner": run.owner, "epoch": run.epoch, "claimed_at": run.claimed_at,
                    "recorded_at": run.recorded_at, "history": run.history}}


def _unreadable(corrupt: list[dict]) -> str:
    return "skipped, cannot be read: " + "; ".join(f"{c['key']} ({c['reason']})" for c in corrupt)


def print_corrupt(corrupt: list[dict]) -> None:
    """The corrupt objects a listing skipped (not moved: a dispatcher's sweep quarantines a record)."""
    for c in corrupt:
        print(f"CORRUPT, skipped: {c['key']}  reason={c['reason']!r}")


def main(args: argparse.Namespace) -> int:
    from aldebaran.delivery.ledger import Ledger
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import load

    if args.action == "channels":  # the configuration only: answers without the ledger
        print(format_table(channel_rows([args.channel] if args.channel else None), CHANNEL_COLUMNS))
        return 0
    settings = load(DeliverySettings, prefix=args.prefix)
    ledger = Ledger.from_settings(settings)
    if args.action == "quarantine":
        from aldebaran.storage.quarantine import listed

        rows = listed(ledger.store, ledger.quarantine_prefix())[: args.limit]
        for w in rows:
            print(f"{w.get('key')}  reason={w.get('reason')!r}  reader={w.get('reader')}  copy={w['copy']}")
        print(f"({len(rows)} in {ledger.store.uri(ledger.quarantine_prefix())})")
        return 0
    channels = [args.channel] if args.channel else ledger.channels()
    alert_id = args.alert_id or args.alert
    if args.action == "stats":
        from aldebaran.delivery.corrupt import quarantined

        rows = [{**with_backlog(ledger.stats(c)), "promise": promise_of(c)} for c in channels]
        print(format_table(rows, STAT_COLUMNS) if rows else "(nothing in the delivery ledger yet)")
        q = quarantined(ledger)
        if q["count"]:
            print(f"quarantine: {'≥ ' if q['capped'] else ''}{q['count']} corrupt object(s) set aside in {q['where']} "
                  "(aldebaran deliveries quarantine)")
        return 0
    if args.action == "list":
        from aldebaran.delivery.corrupt import record

        states, corrupt = [args.state] if args.state else [RETRY, DEAD, IN_DOUBT], []
        for c in channels:
            for state in states:
                for i in ledger.indexed(state.lower(), c)[: args.limit]:
                    got = record(ledger, c, i, corrupt, "deliveries list")
                    if got is not None:
                        r = got[0]
                        print(f"{c:<12} {r.alert_id}  {r.state:<9} attempt={r.attempt:<2} {r.alert.kind:<9} "
                              f"order={r.alert.order_id} {('error=' + r.error) if r.error else ''}")
        print_corrupt(corrupt)
        return 0
    if args.action == "runs":
        from aldebaran.settings import KafkaSettings

        topic = load(KafkaSettings).alerts_topic
        corrupt = []
        for c in channels:
            for n, run in enumerate(ledger.runs(c, topic, args.partition, args.from_offset, corrupt=corrupt)):
                if n >= args.limit:
                    break
                print(f"{c:<12} p{run.partition} {run.start}-{run.end} {run.state:<8} epoch={run.epoch} "
                      f"owner={run.owner} {json.dumps(run.counts())}")
        print_corrupt(corrupt)
        return 0
    if not alert_id:
        raise SystemExit(f"{args.action} needs an alert id (--alert-id)")
    if args.action == "show":
        position = locate_alert(alert_id, scan=args.scan)
        views = [find(ledger, c, alert_id, position, settings.run_max) for c in channels]
        print(json.dumps({"alert_id": alert_id, "position": position, "channels": views}, indent=2, default=str))
        return 0
    if not args.channel:
        raise SystemExit(f"{args.action} needs --channel")
    if not args.reason:
        raise SystemExit(f"{args.action} needs --reason (it is recorded)")
    who = f"{getpass.getuser()} (cli)"
    outcome = RETRY if args.action == "retry" else args.outcome
    if outcome is None:
        raise SystemExit("resolve needs --outcome DELIVERED or DEAD")
    record = ledger.resolve(args.channel, alert_id, outcome, args.reason, who)
    print(f"{args.channel}/{alert_id}: now {record.state} ({args.reason})")
    return 0


__all__ = ["STATES", "add_arguments", "channel_rows", "main", "locate_alert", "find"]
