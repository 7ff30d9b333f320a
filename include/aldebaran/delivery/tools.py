"""`aldebaran deliveries stats|list|show|retry|resolve`: look into and settle the delivery ledger.

    aldebaran deliveries stats                              per-channel table
    aldebaran deliveries list --channel sms --state IN_DOUBT
    aldebaran deliveries show --channel sms --alert-id <id>
    aldebaran deliveries resolve --channel sms --alert-id <id> --outcome DELIVERED --reason "provider log shows SM123"
    aldebaran deliveries retry --channel webhook --alert-id <id> --reason "endpoint fixed"
"""

from __future__ import annotations

import argparse
import getpass
import json

from aldebaran.delivery.dispatcher import default_ledger
from aldebaran.delivery.ledger import DEAD, DELIVERED, IN_DOUBT, RETRY, STATES

STAT_COLUMNS = ["channel", "records", "backlog", "pending", "in_flight", "delivered", "retrying", "dead", "in_doubt",
                "oldest_pending_age_s", "lease_seconds", "max_attempts"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["stats", "list", "show", "retry", "resolve"])
    p.add_argument("--channel", help="channel name (default for stats/list: every channel in the ledger)")
    p.add_argument("--alert-id", help="show/retry/resolve: the alert id")
    p.add_argument("--state", choices=STATES, help="list: only records in this state")
    p.add_argument("--limit", type=int, default=50, help="list: at most this many rows per channel")
    p.add_argument("--outcome", choices=[DELIVERED, DEAD], help="resolve: what really happened")
    p.add_argument("--reason", help="retry/resolve: why (recorded in the record's history)")
    p.add_argument("--prefix", default="deliveries", help="ledger key prefix in the bucket")


def with_backlog(stats: dict, group: str | None = None) -> dict:
    """Add the channel's backlog: alerts on the topic its consumer group has not settled yet."""
    from aldebaran.delivery.dispatcher import GROUP
    from aldebaran.exceptions import AldebaranError
    from aldebaran.kafka_admin import consumer_lag
    from aldebaran.settings import KafkaSettings, load

    kafka = load(KafkaSettings)
    try:
        lag = consumer_lag(kafka, f"{group or GROUP}-{stats['channel']}", kafka.alerts_topic)["lag"]
    except AldebaranError:
        lag = None
    return {**stats, "backlog": lag, "pending": (stats["pending"] + lag) if lag is not None else stats["pending"]}


def format_table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max([len(c)] + [len(_cell(r.get(c))) for r in rows]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(_cell(r.get(c)).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def _cell(value) -> str:
    return "-" if value is None else str(value)


def main(args: argparse.Namespace) -> int:
    from aldebaran.delivery.backends import S3Backend
    from aldebaran.delivery.ledger import Ledger

    base = default_ledger()
    ledger = Ledger(base.backend if args.prefix == "deliveries" else S3Backend(), prefix=args.prefix,
                    lease_seconds=base.lease_seconds, max_attempts=base.max_attempts)
    channels = [args.channel] if args.channel else ledger.channels()
    if args.action == "stats":
        rows = [with_backlog(ledger.stats(c)) for c in channels]
        print(format_table(rows, STAT_COLUMNS) if rows else "(no delivery records yet)")
        return 0
    if args.action == "list":
        for c in channels:
            if args.state in (RETRY, DEAD, IN_DOUBT):
                ids = ledger.indexed(args.state.lower(), c)
                records = [g[0] for g in (ledger.get(c, i) for i in ids[: args.limit]) if g is not None]
            else:
                records = [r for r in ledger.records(c) if not args.state or r.state == args.state][: args.limit]
            for r in records:
                print(f"{c:<12} {r.alert_id}  {r.state:<9} attempt={r.attempt:<2} {r.alert.get('kind'):<9} "
                      f"order={r.alert.get('order_id')} {('error=' + r.error) if r.error else ''}")
        return 0
    if not (args.channel and args.alert_id):
        raise SystemExit(f"{args.action} needs --channel and --alert-id")
    if args.action == "show":
        got = ledger.get(args.channel, args.alert_id)
        if got is None:
            print(f"no record for {args.channel}/{args.alert_id}")
            return 1
        print(json.dumps(got[0].__dict__, indent=2, default=str))
        return 0
    if not args.reason:
        raise SystemExit(f"{args.action} needs --reason (it is recorded)")
    who = f"{getpass.getuser()} (cli)"
    outcome = RETRY if args.action == "retry" else args.outcome
    if outcome is None:
        raise SystemExit("resolve needs --outcome DELIVERED or DEAD")
    record = ledger.resolve(args.channel, args.alert_id, outcome, args.reason, who)
    print(f"{args.channel}/{args.alert_id}: now {record.state} ({args.reason})")
    return 0
