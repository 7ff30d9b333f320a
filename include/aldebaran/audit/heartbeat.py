"""The auditor's heartbeat: a StreamingQueryListener that publishes, per micro-batch, Spark's progress
merged with the books' own figures, as one JSON object in the object store
(``heartbeats/auditor/<query>.json``, written and read through aldebaran.heartbeat) and as a log line.
The supervisor and the health DAG read it; `aldebaran auditor status` prints it.

Unlike the dispatcher's, this heartbeat is progress itself (one per micro-batch, or an ``idle`` event
when there is nothing to read), published by Spark's listener bus, not by the batch's own code. Whether
the driver lives is told by the checkpoint lease, renewed by a thread of its own, and by the driver's
pid; so the supervisor's "no progress for ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS" (120 s) is already a
rule on lost progress, and it only restarts a busy auditor whose one batch outlasts it.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from aldebaran.heartbeat import AUDITOR, identity, publish
from aldebaran.storage import Store

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


def make_listener(store: Store, query_name: str, books_by_batch):
    """A listener publishing heartbeats for the query named `query_name` (others are ignored)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class HeartbeatListener(StreamingQueryListener):
        query_id: str | None = None
        terminated = threading.Event()  # set once our query's terminated event was handled

        def _publish(self, record: dict) -> None:
            publish(store, AUDITOR, query_name, record)  # a failure is logged: it must not kill the query

        def _event(self, event, status: str, **extra) -> dict:
            return {"query": query_name, "query_id": str(event.id), "run_id": str(event.runId), "status": status,
                    **extra, "updated_at_ms": int(time.time() * 1000), **identity()}

        def onQueryStarted(self, event) -> None:
            if event.name == query_name:
                self.query_id = str(event.id)
                self._publish(self._event(event, "started"))

        def onQueryProgress(self, event) -> None:
            progress = json.loads(event.progress.json)
            if progress.get("name") != query_name:
                return
            record = build(progress, books_by_batch(progress.get("batchId")), "running")
            from aldebaran.metrics_roles import auditor_batch

            auditor_batch(record)  # once per micro-batch, on the listener's thread
            log.info("heartbeat %s", json.dumps({k: record[k] for k in (
                "batch_id", "input_rows", "processed_rows_per_second", "batch_duration_ms")} | {
                "open_books": record["books"].get("open_books"), "alerts": record["books"].get("alerts"),
                "dlq": record["books"].get("dlq")}))
            self._publish(record)

        def onQueryIdle(self, event) -> None:
            if event.name == query_name:
                self._publish(self._event(event, "idle"))

        def onQueryTerminated(self, event) -> None:
            # Terminated events carry no name; the id tells ours from other queries in this session.
            if str(event.id) != self.query_id:
                return
            self._publish(self._event(event, "failed" if event.exception else "stopped",
                                      error=(event.exception or "")[:2000]))
            self.terminated.set()

    listener = HeartbeatListener()
    listener.terminated = threading.Event()
    return listener

