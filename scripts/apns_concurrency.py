"""Runs of concurrent APNs sends against the fake provider: how many are not delivered.

    .venv/bin/python scripts/apns_concurrency.py [--runs 300] [--fresh] [--timeout 3]

Each run is one ``send_many`` of the channel's send window (16 alerts) from its send threads, as the
dispatcher sends a run; ``--fresh`` builds a new channel (new connections) per run. Prints the sends,
the seconds, and every outcome that is not ``delivered`` by its error. The fake is
aldebaran_capacity.receivers.FakeApns (HTTP/2 over TLS, in this process).

Written for the comparison in docs/benchmarks.md ("APNs: one event loop"): to measure another tree's
channel, put its ``include`` first on the path (``PYTHONPATH=<tree>/include``).
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path


def main() -> None:
    from aldebaran.audit.findings import alert_id
    from aldebaran.delivery.channels import ApnsChannel
    from aldebaran.model import Alert
    from aldebaran_capacity.receivers import FakeApns, self_signed_cert

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--fresh", action="store_true", help="a new channel (new connections) per run")
    ap.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args()

    def alert(order: str) -> Alert:
        return Alert.from_dict({"alert_id": alert_id("OVERFILL", order), "order_id": order, "kind": "OVERFILL",
                                "client": "c", "stock": "AAPL", "requested": 100, "purchased": 120,
                                "purchase_count": 2, "trigger_event_id": "p-1",
                                "trigger_event_ts": 1_700_000_000_000, "detected_at": 1_700_000_000_500})

    cert = self_signed_cert(Path(tempfile.mkdtemp(prefix="apns-tls-")))
    not_delivered: collections.Counter = collections.Counter()
    sends, t0 = 0, time.monotonic()
    with FakeApns(cert) as fake:
        channel = None
        for run in range(args.runs):
            if channel is None:
                channel = ApnsChannel("apns", key_id=fake.key_id, team_id=fake.team_id,
                                      signing_key=fake.signing_key(), topic=fake.topic,
                                      device_token=fake.device_token, base_url=fake.url, verify=str(cert[0]),
                                      timeout=args.timeout)
            alerts = [alert(f"{run}-{i}") for i in range(channel.concurrency)]
            sends += len(alerts)
            try:
                for outcome in channel.send_many(alerts):
                    if outcome.status != "delivered":
                        not_delivered[f"{outcome.status}: {(outcome.error or '')[-40:]}"] += 1
            except Exception as exc:  # noqa: BLE001 - what a run's failure looks like is the finding
                not_delivered[f"send_many raised {type(exc).__name__}: {exc}"[:80]] += len(alerts)
            if args.fresh:
                channel.close()
                channel = None
        if channel is not None:
            channel.close()
    print(f"{sends} sends in {time.monotonic() - t0:.1f} s; not delivered: {sum(not_delivered.values())}"
          f" {dict(not_delivered)}")


if __name__ == "__main__":
    main()
