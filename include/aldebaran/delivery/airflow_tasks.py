"""What the `alert_dispatch` DAG's tasks call: one call per task, logic here, not in the DAG file."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def channel_names() -> list[str]:
    """The configured channels (validated now, so a bad connection fails this task, naming it)."""
    from aldebaran.delivery.channels import configured_channels

    names = [c.name for c in configured_channels()]
    log.info("dispatching to %d channel(s): %s", len(names), ", ".join(names))
    return names


def dispatch_channel(name: str, idle_timeout: float | None = None) -> dict:
    """Drain the alerts waiting for one channel (its own consumer group), then sweep its retries.
    A streaming dispatcher of the same channel shares the consumer group: the two split the partitions,
    and the ledger's epochs fence whichever of them loses one."""
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher, default_ledger

    channels = configured_channels([name])
    ledger = default_ledger()
    stats = Dispatcher(ledger, channels).run_once(idle_timeout=idle_timeout)
    summary = {"channel": name, "alerts": stats.alerts, "runs": stats.runs, "sent": stats.sent.get(name, 0),
               "already": stats.already.get(name, 0), "failed": stats.failed.get(name, 0),
               "in_doubt": stats.in_doubt.get(name, 0), "retried": stats.retried.get(name, 0),
               "malformed": stats.malformed, "seconds": round(stats.seconds, 2),
               "ledger": ledger.stats(name)}
    log.info("dispatch %s: %s", name, summary)
    return summary
