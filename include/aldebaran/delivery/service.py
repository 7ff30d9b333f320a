"""A long-running dispatcher: ``aldebaran dispatch --follow [--channel NAME ...]``.

It delivers until SIGTERM/SIGINT (then finishes the runs in hand, commits, leaves its consumer groups and
exits 0). A thread of its own (aldebaran.runtime.heartbeat.Beater) publishes its heartbeat every
``ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS`` at ``heartbeats/dispatcher/<name>.json``, however busy the channel
loops are; the loops only report their progress to it:

    {"status": "running"|"stopped"|"failed", "name", "channels", "fast", "owner", "host", "pid", "metrics", "started_at",
     "at", "period", "alerts", "runs", "sent", "failed", "in_doubt", "already_recorded", "retried",
     "ledger_writes", "quarantined", "error",
     "partitions": {channel: {partition: {"epoch", "broken", "settled", "position", "high", "buffered", "advanced_at"}}},
     "progress": {channel: {"loop_at", "progress_at", "pending", "outcomes"}}}

``fast`` says it delivers the fast lane's topic (``--fast``, aldebaran.delivery.fast); ``metrics`` is where its
/metrics is served (aldebaran.runtime.metrics). ``settled`` is the next offset to commit (everything below it is settled
on the channel), ``position`` the consumer's, ``high`` the partition's high watermark as last fetched;
``pending`` says the channel holds work it has not settled (alerts buffered, or read past what is settled,
on a partition that is not broken); ``progress_at`` is when its settled offsets or its count of
settled deliveries last moved. Airflow's ``dispatch_supervisor`` DAG (aldebaran.platform.dispatch_supervisor)
restarts a dispatcher whose process is gone or whose heartbeat is stale (frozen or dead), or which has
had work pending without progress for its progress limit; a slow dispatcher that progresses is left alone.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time

from aldebaran.runtime.heartbeat import DISPATCHER, Beater, Progress, identity

log = logging.getLogger(__name__)

# What counts as a settled delivery in DispatchStats.summary(): a change in their sum is progress.
OUTCOMES = ("sent", "already_recorded", "failed", "in_doubt", "retried")


class _Channel:
    """The heartbeat's view of one channel loop: its worker, its settled offsets (the loop's own dict,
    read, never written here), the consumer positions it last reported, and when each partition advanced."""

    def __init__(self, clock) -> None:
        self.worker = None
        self.settled: dict[int, int] = {}
        self.positions: dict[int, int] = {}
        self.highs: dict[int, int] = {}  # partition → high watermark, as the consumer last fetched it
        self.positions_read = 0.0
        self.advanced: dict[int, tuple[int, float]] = {}  # partition → (settled offset, when it was first seen)
        self.progress = Progress(clock)


class Heartbeat:
    """The streaming dispatcher's heartbeat: written every `period` by its own thread (:meth:`start`,
    :meth:`finish`); the channel loops call :meth:`progress` at each iteration, which never writes."""

    def __init__(self, store, name: str, channels: list[str], owner: str, stats, period: float,
                 ledger=None, clock=time.time, fast: bool = False) -> None:
        self.store, self.name, self.channels, self.owner, self.ledger = store, name, channels, owner, ledger
        self.fast = fast
        self.stats, self.period, self.clock = stats, period, clock
        self.started_at = clock()
        self._lock = threading.Lock()
        # Every channel from the start: a loop that never turns shows as such.
        self._units = {c: _Channel(clock) for c in channels}
        self.last: dict | None = None  # the last body computed
        self.beater = Beater(store, DISPATCHER, name, self.body, period)

    @property
    def workers(self) -> dict:
        return {c: u.worker for c, u in self._units.items() if u.worker is not None}

    def progress(self, worker, consumer=None, settled: dict | None = None) -> None:
        """A channel loop's report at the top of each iteration: it turned; its consumer's positions (read
        here, in the loop's thread, at most once a second: the consumer is not shared with the beat)."""
        with self._lock:
            unit = self._units.setdefault(worker.channel.name, _Channel(self.clock))
        unit.worker = worker
        if settled is not None:
            unit.settled = settled
        unit.progress.turned()
        now = time.monotonic()
        if consumer is not None and now - unit.positions_read >= 1.0:
            from confluent_kafka import KafkaException

            unit.positions_read = now
            try:
                assigned = consumer.assignment()
                unit.positions = {tp.partition: tp.offset for tp in consumer.position(assigned)}
                # The fetcher's cached high watermarks: no broker request (the lag on /metrics).
                unit.highs = {tp.partition: (consumer.get_watermark_offsets(tp, cached=True) or (-1, -1))[1]
                              for tp in assigned}
            except KafkaException as exc:
                log.debug("%s: consumer positions not read: %s", worker.channel.name, exc)

    # --- the body ------------------------------------------------------------------------------------
    def _observe(self, channel: str, unit: _Channel, outcomes: int) -> dict:
        """This channel's partitions as the heartbeat reports them; updates its progress marks."""
        now = self.clock()
        parts, pending = {}, False
        partitions = list(unit.worker.partitions.values()) if unit.worker is not None else []
        settled_now = dict(unit.settled)
        for p in partitions:
            settled, position = settled_now.get(p.number), unit.positions.get(p.number)
            position = position if position is not None and position >= 0 else None
            high = unit.highs.get(p.number)
            high = high if high is not None and high >= 0 else None
            buffered = len(p.buffer)
            last = unit.advanced.get(p.number)
            if last is None or last[0] != settled:
                unit.advanced[p.number] = last = (settled, now)
            parts[p.number] = {"epoch": p.epoch, "broken": p.broken, "settled": settled, "position": position,
                               "high": high, "buffered": buffered, "advanced_at": last[1]}
            # A broken partition is not pending: it stays stopped until a rebalance revokes it, and a
            # restart would not mend it (an operator's job; platform_health names it).
            if not p.broken and (buffered or (settled is not None and position is not None and position > settled)):
                pending = True
        unit.progress.observe((tuple(sorted(settled_now.items())), outcomes), pending)
        return parts

    def body(self, status: str = "running", error: str | None = None) -> dict:
        summary = self.stats.summary() if self.stats is not None else {}
        partitions, progress = {}, {}
        for channel, unit in list(self._units.items()):
            outcomes = sum(int((summary.get(k) or {}).get(channel, 0)) for k in OUTCOMES)
            partitions[channel] = self._observe(channel, unit, outcomes)
            progress[channel] = {**unit.progress.snapshot(), "outcomes": outcomes}
        self.last = {"status": status, "name": self.name, "channels": self.channels, "fast": self.fast,
                     "owner": self.owner,
                     **identity(), "started_at": self.started_at, "at": self.clock(), "period": self.period,
                     **summary, "error": error,
                     "ledger_writes": self.ledger.writes if self.ledger is not None else None,
                     "quarantined": dict(getattr(self.ledger, "quarantined", None) or {}),
                     "partitions": partitions, "progress": progress}
        return self.last  # also what /metrics reports between beats (aldebaran.runtime.metrics_roles)

    # --- writing -----------------------------------------------------------------------------------
    def start(self) -> None:
        self.beater.start()

    def finish(self, status: str, error: str | None = None) -> None:
        self.beater.finish(self.body(status, error))


# A stop that overruns this is a bug: the stacks say where it hangs. Below the supervisors' default stop
# timeout (ALDEBARAN_*_STOP_TIMEOUT_SECONDS, 30 s), so the dump lands before their SIGKILL would.
STOP_GRACE_SECONDS = 25.0
# The backstop: faulthandler's own C thread, which needs neither the GIL nor a lock, dumps the stacks and exits
# (code 1) this long after the grace if the watchdog below could not run (CI saw a dispatcher SIGTERMed during its
# start hang past 30 s without the watchdog's line: something held the GIL or the logging lock).
STOP_BACKSTOP_SECONDS = 2.0


def watch_stop(stop: threading.Event, name: str, grace: float = STOP_GRACE_SECONDS, exit_now=None) -> threading.Thread:
    """From the stop on, give the process `grace` seconds to exit (its runs finished, its offsets committed,
    its threads joined); past that, log every thread's stack and exit at once. Exiting mid-run is safe (the
    ledger is built for a SIGKILL anywhere); a stop that never ends is not: the process would hold its
    partitions and its heartbeat until something killed it, with nothing saying where it hung. A daemon
    thread, so it also bounds the interpreter's own exit (the joins of non-daemon threads)."""
    import faulthandler
    import os
    import sys

    def watch() -> None:
        stop.wait()
        time.sleep(grace)
        log.error("dispatcher %s: still stopping %gs after the stop; the threads' stacks follow, then exit 70",
                  name, grace)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        (exit_now or os._exit)(70)
        faulthandler.cancel_dump_traceback_later()  # reached only with a test's exit fake

    thread = threading.Thread(target=watch, name="stop-watchdog", daemon=True)
    thread.start()
    return thread


def arm_stop_backstop(grace: float = STOP_GRACE_SECONDS) -> None:
    """Arm the backstop (STOP_BACKSTOP_SECONDS after `grace`). Called where the stop is set, in the signal
    handler: the watchdog thread may never run again once the main thread is stuck holding the GIL."""
    import faulthandler
    import sys

    faulthandler.dump_traceback_later(grace + STOP_BACKSTOP_SECONDS, exit=True, file=sys.stderr)


def follow(channel_names: list[str] | None = None, name: str | None = None, fast: bool = False) -> int:
    """Run the dispatcher until SIGTERM/SIGINT (fast: the fast lane's, aldebaran.delivery.fast). Returns the exit code."""
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.delivery.dispatcher import Dispatcher, default_ledger
    from aldebaran.delivery.stats import DispatchStats

    ledger = default_ledger()
    if fast:
        from aldebaran.delivery.fast import DISPATCHER_NAME, fast_dispatcher

        dispatcher = fast_dispatcher(ledger, channel_names)
        name = name or DISPATCHER_NAME
    else:
        dispatcher = Dispatcher(ledger, configured_channels(channel_names))
        name = name or "-".join(c.name for c in dispatcher.channels)
    channels = dispatcher.channels
    stop = threading.Event()
    stats = DispatchStats()

    def on_signal(signum, _frame) -> None:
        log.info("dispatcher %s: %s received, finishing the runs in hand", name, signal.Signals(signum).name)
        arm_stop_backstop()
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watch_stop(stop, name)
    heartbeat = Heartbeat(ledger.store, name, [c.name for c in channels], dispatcher.owner, stats,
                          dispatcher.settings.heartbeat_seconds, ledger, fast=fast)
    from aldebaran.runtime import metrics, probes
    from aldebaran.runtime.metrics_roles import watch_dispatcher

    metrics.serve("dispatcher", name)  # before the first beat, which names the address
    watch_dispatcher(heartbeat)
    probe = probes.watch_dispatcher(heartbeat)  # /healthz, /readyz: this thread runs the channel loops
    heartbeat.start()
    log.info("dispatcher %s: following %s for %s (ledger %s)", name,
             dispatcher.worker.topic_of(dispatcher.kafka), ", ".join(c.name for c in channels),
             ledger.store.uri(ledger.prefix))
    try:
        dispatcher.run(stop=stop, idle_timeout=None, heartbeat=heartbeat, stats=stats)
    except BaseException as exc:
        heartbeat.finish("failed", error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        probes.unwatch(probe)  # a dispatcher run in a test's process must not outlive its run on the probes
    heartbeat.finish("stopped")
    log.info("dispatcher %s stopped: %s", name, json.dumps(stats.summary()))
    return 0
