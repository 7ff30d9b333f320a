"""Fast delivery: the low-latency lane's alerts (``ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC``) to the channels that
opted in (``"fast": true`` in the connection's extra), exactly once across both lanes.

A fast dispatcher is the group-commit dispatcher over another topic: per opted-in channel one consumer
group ``<group>-<channel>-fast`` on the fast topic, runs keyed ``runs/<fast topic>/<partition>/<start>``
(so epochs, crash adoption and the sweep work as on the alerts topic), started by
``aldebaran dispatch --fast [--follow]`` and named ``fast-lane`` in its heartbeat. Two things differ,
both for latency (a fast alert should reach its recipient tens of ms after its trade):

- it waits for the first message of a poll and then takes what is already there (``poll`` + ``consume(n, 0)``),
  where the exact lane's dispatcher gathers for up to 0.2 s (librdkafka's ``consume`` waits out its timeout
  to fill the batch);
- it creates a new run without looking for one first (``claim_first``), and a run's sent markers side by
  side: two object-store round trips before the send.

Both lanes' copies of an alert meet in the ledger (aldebaran.delivery.settle): by default in a claim log per
channel and partition (aldebaran.delivery.claimlog: one write per run), else (``ALDEBARAN_DELIVERY_CROSS_LANE=
markers``, and always on SMS and push) at a sent marker per alert; the exact lane's copy of an alert the fast
lane delivered finds it held and is recorded a repeat, not sent again. The
crash orders, and the reconciler's retractions (produced to the fast topic and delivered here as ordinary
runs: aldebaran.delivery.retraction), are in docs/design.md ("Fast delivery").
"""

from __future__ import annotations

from collections.abc import Callable

from aldebaran.delivery.channels.connection import Connection
from aldebaran.delivery.dispatcher import ChannelDispatcher, Dispatcher
from aldebaran.exceptions import ConfigError
from aldebaran.settings import KafkaSettings

DISPATCHER_NAME = "fast-lane"  # its heartbeat's name (not a channel name: those have no "-")
GROUP_SUFFIX = "-fast"


class FastChannelDispatcher(ChannelDispatcher):
    """One fast channel's queue over the fast alerts topic."""

    group_suffix = GROUP_SUFFIX
    claim_first = True

    @staticmethod
    def topic_of(kafka: KafkaSettings) -> str:
        return kafka.fast_alerts_topic

    def fetch(self, c) -> list:
        """Block for the first message (up to 0.2 s, so the loop still turns: heartbeat, sweep, stop), then
        take what has arrived without waiting for more."""
        first = c.poll(0.2)
        if first is None:
            return []
        rest = c.consume(num_messages=self.settings.poll_max - 1, timeout=0) if self.settings.poll_max > 1 else []
        return [first, *rest]


def is_fast(conn: Connection | None) -> bool:
    """Whether a channel's connection opts in (``extra.fast``; errors name the connection and the field)."""
    return conn is not None and conn.extra_bool("fast", False)


def fast_channel_names(names: list[str] | None = None,
                       lookup: Callable[[str], Connection | None] | None = None) -> list[str]:
    """The configured channels (or `names`) whose connection says ``fast: true``, read from the connections
    alone (no channel is built: what a supervisor needs to decide what to start)."""
    from aldebaran.delivery.channels.config import channel_names
    from aldebaran.delivery.channels.sources import lookup as default_lookup

    lookup = lookup or default_lookup
    return [name for name in channel_names(names) if is_fast(lookup(name))]


def fast_channels(names: list[str] | None = None) -> list:
    """The configured channels (or `names`) that opted in to the fast lane, built. ConfigError if none did."""
    from aldebaran.delivery.channels import configured_channels

    channels = configured_channels(names)
    fast = [c for c in channels if c.fast]
    for c in channels:
        if not c.fast:
            c.close()
    if not fast:
        raise ConfigError(f"no fast channel among {', '.join(c.name for c in channels)}: a channel opts in to the "
                          'fast lane with "fast": true in its connection\'s extra (AIRFLOW_CONN_ALDEBARAN_<NAME>)')
    return fast


def fast_dispatcher(ledger, names: list[str] | None = None, **kwargs) -> Dispatcher:
    """A :class:`Dispatcher` of the fast channels (or of `names`, each of which must be fast) over the fast topic."""
    channels = fast_channels(names)
    if names:
        slow = sorted(set(names) - {c.name for c in channels})
        if slow:
            raise ConfigError(f"channel(s) {', '.join(slow)} did not opt in to the fast lane "
                              '("fast": true in the connection\'s extra)')
    return Dispatcher(ledger, channels, worker=FastChannelDispatcher, **kwargs)


def run_once(channels: list[str] | None = None, max_alerts: int | None = None,
             idle_timeout: float | None = None):
    """``aldebaran dispatch --fast``: one pass over the fast topic for the fast channels (or `channels`)."""
    from aldebaran.delivery.dispatcher import default_ledger

    return fast_dispatcher(default_ledger(), channels).run_once(max_alerts=max_alerts, idle_timeout=idle_timeout)


def lane_retractor(kafka: KafkaSettings, producer=None, named: str | None = None):
    """The lane keeper's :class:`~aldebaran.delivery.retraction.RetractionSink` to the fast topic, or None if no
    configured channel is fast (nobody had the fast alerts, nothing to retract). `named`: the fast channels as
    lane_supervisor names them (ALDEBARAN_LANES_FAST_CHANNELS; "" for none), so the keeper needs none of their
    connections; None: read from the connections. The fast dispatcher delivers what it produces, the keeper
    builds no channel."""
    from aldebaran.delivery.retraction import RetractionSink

    fast = [n for n in named.split(",") if n.strip()] if named is not None else fast_channel_names()
    if not fast:
        return None
    return RetractionSink(kafka, producer)


# --- what the fast lane did for one alert (explain, the Deliveries page) -------------------------------------
def run_topic(run_key: str) -> str:
    """The topic a run key names (``.../runs/<topic>/<partition>/<start>.json``)."""
    return run_key.rsplit("/", 3)[-3]


def fast_view(ledger, channel: str, alert_id: str, fast_topic: str) -> dict | None:
    """One channel's fast-lane story of an alert, or None if it has none: which lane's run holds its sent
    marker or claim log entry (``lane`` fast|exact, the run and the alert's entry in it), its retraction and
    reinstatement (aldebaran.delivery.retraction: their own record where a send failed, else the fast run that
    delivered them). A few reads, no listing, where markers are kept; with the claim log
    (ALDEBARAN_DELIVERY_CROSS_LANE=log) a listing of the channel's logs and a read per partition."""
    from aldebaran.delivery.retraction import REINSTATEMENT, RETRACTION, reinstatement_id, retraction_id

    holder, state, run = _holder(ledger, channel, alert_id)
    retracted = _message_view(ledger, channel, retraction_id(alert_id), RETRACTION, alert_id)
    reinstated = _message_view(ledger, channel, reinstatement_id(alert_id), REINSTATEMENT, alert_id)
    if holder is None and retracted is None:
        return None
    view: dict = {"channel": channel, "sent_by": holder, "lane": None, "state": state, "run": run,
                  "retraction": retracted, "reinstatement": reinstated}
    if holder is not None:
        view["lane"] = "fast" if run_topic(holder) == fast_topic else "exact"
    return view


def _holder(ledger, channel: str, alert_id: str) -> tuple[str | None, str | None, dict | None]:
    """(the run key holding the alert's sent marker or claim, its entry's state, the run's summary)."""
    from aldebaran.delivery import claimlog
    from aldebaran.delivery.corrupt import noted
    from aldebaran.exceptions import LedgerCorrupt

    holder = ledger.sent_by(channel, alert_id) or claimlog.holder_of(ledger, channel, alert_id)  # markers, or the log
    if holder is None:
        return None, None, None
    try:
        run = ledger.run_at(holder)
    except LedgerCorrupt as exc:  # a reader that only looks: skipped (logged with its key), never fatal
        noted(exc, None, "explain")
        return holder, "CORRUPT", None
    if run is None:
        return holder, None, None
    from aldebaran.delivery.tools import ENTRY_STATES

    entry = next((e for e in run.entries if e[1] == alert_id), None)
    return holder, ENTRY_STATES.get(entry[2]) if entry else None, {
        "topic": run.topic, "partition": run.partition, "start": run.start, "end": run.end,
        "state": run.state, "owner": run.owner, "recorded_at": run.recorded_at, "history": run.history}


def _message_view(ledger, channel: str, message_id: str, kind: str, alert_id: str) -> dict | None:
    """A retraction's (or reinstatement's) story on one channel: its own record (a failed send), else the fast
    run whose sent marker holds it. A run keeps no bodies: the message is then named by its kind alone."""
    from aldebaran.delivery.corrupt import record

    got = record(ledger, channel, message_id, None, "explain")  # a corrupt record is skipped and named
    if got is not None:
        r = got[0]
        return {"alert_id": r.alert_id, "state": r.state, "attempt": r.attempt,
                "updated_at": r.updated_at, "alert": r.alert.to_dict(), "history": r.history}
    holder, state, run = _holder(ledger, channel, message_id)
    if holder is None:
        return None
    return {"alert_id": message_id, "state": state, "attempt": 1, "updated_at": (run or {}).get("recorded_at"),
            "alert": {"alert_id": message_id, "kind": kind,
                      ("retracts" if kind == "RETRACTION" else "reinstates"): alert_id},
            "history": (run or {}).get("history") or [], "sent_by": holder}
