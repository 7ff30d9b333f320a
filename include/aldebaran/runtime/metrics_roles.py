"""What each long-running process exports on /metrics (:mod:`aldebaran.runtime.metrics` serves it).

- the auditor (its driver's query listener, once per micro-batch: :func:`auditor_batch`);
- a streaming dispatcher (:func:`watch_dispatcher`: read at scrape time from its DispatchStats, which the
  channel loops already keep, and from its heartbeat's last body, written every
  ALDEBARAN_DELIVERY_HEARTBEAT_SECONDS; the ledger's RETRY / DEAD / IN_DOUBT index is listed at most every
  ALDEBARAN_METRICS_LEDGER_REFRESH_SECONDS);
- the lane keeper (:func:`watch_lane`: its heartbeat's last body — the lane's driver status, the
  reconciliation's counts).

Nothing here runs per event. Names, labels and meaning: docs/operations.md "Metrics".
"""

from __future__ import annotations

import logging
import threading
import time

from aldebaran.runtime.metrics import add_source, family, registry, remove_source

log = logging.getLogger(__name__)

# Seconds; a micro-batch of the auditor takes 0.1 s to tens of seconds under load.
BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
# DispatchStats field → the `outcome` label of aldebaran_dispatcher_deliveries_total.
DELIVERY_OUTCOMES = {"sent": "sent", "already": "already_recorded", "failed": "failed", "in_doubt": "in_doubt"}
LEDGER_STATES = ("retry", "dead", "in_doubt")


# --- the auditor -------------------------------------------------------------------------------------
class AuditorMetrics:
    """The auditor's metrics, updated from each micro-batch's heartbeat record (label `query`)."""

    def __init__(self, reg) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        q = ["query"]
        self.batches = Counter("aldebaran_auditor_batches", "Micro-batches completed", q, registry=reg)
        self.input_rows = Counter("aldebaran_auditor_input_rows", "Rows read from Kafka (trades and idle ticks)", q,
                                  registry=reg)
        self.batch_seconds = Histogram("aldebaran_auditor_batch_duration_seconds",
                                       "Micro-batch duration (Spark's triggerExecution)", q, buckets=BATCH_BUCKETS,
                                       registry=reg)
        self.input_rate = Gauge("aldebaran_auditor_input_rows_per_second", "Input rate of the last batch", q,
                                registry=reg)
        self.processed_rate = Gauge("aldebaran_auditor_processed_rows_per_second",
                                    "Processing rate of the last batch", q, registry=reg)
        self.lag = Gauge("aldebaran_auditor_consumer_lag",
                         "Trades behind the topic's latest offsets after the last batch (sum over partitions)", q,
                         registry=reg)
        self.open_books = Gauge("aldebaran_auditor_open_books", "Books open after the last batch", q, registry=reg)
        self.alerts = Counter("aldebaran_auditor_alerts", "Alerts raised", [*q, "kind"], registry=reg)
        self.dlq = Counter("aldebaran_auditor_dlq", "Invalid trades sent to the dead-letter topic", q, registry=reg)
        self.events = Counter("aldebaran_auditor_events", "Trades audited, by outcome (applied, duplicate, "
                              "misrouted: re-produced to the partition that owns its order)", [*q, "outcome"],
                              registry=reg)
        self.books_opened = Counter("aldebaran_auditor_books_opened", "Books opened", q, registry=reg)
        self.books_expired = Counter("aldebaran_auditor_books_expired", "Books expired", q, registry=reg)
        self.misrouted_share = Gauge("aldebaran_auditor_misrouted_share",
                                     "Share of misrouted events over the last 20 batches (the keying contract)", q,
                                     registry=reg)
        self.batch_id = Gauge("aldebaran_auditor_batch_id", "Id of the last completed batch", q, registry=reg)
        self.last_batch = Gauge("aldebaran_auditor_last_batch_timestamp_seconds",
                                "When the last batch completed (Unix time)", q, registry=reg)

    def batch(self, record: dict) -> None:
        """One micro-batch, from its heartbeat record (aldebaran.audit.sparkjob.heartbeat_poller.build)."""
        q = record.get("query") or "auditor"
        self.batches.labels(q).inc()
        self.input_rows.labels(q).inc(record.get("input_rows") or 0)
        if record.get("batch_duration_ms") is not None:
            self.batch_seconds.labels(q).observe(record["batch_duration_ms"] / 1000)
        for gauge, value in ((self.input_rate, record.get("input_rows_per_second")),
                             (self.processed_rate, record.get("processed_rows_per_second")),
                             (self.lag, record.get("consumer_lag")), (self.batch_id, record.get("batch_id"))):
            if value is not None:
                gauge.labels(q).set(value)
        self.last_batch.labels(q).set(time.time())
        books = record.get("books") or {}
        if not books:
            return  # the batch's own figures are not known (not this process's batch): rates only
        self.open_books.labels(q).set(books.get("open_books") or 0)
        for kind, n in (books.get("alert_kinds") or {}).items():
            self.alerts.labels(q, kind).inc(n)
        self.dlq.labels(q).inc(books.get("dlq") or 0)
        for outcome, key in (("applied", "applied"), ("duplicate", "duplicates"), ("misrouted", "misrouted")):
            self.events.labels(q, outcome).inc(books.get(key) or 0)
        self.books_opened.labels(q).inc(books.get("opened") or 0)
        self.books_expired.labels(q).inc(books.get("expired") or 0)
        if books.get("misrouted_share_recent") is not None:
            self.misrouted_share.labels(q).set(books["misrouted_share_recent"])


_auditor: AuditorMetrics | None = None
_auditor_lock = threading.Lock()


def auditor_metrics() -> AuditorMetrics:
    global _auditor
    with _auditor_lock:
        if _auditor is None:
            _auditor = AuditorMetrics(registry())
        return _auditor


def auditor_batch(record: dict) -> None:
    """Called by the auditor's query listener once per micro-batch."""
    auditor_metrics().batch(record)


# --- a streaming dispatcher ----------------------------------------------------------------------------
class LedgerCounts:
    """Entries in a ledger's RETRY / DEAD / IN_DOUBT indexes per channel, listed at most every `refresh`
    seconds (at scrape time, in the metrics server's thread); the last counts stand while the store fails."""

    def __init__(self, ledger, channels: list[str], refresh: float, clock=time.monotonic) -> None:
        self.ledger, self.channels, self.refresh, self.clock = ledger, channels, refresh, clock
        self.counts: dict[tuple[str, str], int] = {}
        self._at: float | None = None
        self._lock = threading.Lock()

    def get(self) -> dict[tuple[str, str], int]:
        from aldebaran.exceptions import ObjectStoreError

        with self._lock:
            if self._at is None or self.clock() - self._at >= self.refresh:
                self._at = self.clock()
                try:
                    self.counts = {(c, s): len(self.ledger.indexed(s, c)) for c in self.channels for s in LEDGER_STATES}
                except (ObjectStoreError, OSError) as exc:
                    log.warning("metrics: delivery ledger indexes not listed (%s); the last counts stand", exc)
            return dict(self.counts)


def dispatcher_families(heartbeat, ledger_counts: LedgerCounts | None = None, now: float | None = None) -> list:
    """A streaming dispatcher's metric families (label `dispatcher` = its heartbeat name)."""
    stats, d = heartbeat.stats, heartbeat.name
    with stats.lock:
        per_channel = {what: dict(getattr(stats, what)) for what in (*DELIVERY_OUTCOMES, "retried")}
        alerts, malformed, runs = stats.alerts, stats.malformed, stats.runs
    channels = list(heartbeat.channels)
    out = [
        family("counter", "aldebaran_dispatcher_deliveries", "Deliveries settled, by channel and outcome "
               "(already_recorded: a repeat the ledger or the recipient had already)", ["dispatcher", "channel", "outcome"],
               [((d, c, label), per_channel[what].get(c, 0)) for what, label in DELIVERY_OUTCOMES.items()
                for c in channels]),
        family("counter", "aldebaran_dispatcher_retries", "Deliveries retried by the sweep", ["dispatcher", "channel"],
               [((d, c), per_channel["retried"].get(c, 0)) for c in channels]),
        family("counter", "aldebaran_dispatcher_alerts_read", "Alerts read from the topic (the busiest channel's "
               "count)", ["dispatcher"], [((d,), alerts)]),
        family("counter", "aldebaran_dispatcher_malformed_alerts", "Rejected alerts sent to alerts.dlq",
               ["dispatcher"], [((d,), malformed)]),
        family("counter", "aldebaran_dispatcher_runs", "Delivery runs claimed", ["dispatcher"], [((d,), runs)]),
        family("counter", "aldebaran_dispatcher_ledger_writes", "Object writes to the delivery ledger", ["dispatcher"],
               [((d,), heartbeat.ledger.writes if heartbeat.ledger is not None else None)]),
        family("counter", "aldebaran_dispatcher_quarantined", "Corrupt ledger objects (or odd index keys) moved to "
               "the ledger's quarantine, by channel", ["dispatcher", "channel"],
               [((d, c), (getattr(heartbeat.ledger, "quarantined", None) or {}).get(c, 0))
                for c in channels]),
    ]
    body = getattr(heartbeat, "last", None) or {}
    now = time.time() if now is None else now
    lag, in_flight, buffered, owned, broken, pending, progress_age = ([] for _ in range(7))
    for channel, parts in (body.get("partitions") or {}).items():
        flight = 0
        for number, p in parts.items():
            settled, position, high = p.get("settled"), p.get("position"), p.get("high")
            if settled is not None and high is not None:
                lag.append(((d, channel, number), max(0, high - settled)))
            if settled is not None and position is not None:
                flight += max(0, position - settled)
        in_flight.append(((d, channel), flight))
        buffered.append(((d, channel), sum(p.get("buffered") or 0 for p in parts.values())))
        owned.append(((d, channel), len(parts)))
        broken.append(((d, channel), sum(1 for p in parts.values() if p.get("broken"))))
    for channel, prog in (body.get("progress") or {}).items():
        pending.append(((d, channel), int(bool(prog.get("pending")))))
        if prog.get("progress_at") is not None:
            progress_age.append(((d, channel), max(0.0, now - prog["progress_at"])))
    c, cp = ["dispatcher", "channel"], ["dispatcher", "channel", "partition"]
    out += [
        family("gauge", "aldebaran_dispatcher_lag", "Alerts on the partition not yet settled on the channel "
               "(high watermark − settled offset)", cp, lag),
        family("gauge", "aldebaran_dispatcher_in_flight", "Alerts read but not yet settled (position − settled)", c,
               in_flight),
        family("gauge", "aldebaran_dispatcher_buffered", "Alerts buffered, waiting for their run", c, buffered),
        family("gauge", "aldebaran_dispatcher_partitions", "Alerts-topic partitions this dispatcher owns", c, owned),
        family("gauge", "aldebaran_dispatcher_broken_partitions", "Owned partitions stopped (fenced or corrupt "
               "ledger): an operator's job", c, broken),
        family("gauge", "aldebaran_dispatcher_pending", "1 when the channel holds work it has not settled", c, pending),
        family("gauge", "aldebaran_dispatcher_progress_age_seconds", "Seconds since the channel's settled offsets "
               "or outcomes last moved", c, progress_age),
        family("gauge", "aldebaran_dispatcher_heartbeat_timestamp_seconds", "When the heartbeat was last computed",
               ["dispatcher"], [((d,), body.get("at"))]),
    ]
    if ledger_counts is not None:
        counts = ledger_counts.get()
        out.append(family("gauge", "aldebaran_dispatcher_ledger_records", "Delivery records in the ledger's "
                          "retry / dead / in_doubt indexes (DEAD and IN_DOUBT need an operator)", ["dispatcher", "channel", "state"],
                          [((d, ch, s), n) for (ch, s), n in sorted(counts.items())]))
    return out


def watch_dispatcher(heartbeat, refresh_seconds: float | None = None) -> str:
    """Export `heartbeat`'s dispatcher (aldebaran.delivery.service.Heartbeat) until :func:`unwatch`."""
    from aldebaran.runtime.metrics import MetricsSettings
    from aldebaran.settings import load

    refresh = refresh_seconds if refresh_seconds is not None else load(MetricsSettings).ledger_refresh_seconds
    counts = LedgerCounts(heartbeat.ledger, list(heartbeat.channels), refresh) if heartbeat.ledger is not None else None
    key = f"dispatcher/{heartbeat.name}"
    add_source(key, lambda: dispatcher_families(heartbeat, counts))
    return key


def unwatch(key: str) -> None:
    remove_source(key)


# --- the lane keeper -----------------------------------------------------------------------------------
LANE_STATUSES = ("starting", "running", "rotating", "failed", "stopped")


def lane_families(keeper, now: float | None = None) -> list:
    """The lane keeper's metric families (label `lane`), from its last heartbeat body."""
    body = getattr(keeper, "last_body", None) or {}
    now = time.time() if now is None else now
    lane = keeper.name
    query = (body.get("lane") or {}).get("query") or {}
    generation = (body.get("lane") or {}).get("generation") or {}
    rec = body.get("reconcile") or {}
    counts = rec.get("counts") or {}
    oldest = rec.get("oldest_pending_fast_ms")
    status = body.get("status")
    gaps = body.get("gaps") or {}
    return [
        family("gauge", "aldebaran_lane_status", "1 for the keeper's current status", ["lane", "status"],
               [((lane, s), int(s == status)) for s in LANE_STATUSES] if status else []),
        family("gauge", "aldebaran_lane_query_active", "1 while the lane's real-time query is active", ["lane"],
               [((lane,), int(bool(query.get("active"))) if query else None)]),
        family("gauge", "aldebaran_lane_driver_report_age_seconds", "Seconds since the lane's driver last reported",
               ["lane"], [((lane,), max(0.0, now - float(query["at"])) if query.get("at") else None)]),
        family("gauge", "aldebaran_lane_batch_id", "The lane query's last progress batch id", ["lane"],
               [((lane,), query.get("batch_id"))]),
        family("gauge", "aldebaran_lane_generation_age_seconds", "Age of the lane's checkpoint generation", ["lane"],
               [((lane,), max(0.0, now - float(generation["started_at"])) if generation.get("started_at") else None)]),
        family("counter", "aldebaran_lane_launches", "Lane processes started by this keeper (rotations included)",
               ["lane"], [((lane,), getattr(keeper, "launches", None))]),
        family("counter", "aldebaran_lane_checkpoint_gaps", "Times the trades the lane's checkpoint resumed from were "
               "gone (topic recreated, retention): checkpoint moved aside, lane restarted fresh", ["lane"],
               [((lane,), gaps.get("count"))]),
        family("counter", "aldebaran_lane_gap_skipped_trades", "Trades the lane skipped at its checkpoint gaps (a "
               "recreated topic's old trades not counted)", ["lane"], [((lane,), gaps.get("skipped"))]),
        family("counter", "aldebaran_lane_alerts", "Distinct alert ids seen by the reconciliation, by lane "
               "(fast: the lane's topic; exact: the auditor's, of the fast lane's kinds)", ["lane", "source"],
               [((lane, s), counts.get(s)) for s in ("fast", "exact")]),
        family("counter", "aldebaran_lane_reconciled", "Reconciliation verdicts (confirmed, confirmed_late, missed: "
               "exact alerts the fast lane never raised, repeats)", ["lane", "verdict"],
               [((lane, v), counts.get(v)) for v in ("confirmed", "confirmed_late", "missed", "repeats")]),
        family("gauge", "aldebaran_lane_unconfirmed", "Fast alerts reported unconfirmed and not confirmed since "
               "(health fails on > 0)", ["lane"], [((lane,), counts.get("unconfirmed"))]),
        family("gauge", "aldebaran_lane_pending", "Alerts waiting for the other lane, by the lane that raised them",
               ["lane", "source"], [((lane, "fast"), rec.get("pending_fast")), ((lane, "exact"), rec.get("pending_exact"))]),
        family("gauge", "aldebaran_lane_oldest_pending_fast_age_seconds", "Age of the oldest fast alert waiting for "
               "its confirmation", ["lane"], [((lane,), max(0.0, now - oldest / 1000) if oldest else None)]),
        family("gauge", "aldebaran_lane_heartbeat_timestamp_seconds", "When the keeper last wrote its heartbeat",
               ["lane"], [((lane,), body.get("at"))]),
    ]


def watch_lane(keeper) -> str:
    key = f"lane/{keeper.name}"
    add_source(key, lambda: lane_families(keeper))
    return key
