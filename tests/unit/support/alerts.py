"""One OVERFILL alert, typed, for the channel tests: the contract's fields with plausible values, any of
them overridden by keyword (``make_alert("7", message="over")``) or left out (``without=("trigger_event_id",)``)."""

from __future__ import annotations

from aldebaran.audit.findings import alert_id
from aldebaran.model import Alert

FIELDS = {"kind": "OVERFILL", "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120,
          "purchase_count": 3, "trigger_event_id": "p-1", "trigger_event_ts": 1_700_000_000_000,
          "detected_at": 1_700_000_000_500}


def make_alert(order: str = "1", without: tuple[str, ...] = (), **over) -> Alert:
    data = {"alert_id": alert_id("OVERFILL", order), "order_id": order, **FIELDS, **over}
    return Alert.from_dict({k: v for k, v in data.items() if k not in without})
