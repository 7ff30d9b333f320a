"""The auditor's heartbeat: a driver thread that publishes, per micro-batch, Spark's progress
merged with the books' own figures, as one JSON object in the object store
(``heartbeats/auditor/<query>.json``, written and read through aldebaran.runtime.heartbeat) and as a log line.
The supervisor and the health DAG read it; `aldebaran auditor status` prints it.

Unlike the dispatcher's, this heartbeat is progress itself (one per micro-batch, or an ``idle`` event
when there is nothing to read), read from the query by :class:`HeartbeatPoller`, not by the batch's own code. Whether
the driver lives is told by the checkpoint lease, renewed by a thread of its own, and by the driver's
pid; so the supervisor's "no progress for ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS" (120 s) is already a
rule on lost progress, and it only restarts a busy auditor whose one batch outlasts it.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from aldebaran.runtime.heartbeat import AUDITOR, identity, publish
from aldebaran.storage.store import Store

log = logging.getLogger(__name__)


def build(progress: dict, books: dict | None, status: str) -> dict:
    """One heartbeat record from a StreamingQueryProgress (as JSON) and the BatchWriter's figures."""
    state_ops = progress.get("stateOperators") or []
    sources = progress.get("sources") or []
    return {
        "query": progress.get("name"),
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "status": status,
        "batch_id": progress.get("batchId"),
        "progress_timestamp": progress.get("timestamp"),
        "updated_at_ms": int(time.time() * 1000),
        "input_rows": progress.get("numInputRows"),
        "input_rows_per_second": progress.get("inputRowsPerSecond"),
        "processed_rows_per_second": progress.get("processedRowsPerSecond"),
        "batch_duration_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
        "duration_ms": progress.get("durationMs"),
        "kafka_end_offsets": [s.get("endOffset") for s in sources if "Kafka" in (s.get("description") or "")],
        "consumer_lag": consumer_lag(sources),
        "spark_state_rows": sum(op.get("numRowsTotal", 0) for op in state_ops),
        "spark_state_memory_bytes": sum(op.get("memoryUsedBytes", 0) for op in state_ops),
        "books": books or {},
        **identity(),
    }


def consumer_lag(sources: list[dict]) -> int | None:
    """Messages between the Kafka sources' ends (where the batch stopped) and their latest offsets, summed
    over partitions; None when the progress has no offsets to compare."""
    total, seen = 0, False
    for s in sources:
        if "Kafka" not in (s.get("description") or ""):
            continue
        latest, end = _offsets(s.get("latestOffset")), _offsets(s.get("endOffset"))
        for topic, parts in latest.items():
            for partition, offset in parts.items():
                done = end.get(topic, {}).get(partition)
                if isinstance(offset, int) and isinstance(done, int):
                    total, seen = total + max(0, offset - done), True
    return total if seen else None


def _offsets(value) -> dict:
    """Spark's offsets JSON ({topic: {partition: offset}}), parsed or still a string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


class HeartbeatPoller:
    """Publishes the query's heartbeats from a thread of the driver that reads ``query.lastProgress``.

    Not a StreamingQueryListener: a Python listener gets each event through py4j, and pyspark converts the
    whole progress object call by call, resolving Java names on the way; every failed name lookup scans the
    driver's ~300 jars. Profiled at 1,000 events/s, that listener was 36 % of the auditor JVM's CPU, 0.41
    core (docs/design.md §5 "The resting cost"). Here one poll is two py4j calls on objects already known
    (`lastProgress()`, its `batchId()`), and the progress crosses as one JSON string when it is new. Batches that
    ended between two polls are read from ``recentProgress()``, so each counts once in the metrics.

    Published: ``started`` when attached; ``running`` per new batch; ``idle`` when no batch has run for
    IDLE_AFTER_S and no trigger is active (a batch that hangs keeps the trigger active, so its heartbeat goes
    stale and the supervisor sees no progress); ``stopped``/``failed`` by :meth:`stop`."""

    IDLE_AFTER_S = 10.0

    def __init__(self, store: Store, query_name: str, books_by_batch, period_s: float = 0.5) -> None:
        self.store, self.query_name, self.books_by_batch, self.period_s = store, query_name, books_by_batch, period_s
        self._query = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_batch: int | None = None
        self._last_record: dict | None = None
        self._last_at = time.monotonic()
        self.last: dict | None = None  # the last record published: what /readyz judges (aldebaran.runtime.probes)

    def _publish(self, record: dict) -> None:
        self.last = record
        publish(self.store, AUDITOR, self.query_name, record)  # a failure is logged: it must not stop the query

    def _event(self, status: str, **extra) -> dict:
        q = self._query
        return {"query": self.query_name, "query_id": str(q.id) if q else None,
                "run_id": str(q.runId) if q else None, "status": status, **extra,
                "updated_at_ms": int(time.time() * 1000), **identity()}

    def attach(self, query) -> "HeartbeatPoller":
        self._query = query
        self._publish(self._event("started"))
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.query_name}", daemon=True)
        self._thread.start()
        from aldebaran.runtime import probes

        probes.watch_auditor(self, self._thread)  # /healthz, /readyz: this thread is the loop that reads the query
        return self

    def _run(self) -> None:
        from py4j.protocol import Py4JError

        while not self._done.wait(self.period_s):
            try:
                self.poll()
            except (Py4JError, ConnectionError, OSError) as exc:  # the JVM is going away: stop() follows
                log.debug("heartbeat poll: %s", exc)

    def poll(self) -> None:
        jprogress = self._query._jsq.lastProgress()
        batch = jprogress.batchId() if jprogress is not None else None
        if batch is not None and batch != self._last_batch:
            # Batches that ended between two polls (short batches, or this thread kept off the CPU) are read
            # from the run's recent progress: each counts in the metrics once. Only the last is published.
            for missed in self._missed(batch):
                self.on_progress(missed, publish=False)
            self._last_batch, self._last_at = batch, time.monotonic()
            self.on_progress(json.loads(jprogress.json()))
        elif time.monotonic() - self._last_at >= self.IDLE_AFTER_S:
            if not json.loads(self._query._jsq.status().json()).get("isTriggerActive"):
                self._last_at = time.monotonic()
                # The last batch's figures stay (health reads the processed offsets from them), fresh.
                self._publish({**(self._last_record or {}), **self._event("idle")})

    def _missed(self, batch: int) -> list[dict]:
        """This run's progress of the batches after the last one seen and before `batch`, oldest first (one
        py4j call per batch read: only when the poll has skipped some)."""
        last = self._last_batch
        if last is not None and batch <= last + 1:
            return []
        recent = self._query._jsq.recentProgress()
        missed = []
        for i in range(len(recent) - 1, -1, -1):  # newest first; stop at the last one seen
            batch_id = recent[i].batchId()
            if last is not None and batch_id <= last:
                break
            if batch_id < batch:
                missed.append(json.loads(recent[i].json()))
        return missed[::-1]

    def on_progress(self, progress: dict, publish: bool = True) -> None:
        record = build(progress, self.books_by_batch(progress.get("batchId")), "running")
        self._last_record = record
        from aldebaran.runtime.metrics_roles import auditor_batch

        auditor_batch(record)  # once per micro-batch
        log.info("heartbeat %s", json.dumps({k: record[k] for k in (
            "batch_id", "input_rows", "processed_rows_per_second", "batch_duration_ms")} | {
            "open_books": record["books"].get("open_books"), "alerts": record["books"].get("alerts"),
            "dlq": record["books"].get("dlq")}))
        if publish:
            self._publish(record)

    def stop(self, error: str | None = None) -> None:
        """The query has ended (`error`: why it failed): publish the last progress, then the end."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._query is None:
            return
        from py4j.protocol import Py4JError

        try:
            self.poll()  # the query's last batch, if the thread had not seen it
        except (Py4JError, ConnectionError, OSError) as exc:  # best effort: the end record matters more
            log.debug("heartbeat: last poll: %s", exc)
        self._publish(self._event("failed" if error else "stopped", error=(error or "")[:2000]))
        from aldebaran.runtime import probes

        probes.unwatch(f"auditor/{self.query_name}")  # the query ended: a driver run in a test's process goes on
