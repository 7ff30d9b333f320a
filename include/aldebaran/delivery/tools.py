"""`aldebaran deliveries stats|list|show`: look into the delivery ledger."""

from __future__ import annotations

import argparse
import json

from aldebaran.delivery.dispatcher import default_ledger


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["stats", "list", "show"])
    p.add_argument("--channel", help="channel name (default: every channel in the ledger)")
    p.add_argument("--alert-id", help="with show: the alert id")
    p.add_argument("--state", help="with list: only records in this state")
    p.add_argument("--limit", type=int, default=50)


def main(args: argparse.Namespace) -> int:
    ledger = default_ledger()
    channels = [args.channel] if args.channel else ledger.channels()
    if args.action == "stats":
        cols = ["channel", "pending", "in_flight", "delivered", "retrying", "dead", "in_doubt",
                "oldest_pending_age_s", "lease_seconds", "max_attempts"]
        rows = [ledger.stats(c) for c in channels]
        widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) if rows else len(c) for c in cols}
        print("  ".join(c.ljust(widths[c]) for c in cols))
        for r in rows:
            print("  ".join(str(r[c] if r[c] is not None else "-").ljust(widths[c]) for c in cols))
        if not rows:
            print("(no delivery records yet)")
    elif args.action == "list":
        for c in channels:
            records = [r for r in ledger.records(c) if not args.state or r.state == args.state]
            for r in records[: args.limit]:
                print(f"{c:<10} {r.alert_id}  {r.state:<9} attempt={r.attempt} {r.alert.get('kind')} "
                      f"order={r.alert.get('order_id')}")
    else:
        if not (args.channel and args.alert_id):
            raise SystemExit("show needs --channel and --alert-id")
        got = ledger.get(args.channel, args.alert_id)
        if got is None:
            print(f"no record for {args.channel}/{args.alert_id}")
            return 1
        print(json.dumps(got[0].__dict__, indent=2, default=str))
    return 0
