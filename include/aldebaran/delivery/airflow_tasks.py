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


def streaming_dispatcher(store, channel: str) -> str | None:
    """The name of a streaming dispatcher serving `channel` whose heartbeat is fresh and running, else None
    (its heartbeat is named after the channel unless the supervisor groups channels)."""
    import time

    from aldebaran.runtime import heartbeat
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import load

    beat = heartbeat.read(store, heartbeat.DISPATCHER, channel)
    fresh = 3 * load(DeliverySettings).heartbeat_seconds + 10
    if beat and beat.get("status") == "running" and time.time() - float(beat.get("at", 0)) < fresh \
            and channel in beat.get("channels", []):
        return beat.get("name")
    return None


def dispatch_channel(name: str, idle_timeout: float | None = None) -> dict:
    """Drain the alerts waiting for one channel (its own consumer group), then sweep its retries.
    A streaming dispatcher of the same channel shares the consumer group: the two split the partitions,
    and the ledger's epochs fence whichever of them loses one."""
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher, default_ledger

    channels = configured_channels([name])
    ledger = default_ledger()
    streaming = streaming_dispatcher(ledger.store, name)
    if streaming:
        # Joining the channel's consumer group would only make the live dispatcher rebalance (and pause).
        log.info("dispatch %s: skipped, the streaming dispatcher %s is running", name, streaming)
        return {"channel": name, "skipped": f"streaming dispatcher {streaming} is running"}
    stats = Dispatcher(ledger, channels).run_once(idle_timeout=idle_timeout)
    summary = {"channel": name, "alerts": stats.alerts, "runs": stats.runs, "sent": stats.sent.get(name, 0),
               "already": stats.already.get(name, 0), "failed": stats.failed.get(name, 0),
               "in_doubt": stats.in_doubt.get(name, 0), "retried": stats.retried.get(name, 0),
               "malformed": stats.malformed, "seconds": round(stats.seconds, 2),
               "ledger": ledger.stats(name)}
    log.info("dispatch %s: %s", name, summary)
    return summary
