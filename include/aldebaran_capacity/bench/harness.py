"""The measurements behind `aldebaran bench all` and the capacity_test DAG, each on its own topics
and checkpoint, each checked against the reference model (aldebaran.audit.reference):

- :func:`drain`: preload a backlog, then the auditor (Trigger.AvailableNow) catches up; in the same
  run, on the same topic, the ceilings: :func:`spark_batch` (plain Spark batch, same JVM parse +
  aggregate), :func:`kafka_consume` (Kafka's ConsumerPerformance tool) and :func:`python_peer`
  (single-threaded confluent-kafka consumer auditing in a dict).
- :func:`latency`: the auditor in micro-batch mode, trades produced at steady rates, trade → alert
  from Kafka timestamps; every batch logged with its parts (Spark's progress joined by batch id with
  the engine's on_batch figures), so a slow batch shows where its time went.
- :func:`books`: throughput and memory (RSS of the Spark JVM and its Python workers) with N open books.
- :func:`churn`: books opened and closed (expired) per second, with a short TTL on event time.

The auditor is a black box here: ``aldebaran.audit.sparkjob.job.run(settings, spark=...)``; batch figures
come from Spark's own StreamingQueryListener progress (rows, trigger execution time).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import math
import os
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.audit.reference import expected_grouped
from aldebaran_capacity import loadgen
from aldebaran_capacity.loadgen import Mix, Record

log = logging.getLogger(__name__)

MIB = 1024 * 1024


# --- plumbing -------------------------------------------------------------------------------------
@contextlib.contextmanager
def bench_topics(tag: str, partitions: int = 2):
    """Fresh trades/alerts/DLQ topics for one measurement, exported through ALDEBARAN_KAFKA_*."""
    from aldebaran.kafka import admin as kadmin
    from aldebaran.settings import KafkaSettings, load

    names = {"trades_topic": f"bench-{tag}-trades", "alerts_topic": f"bench-{tag}-alerts",
             "dlq_topic": f"bench-{tag}-dlq"}
    saved = {f: os.environ.get(f"ALDEBARAN_KAFKA_{f.upper()}") for f in names}
    for f, topic in names.items():
        os.environ[f"ALDEBARAN_KAFKA_{f.upper()}"] = topic
    settings = load(KafkaSettings)
    kadmin.ensure_topics(settings, partitions=partitions)
    try:
        yield settings
    finally:
        from aldebaran.storage.store import open_store

        kadmin.delete_topics(settings, settings.topics())
        open_store().delete_prefix(f"bench/{tag}")  # the runs' alert archives (bench/<tag>[_<run>]/archive)
        for f, value in saved.items():
            if value is None:
                os.environ.pop(f"ALDEBARAN_KAFKA_{f.upper()}", None)
            else:
                os.environ[f"ALDEBARAN_KAFKA_{f.upper()}"] = value


def tag() -> str:
    return uuid.uuid4().hex[:8]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[k]


class MemorySampler:
    """Peak RSS of this process's children (the Spark JVM and its Python workers), sampled."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-memory")

    @staticmethod
    def current() -> int:
        import psutil

        total = 0
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += child.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            self._stop.wait(self.interval)

    def __enter__(self) -> "MemorySampler":
        self.baseline = self.current()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


def make_progress_listener(query_name: str):
    """A StreamingQueryListener keeping (numInputRows, triggerExecution ms) of every batch of one query."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def __init__(self) -> None:
            self.batches: list[tuple[int, float]] = []

        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            p = json.loads(event.progress.json)
            if p.get("name") == query_name and p.get("numInputRows"):
                self.batches.append((p["numInputRows"], (p.get("durationMs") or {}).get("triggerExecution", 0)))

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    return Progress()


def sustained_rate(batches: list[tuple[int, float]]) -> float:
    """Rows / summed batch time, after the first (warm-up) batch when there are several."""
    use = batches[1:] if len(batches) > 2 else batches
    rows = sum(r for r, _ in use)
    ms = sum(m for _, m in use)
    return rows / (ms / 1000) if ms else float("nan")


def auditor_settings(tagname: str, checkpoint: str, **overrides):
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.settings import load

    base = {"checkpoint": checkpoint, "query_name": f"bench_{tagname}", "archive_prefix": f"bench/{tagname}/archive",
            "starting_offsets": "earliest", "master": "local[2]", "trigger": "available-now"}
    return load(AuditorSettings, **{**base, **overrides})


def run_auditor(spark, settings, on_batch=None) -> dict:
    """Run the auditor to completion (available-now); rows and time per batch from Spark's progress;
    `on_batch` gets the auditor's own figures of each batch."""
    from aldebaran.audit.sparkjob import job

    listener = make_progress_listener(settings.query_name)
    spark.streams.addListener(listener)
    t0 = time.monotonic()
    try:
        job.run(settings, spark=spark, on_batch=on_batch)
        wall = time.monotonic() - t0
        time.sleep(1.0)  # listener events are asynchronous
    finally:
        spark.streams.removeListener(listener)
    return {"wall_s": wall, "batches": list(listener.batches)}


def alert_key(a: dict) -> tuple:
    from aldebaran.audit import reference

    return reference.key(a)


def compare(got: list[dict], expected: list[dict]) -> dict:
    g, e = Counter(map(alert_key, got)), Counter(map(alert_key, expected))
    return {"correct": g == e, "alerts": sum(g.values()), "expected": sum(e.values()),
            "missing": sum((e - g).values()), "extra": sum((g - e).values())}


def read_alerts(kafka) -> list[dict]:
    from aldebaran.kafka import io as kio

    return [json.loads(m.value()) for m in kio.read_topic(kafka, kafka.alerts_topic, timeout=120)]


def expected_of(recs: Iterable[Record], stamps: Iterable[int] | None = None, ttl_ms: int = 600_000) -> list[dict]:
    """Reference alerts for records as produced: their own ts, or the stamps `send` returned."""
    if stamps is None:
        return expected_grouped(((r.key, r.value, r.ts or 0) for r in recs), ttl_ms)
    return expected_grouped(((r.key, r.value, t) for r, t in zip(recs, stamps)), ttl_ms)


def expected_chunked(recs: Iterable[Record], ttl_ms: int, chunk: int = 400_000) -> list[dict]:
    """Reference alerts for a long stream whose orders never expire in the run, in chunks cut at order
    boundaries (no state crosses one when nothing expires): memory stays bounded for millions of books.
    Interleaved orders are fine: a chunk is only cut where the key changes and the cut is checked —
    every key of the next chunk must be new."""
    out: list[dict] = []
    buf: list[Record] = []
    done: set[bytes] = set()
    for r in recs:
        if len(buf) >= chunk and r.key != buf[-1].key and r.key not in done:
            keys = {b.key for b in buf}
            out += expected_of(buf, ttl_ms=ttl_ms)
            done |= keys
            buf = []
        if r.key in done:  # a key of a closed chunk came back: cannot cut here; fall back to one pass
            raise ValueError("expected_chunked: orders straddle a chunk boundary; use expected_of")
        buf.append(r)
    if buf:
        out += expected_of(buf, ttl_ms=ttl_ms)
    return out


@dataclass
class Backlog:
    """A deterministic, re-creatable stream of timestamped records (regenerated, never held)."""

    mix: Mix
    start_ms: int
    events_per_second: float
    tail: list[Record] = field(default_factory=list)

    def records(self) -> Iterator[Record]:
        yield from loadgen.with_timestamps(loadgen.mix_records(self.mix), self.start_ms, self.events_per_second)
        yield from self.tail


# --- drain and its ceilings -------------------------------------------------------------------------
def spark_batch(spark, kafka) -> dict:
    """The ceiling: a plain Spark batch job, same JVM parse, then dedupe + aggregate per order."""
    from pyspark.sql import functions as F

    from aldebaran.audit import parse as events
    from aldebaran.audit.sparkjob.jvmparse import parse_events

    t0 = time.monotonic()
    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
           .option("subscribe", kafka.trades_topic).option("startingOffsets", "earliest")
           .option("endingOffsets", "latest").load())
    valid = parse_events(raw).where(F.col("reason_code").isNull())
    books = (valid.dropDuplicates(["order_id", "event_id"]).groupBy("order_id").agg(
        F.max(F.when(F.col("kind") == events.REQUEST, F.col("shares"))).alias("requested"),
        F.sum(F.when(F.col("kind") == events.PURCHASE, F.col("shares"))).alias("purchased"),
        F.count(F.lit(1)).alias("events")))
    over = books.where(F.col("requested").isNotNull() & (F.col("purchased") > F.col("requested")))
    # One action: a second one would read and parse the topic again and halve the measured ceiling.
    overfilled = {r.order_id for r in over.select("order_id").collect()}
    seconds = time.monotonic() - t0
    rows = raw.count()
    return {"seconds": seconds, "messages": rows, "overfilled": overfilled}


def kafka_consume(kafka, messages: int) -> dict:
    """Kafka's own consumer perf tool (org.apache.kafka.tools.ConsumerPerformance) over the topic."""
    from aldebaran.runtime import paths
    from aldebaran.exceptions import AldebaranError

    cmd = [paths.java(), "-Xmx512m", "-cp", f"{paths.jar_dir('kafka-broker')}/*", "org.apache.kafka.tools.ConsumerPerformance",
           "--bootstrap-server", kafka.bootstrap_servers, "--topic", kafka.trades_topic,
           "--num-records", str(messages), "--group", f"bench-perf-{tag()}", "--timeout", "60000"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.count(",") >= 5 and not l.startswith("start.time")]
    if proc.returncode != 0 or not lines:
        raise AldebaranError(f"ConsumerPerformance failed ({proc.returncode}): {proc.stdout[-800:]} {proc.stderr[-800:]}")
    header = [h.strip() for h in next(l for l in proc.stdout.splitlines() if l.startswith("start.time")).split(",")]
    values = dict(zip(header, (v.strip() for v in lines[-1].split(","))))
    return {"messages": int(values["data.consumed.in.nMsg"]), "msgs_per_s": float(values["nMsg.sec"]),
            "fetch_msgs_per_s": float(values["fetch.nMsg.sec"]), "mb_per_s": float(values["MB.sec"]),
            "command": " ".join(cmd[:1] + ["-cp", "<kafka-broker jars>"] + cmd[4:])}


def python_peer(kafka, ttl_ms: int) -> dict:
    """The peer a user might write by hand: one confluent-kafka consumer, json.loads, a dict of books
    (same event id once, first request wins, OVERFILL once, ORPHAN at event-time expiry)."""
    from confluent_kafka import KafkaError, TopicPartition

    from aldebaran.audit.rules import alert_id
    from aldebaran.kafka import io as kio

    c = kio.consumer(kafka, group=f"bench-peer-{tag()}", **{"fetch.max.bytes": 52428800})
    meta = c.list_topics(kafka.trades_topic, timeout=10).topics[kafka.trades_topic]
    ends = {p: c.get_watermark_offsets(TopicPartition(kafka.trades_topic, p), timeout=10)[1] for p in meta.partitions}
    c.assign([TopicPartition(kafka.trades_topic, p, 0) for p in ends])
    books: dict[str, list] = {}  # order → [requested, purchased, count, seen, fired, first_ts, client, stock, first_p]
    heap: list[tuple[int, str]] = []
    alerts: list[dict] = []
    clock = -1
    n = 0
    done = {p for p, end in ends.items() if end == 0}
    t0 = time.monotonic()

    def emit(kind: str, order: str, b: list, trigger: str) -> None:
        alerts.append({"alert_id": alert_id(kind, order), "kind": kind, "order_id": order, "requested": b[0],
                       "purchased": b[1], "purchase_count": b[2], "trigger_event_id": trigger})

    while len(done) < len(ends):
        for msg in c.consume(10_000, timeout=1.0):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise RuntimeError(str(err))
            n += 1
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
            try:
                e = json.loads(msg.value())
            except ValueError:
                continue
            if not isinstance(e, dict):
                continue
            eid, oid, shares = e.get("id"), e.get("initial_order_id"), e.get("#shares")
            if (not isinstance(eid, (str, int)) or isinstance(eid, bool) or not isinstance(shares, int)
                    or isinstance(shares, bool) or shares < 0):  # 0 shares is valid (BRIEF §2)
                continue
            is_p = oid is not None
            if is_p and (not isinstance(oid, (str, int)) or isinstance(oid, bool)):
                continue
            if not is_p and not (isinstance(e.get("client"), str) and isinstance(e.get("stock"), str)):
                continue
            ts = e["ts"] if isinstance(e.get("ts"), int) else msg.timestamp()[1]
            order, eid = str(oid if is_p else eid), str(eid)
            clock = max(clock, ts)
            while heap and heap[0][0] <= clock:
                _, old = heapq.heappop(heap)
                b = books.pop(old)
                if b[0] is None and b[2]:
                    emit("ORPHAN", old, b, b[8])
            b = books.get(order)
            if b is None:
                b = books[order] = [None, 0, 0, set(), False, ts, None, None, None]
                heapq.heappush(heap, (ts + ttl_ms, order))
            if eid in b[3]:
                continue
            b[3].add(eid)
            if is_p:
                b[1] += shares
                b[2] += 1
                if b[8] is None:
                    b[8] = eid
            elif b[0] is None:
                b[0] = shares
            if not b[4] and b[0] is not None and b[1] > b[0]:
                b[4] = True
                emit("OVERFILL", order, b, eid)
    while heap and heap[0][0] <= clock:
        _, old = heapq.heappop(heap)
        b = books.pop(old)
        if b[0] is None and b[2]:
            emit("ORPHAN", old, b, b[8])
    seconds = time.monotonic() - t0
    c.close()
    return {"seconds": seconds, "messages": n, "alerts": alerts}


def drain(spark, backlog: Backlog, repeats: int = 1, ttl_s: float = 600.0, max_offsets: int = 200_000,
          ceilings: bool = True) -> dict:
    """Preload the backlog, then the auditor's catch-up rate (median of `repeats` fresh checkpoints),
    and the ceilings over the same topic, all checked against the reference model."""
    t = tag()
    with bench_topics(t) as kafka:
        sent = loadgen.send(backlog.records(), kafka.trades_topic, total=None, progress_every=500_000)
        expected = expected_of(backlog.records(), ttl_ms=int(ttl_s * 1000))
        # At least ~10 batches: the sustained rate leaves out the first batch, so a backlog of barely
        # more than one batch would be measured on its small remainder alone.
        per_trigger = min(max_offsets, max(10_000, sent.count // 10))
        runs = []
        for r in range(repeats):
            with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt:
                settings = auditor_settings(f"{t}_{r}", ckpt, ttl_seconds=ttl_s, max_offsets_per_trigger=per_trigger,
                                            idle_ticks=False)
                with MemorySampler() as mem:
                    res = run_auditor(spark, settings)
            got = read_alerts(kafka)
            check = compare(got, expected)
            runs.append({"wall_s": res["wall_s"], "batches": len(res["batches"]),
                         "overall_eps": sent.count / res["wall_s"], "sustained_eps": sustained_rate(res["batches"]),
                         "peak_rss_mib": mem.peak / MIB, **check})
            log.info("drain run %d/%d: %s", r + 1, repeats, runs[-1])
            if r + 1 < repeats:  # the next run needs an empty alerts topic to compare
                from aldebaran.kafka import admin as kadmin

                kadmin.delete_topics(kafka, [kafka.alerts_topic])
                time.sleep(1.0)
                kadmin.ensure_topics(kafka, [kafka.alerts_topic])
        out = {"events": sent.count, "produce_eps": sent.rate, "runs": runs, "max_offsets_per_trigger": per_trigger,
               "auditor_eps": statistics.median(x["sustained_eps"] for x in runs),
               "auditor_overall_eps": statistics.median(x["overall_eps"] for x in runs),
               "correct": all(x["correct"] for x in runs), "expected_alerts": len(expected)}
        if ceilings:
            exp_over = {a["order_id"] for a in expected if a["kind"] == "OVERFILL"}
            sb = [spark_batch(spark, kafka) for _ in range(repeats)]
            out["spark_batch"] = {"eps": statistics.median(x["messages"] / x["seconds"] for x in sb),
                                  "correct": all(x["overfilled"] == exp_over for x in sb)}
            kc = [kafka_consume(kafka, sent.count) for _ in range(repeats)]
            # fetch.nMsg.sec: the fetch phase only (the tool's JVM start and group join excluded).
            out["kafka_consume"] = {"eps": statistics.median(x["fetch_msgs_per_s"] for x in kc),
                                    "incl_join_eps": statistics.median(x["msgs_per_s"] for x in kc),
                                    "correct": all(x["messages"] == sent.count for x in kc),
                                    "command": kc[0]["command"]}
            py = [python_peer(kafka, ttl_ms=int(ttl_s * 1000)) for _ in range(repeats)]
            out["python_peer"] = {"eps": statistics.median(x["messages"] / x["seconds"] for x in py),
                                  "correct": all(compare(x["alerts"], expected)["correct"] for x in py)}
            for name in ("spark_batch", "kafka_consume", "python_peer"):
                out[name]["auditor_ratio"] = out["auditor_eps"] / out[name]["eps"]
                log.info("drain ceiling %s: %s", name, out[name])
        return out


# --- latency ------------------------------------------------------------------------------------------
class AlertCollector(threading.Thread):
    """Reads the alerts topic from the start; keeps (alert, Kafka timestamp of the alert record), and a
    count per order-id prefix (the segment's `<name>-`), so waiting for a segment costs nothing per
    check (a scan of every alert kept, every 0.25 s, took ~15 % of a core next to the auditor at 120k)."""

    def __init__(self, kafka) -> None:
        super().__init__(daemon=True, name="bench-alerts")
        self.kafka = kafka
        self.alerts: list[tuple[dict, int]] = []
        self.by_prefix: Counter = Counter()
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        from confluent_kafka import TopicPartition

        from aldebaran.kafka import io as kio

        c = kio.consumer(self.kafka, group=f"bench-lat-{tag()}", **{"enable.partition.eof": False})
        topic = self.kafka.alerts_topic
        meta = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        try:
            while not self.stop_event.is_set():
                for msg in c.consume(1000, timeout=0.2):
                    if msg.error() is None:
                        alert = json.loads(msg.value())
                        with self.lock:
                            self.alerts.append((alert, msg.timestamp()[1]))
                            self.by_prefix[alert["order_id"].split("-", 1)[0] + "-"] += 1
        finally:
            c.close()

    def snapshot(self) -> list[tuple[dict, int]]:
        with self.lock:
            return list(self.alerts)

    def count(self, prefix: str) -> int:
        """Alerts so far whose order id starts with `prefix` (a segment's `<name>-`)."""
        with self.lock:
            return self.by_prefix[prefix]


def _wait(predicate: Callable[[], bool], timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# Spark's own parts of a trigger (StreamingQueryProgress.durationMs), in the order they happen; any other
# key Spark reports is kept too, after these.
SPARK_PARTS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
SLOWEST_BATCHES = 5


def _progress_listener(query_name: str):
    """A StreamingQueryListener keeping the whole progress JSON of every batch the query ran, by batch id."""
    from pyspark.sql.streaming import StreamingQueryListener

    class BatchProgress(StreamingQueryListener):
        def __init__(self) -> None:
            self.by_batch: dict[int, dict] = {}
            self.lock = threading.Lock()

        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            p = json.loads(event.progress.json)
            # A trigger that found no new data reports progress without running a batch (no addBatch).
            if p.get("name") == query_name and "addBatch" in (p.get("durationMs") or {}):
                with self.lock:
                    self.by_batch[p["batchId"]] = p

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    return BatchProgress()


class _RunSampler(threading.Thread):
    """Every `interval` s, cumulative counters a batch's window is later cut out of: the JVM's garbage
    collection time (local mode: the driver JVM is the executor), CPU seconds of the auditor (this
    process's children: the Spark JVM and its Python workers), of the bench process itself (producer,
    alert reader) and of the whole machine (other users included); and the book snapshots written under
    the checkpoint (their version is the batch that wrote them; first seen here, with their size)."""

    def __init__(self, spark, state_root: str, interval: float = 0.5) -> None:
        super().__init__(daemon=True, name="bench-latency-sampler")
        self.jvm = spark.sparkContext._jvm
        self.state_root = state_root
        self.interval = interval
        self.samples: list[tuple[float, float, float, float, float]] = []  # (wall ms, gc ms, auditor, bench, machine s)
        self.snapshots: dict[str, dict] = {}  # file path → {shard, version, bytes, seen_ms}
        self.gc_error: str | None = None
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self._child_cpu: dict[int, float] = {}
        self._auditor_cpu = 0.0

    def _gc_ms(self) -> float:
        from py4j.protocol import Py4JError

        if self.gc_error:
            return float("nan")
        try:
            beans = self.jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
            return float(sum(max(0, b.getCollectionTime()) for b in beans))
        except Py4JError as exc:  # the JVM gone at the end of the run: no more GC figures
            self.gc_error = str(exc).splitlines()[0]
            return float("nan")

    def _auditor_cpu_s(self) -> float:
        import psutil

        seen: dict[int, float] = {}
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                t = child.cpu_times()
                seen[child.pid] = t.user + t.system
        # A process's own counter, as a delta from its last sample (a new worker from zero).
        self._auditor_cpu += sum(max(0.0, v - self._child_cpu.get(pid, 0.0)) for pid, v in seen.items())
        self._child_cpu = seen
        return self._auditor_cpu

    def _scan_snapshots(self, now_ms: float) -> None:
        import glob
        import re

        for path in glob.glob(os.path.join(self.state_root, "shard-*", "snapshot-*")):
            if path in self.snapshots:
                continue
            m = re.search(r"shard-(\d+).*snapshot-(\d+)", path)
            with contextlib.suppress(OSError):
                self.snapshots[path] = {"shard": int(m.group(1)), "version": int(m.group(2)),
                                        "bytes": os.path.getsize(path), "seen_ms": now_ms}

    def sample(self) -> None:
        import psutil

        now = time.time() * 1000
        t = psutil.cpu_times()
        machine = t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + \
            getattr(t, "steal", 0.0)
        own = psutil.Process().cpu_times()
        row = (now, self._gc_ms(), self._auditor_cpu_s(), own.user + own.system, machine)
        with self.lock:
            self.samples.append(row)
            if self.state_root and not self.state_root.startswith(("s3://", "s3a://")):
                self._scan_snapshots(now)

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def between(self, start_ms: float, end_ms: float) -> dict:
        """GC ms and CPU (% of one core) over [start, end], interpolated between the samples around it."""
        with self.lock:
            samples = list(self.samples)
        if len(samples) < 2 or end_ms <= start_ms:
            return {}

        def at(ms: float, col: int) -> float:
            import bisect

            i = bisect.bisect_left([s[0] for s in samples], ms)
            if i <= 0:
                return samples[0][col]
            if i >= len(samples):
                return samples[-1][col]
            (t0, *a), (t1, *b) = samples[i - 1], samples[i]
            f = (ms - t0) / (t1 - t0) if t1 > t0 else 1.0
            return a[col - 1] + f * (b[col - 1] - a[col - 1])

        secs = (end_ms - start_ms) / 1000
        gc_ms = at(end_ms, 1) - at(start_ms, 1)
        auditor, bench, machine = ((at(end_ms, c) - at(start_ms, c)) / secs * 100 for c in (2, 3, 4))
        return {"jvm_gc_ms": None if math.isnan(gc_ms) else round(gc_ms, 1),
                "cpu_pct": {"auditor": round(auditor), "bench": round(bench),
                            "others": round(max(0.0, machine - auditor - bench)), "machine": round(machine)}}


def _iso_ms(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


def batch_parts(spark_ms: dict, figures: dict, gc_ms: float | None = None) -> dict:
    """One batch's parts (ms), flat: Spark's durationMs parts (`spark_other`: the trigger's time outside
    them), the engine's whole foreachBatch (`foreach_batch`), each of its `steps_ms` (`steps.<name>`,
    whatever numeric steps the engine reports), the slowest shard's Python step (`shard_step_max`), and
    the JVM's GC time within the batch. Steps nest: the steps are inside foreach_batch, which is inside
    addBatch; shard_step_max is inside the step that runs the shard tasks; GC overlaps any of them."""
    trigger = spark_ms.get("triggerExecution")
    spark = {k: v for k, v in spark_ms.items() if k != "triggerExecution" and isinstance(v, (int, float))}
    names = [k for k in SPARK_PARTS if k in spark] + sorted(k for k in spark if k not in SPARK_PARTS)
    ordered = {k: spark[k] for k in names}
    parts: dict = dict(ordered)
    if trigger is not None:
        parts["spark_other"] = max(0, trigger - sum(ordered.values()))
    if figures:
        if isinstance(figures.get("batch_ms"), (int, float)):
            parts["foreach_batch"] = round(figures["batch_ms"], 1)
        for name, value in (figures.get("steps_ms") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                parts[f"steps.{name}"] = round(value, 1)
        if isinstance(figures.get("state_ms_max"), (int, float)):
            parts["shard_step_max"] = round(figures["state_ms_max"], 1)
    if gc_ms is not None:
        parts["jvm_gc"] = gc_ms
    return parts


def batch_records(progress: dict[int, dict], figures: dict[int, dict], windows: list[tuple[str, int, float]],
                  alerts: list[tuple[dict, int]], sampler: _RunSampler | None = None) -> list[dict]:
    """One record per batch the query ran: Spark's progress joined with the engine's on_batch figures by
    batch id; its segment (the last of `windows` [(name, rate, start wall ms)] started before the batch);
    the OVERFILL alerts whose Kafka timestamp falls inside the batch (trigger → alert latency); with a
    sampler, JVM GC and CPU over the batch, and the snapshots whose version is the batch."""
    snaps: dict[int, list[dict]] = {}
    if sampler is not None:
        for s in sampler.snapshots.values():
            snaps.setdefault(s["version"], []).append(s)
    records = []
    for batch_id in sorted(set(progress) | set(figures)):
        p = progress.get(batch_id) or {}
        f = figures.get(batch_id) or {}
        spark_ms = p.get("durationMs") or {}
        start = _iso_ms(p["timestamp"]) if p.get("timestamp") else f.get("received_ms", 0) - f.get("batch_ms", 0)
        trigger = spark_ms.get("triggerExecution")
        seg = [w for w in windows if w[2] <= start]
        kafka_rows = [s.get("numInputRows", 0) for s in p.get("sources") or []
                      if "Kafka" in (s.get("description") or "")]
        machine = sampler.between(start, start + trigger) if sampler is not None and trigger else {}
        rec = {
            "batch_id": batch_id,
            "segment": seg[-1][0] if seg else "warmup",  # before the first rate: the query's start
            "rate": seg[-1][1] if seg else None,
            "start_ms": int(start),
            "rows": p.get("numInputRows"),
            "trade_rows": sum(kafka_rows) if kafka_rows else p.get("numInputRows"),
            "trigger_ms": trigger,
            "parts_ms": batch_parts(spark_ms, f, machine.get("jvm_gc_ms")),
            "shard_loads": f.get("shard_loads"),
            "snapshots": [{"shard": s["shard"], "bytes": s["bytes"]} for s in sorted(snaps.get(batch_id, []),
                                                                                   key=lambda s: s["shard"])],
            "cpu_pct": machine.get("cpu_pct"),
            "open_books": f.get("open_books"),
            "worker_rss_mib_max": f.get("worker_rss_mib_max"),
            "spark_duration_ms": spark_ms,
            "engine": {k: v for k, v in f.items() if k != "received_ms"},
        }
        records.append(rec)
    _attach_alerts(records, alerts)
    return records


def _attach_alerts(records: list[dict], alerts: list[tuple[dict, int]]) -> None:
    """Each OVERFILL alert to the batch whose trigger window holds its Kafka timestamp: its latency."""
    import bisect

    spans = sorted((r["start_ms"], r["start_ms"] + (r["trigger_ms"] or 0), i) for i, r in enumerate(records))
    starts = [s for s, _, _ in spans]
    lat: dict[int, list[int]] = {}
    for a, ts in alerts:
        if a.get("kind") != "OVERFILL":
            continue
        k = bisect.bisect_right(starts, ts) - 1
        if k >= 0 and ts <= spans[k][1] + 5:  # a few ms of clock rounding between JVM and producer stamps
            lat.setdefault(spans[k][2], []).append(ts - a["trigger_event_ts"])
    for i, r in enumerate(records):
        values = lat.get(i, [])
        r["alert_latency_ms"] = ({"alerts": len(values), "p50": percentile(values, 50), "max": max(values)}
                                 if values else {"alerts": 0})


def segment_batches(records: list[dict], segment: str, slowest: int = SLOWEST_BATCHES) -> dict:
    """A segment's batches summed up for the results: how many, the `slowest` by trigger time with their
    parts, and each part's p50/p99 over the batches that read trades (a part a batch did not run counts 0)."""
    mine = [r for r in records if r["segment"] == segment]
    busy = [r for r in mine if r.get("trade_rows")] or mine
    keys: list[str] = []
    for r in busy:
        keys += [k for k in r["parts_ms"] if k not in keys]
    series = {"trigger": [r["trigger_ms"] or 0 for r in busy], "trade_rows": [r["trade_rows"] or 0 for r in busy]}
    series |= {k: [r["parts_ms"].get(k) or 0 for r in busy] for k in keys}
    top = sorted(mine, key=lambda r: r["trigger_ms"] or 0, reverse=True)[:slowest]
    keep = ("batch_id", "trade_rows", "trigger_ms", "parts_ms", "shard_loads", "snapshots", "cpu_pct",
            "alert_latency_ms", "open_books", "worker_rss_mib_max")
    return {"batches": len(mine), "batches_with_trades": len([r for r in mine if r.get("trade_rows")]),
            "slowest_batches": [{k: r.get(k) for k in keep} for r in top],
            "parts_p50_ms": {k: percentile(v, 50) for k, v in series.items()},
            "parts_p99_ms": {k: percentile(v, 99) for k, v in series.items()}}


def p99_alert_batches(records: list[dict], segment: str, alerts: list[tuple[dict, int]], p99_ms: float,
                      top: int = SLOWEST_BATCHES) -> list[dict]:
    """The batches that emitted the segment's alerts at or above its p99 latency, most first."""
    import bisect

    mine = sorted((r["start_ms"], r["start_ms"] + (r["trigger_ms"] or 0), r["batch_id"]) for r in records
                  if r["segment"] == segment)
    starts = [s for s, _, _ in mine]
    counts: Counter = Counter()
    for a, ts in alerts:
        if a.get("kind") != "OVERFILL" or math.isnan(p99_ms) or ts - a["trigger_event_ts"] < p99_ms:
            continue
        k = bisect.bisect_right(starts, ts) - 1
        counts[mine[k][2] if k >= 0 and ts <= mine[k][1] + 5 else None] += 1
    return [{"batch_id": b, "alerts": n} for b, n in counts.most_common(top)]


def batch_log_path(tagname: str):
    """Where a latency run writes its per-batch log: <run dir>/bench/batches/latency-<UTC time>-<tag>.jsonl."""
    from aldebaran.runtime import paths

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return paths.run_dir() / "bench" / "batches" / f"latency-{stamp}-{tagname}.jsonl"


def latency(spark, rates: list[int], duration_s: float, mix: Mix | None = None, catch_up_s: float = 180.0) -> dict:
    """The auditor in micro-batch mode (processing-time trigger, 0 s interval); trades produced at each
    rate for `duration_s`, stamped as sent; latency = alert record's Kafka timestamp − its trigger's.

    Every batch is logged (JSON lines, one file per run, `batch_log` in the result): Spark's progress
    (durationMs parts) joined by batch id with the engine's on_batch figures (steps_ms, the shard step,
    shard loads), JVM GC and CPU over the batch, snapshots written, and the latency of the alerts it
    emitted. Each segment carries its slowest batches and each part's p50/p99."""
    from aldebaran.audit.sparkjob import job

    mix = mix or Mix(overfill_fraction=0.5, open_orders=100, duplicate_fraction=0.01, malformed_fraction=0.001)
    t = tag()
    segments = []
    figures: dict[int, dict] = {}
    figures_lock = threading.Lock()

    def on_batch(f: dict) -> None:
        with figures_lock:
            figures[f["batch_id"]] = {**f, "received_ms": time.time() * 1000}

    windows: list[tuple[str, int, float]] = []
    log_path = batch_log_path(t)
    with bench_topics(t) as kafka, tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt:
        settings = auditor_settings(t, ckpt, trigger="processing-time", trigger_interval="0 seconds",
                                    timeout_seconds=3600)
        progress = _progress_listener(settings.query_name)
        spark.streams.addListener(progress)
        sampler = _RunSampler(spark, Checkpoint(settings.checkpoint).books)
        sampler.start()
        collector = AlertCollector(kafka)
        collector.start()
        runner = threading.Thread(target=job.run, args=(settings,), kwargs={"spark": spark, "on_batch": on_batch},
                                  daemon=True, name="bench-auditor")
        runner.start()
        all_recs: list[Record] = []
        all_stamps: list[int] = []
        try:
            per_order = mix.purchases_per_order + 1
            plan = [("warmup", 200, 200 * per_order)] + [(f"r{rate}", rate, int(rate * duration_s)) for rate in rates]
            for i, (name, rate, n_events) in enumerate(plan):
                seg_mix = Mix(**{**mix.__dict__, "orders": max(1, n_events // per_order), "id_prefix": f"{name}-",
                                 "seed": mix.seed + i})
                recs = list(loadgen.mix_records(seg_mix))
                windows.append((name, rate, time.time() * 1000))
                sent = loadgen.send(recs, kafka.trades_topic, rate=rate, stamp_now=True, progress_every=0)
                all_recs += recs
                all_stamps += sent.timestamps
                exp = expected_of(recs, sent.timestamps)
                prefix = f"{name}-"
                ok = _wait(lambda: collector.count(prefix) >= len(exp), catch_up_s)
                lat = [ts - a["trigger_event_ts"] for a, ts in collector.snapshot()
                       if a["order_id"].startswith(prefix) and a["kind"] == "OVERFILL"]
                seg = {"name": name, "rate": rate, "events": sent.count, "achieved_rate": sent.rate,
                       "alerts": len(lat), "caught_up": ok, "p50_ms": percentile(lat, 50),
                       "p95_ms": percentile(lat, 95), "p99_ms": percentile(lat, 99),
                       "max_ms": max(lat) if lat else float("nan"), "load_avg": os.getloadavg()[0]}
                log.info("latency %s: %s", name, {k: v for k, v in seg.items() if k != "name"})
                segments.append(seg)
                if not runner.is_alive():
                    raise RuntimeError("the auditor stopped during the latency run (see its log above)")
        finally:
            for q in spark.streams.active:
                if q.name == settings.query_name:
                    q.stop()
            runner.join(60)
            time.sleep(1.0)  # listener events are asynchronous
            spark.streams.removeListener(progress)
            collector.stop_event.set()
            collector.join(10)
            sampler.stop_event.set()
            sampler.join(10)
            alerts = collector.snapshot()
            with progress.lock, figures_lock:
                records = batch_records(dict(progress.by_batch), dict(figures), windows, alerts, sampler)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with log_path.open("w") as fh:
                for r in records:
                    fh.write(json.dumps(r, default=str) + "\n")
            log.info("latency: %d batches logged to %s", len(records), log_path)
        got = [a for a, _ in alerts]
        check = compare(got, expected_of(all_recs, all_stamps))
    for seg in segments:
        seg.update(segment_batches(records, seg["name"]))
        prefix = f"{seg['name']}-"
        seg["p99_alert_batches"] = p99_alert_batches(
            records, seg["name"], [(a, ts) for a, ts in alerts if a["order_id"].startswith(prefix)], seg["p99_ms"])
    warmup = [s for s in segments if s["name"] == "warmup"]
    return {"segments": [{k: v for k, v in s.items() if k != "name"} for s in segments if s["name"] != "warmup"],
            "warmup": {k: v for k, v in warmup[0].items() if k != "name"} if warmup else None,
            "duration_s": duration_s, "batch_log": _shown(log_path), "gc_sampling_error": sampler.gc_error, **check}


def _shown(path) -> str:
    """A path under the work tree as relative to it (how the report names it), others as they are."""
    from aldebaran.runtime import paths

    try:
        return str(path.resolve().relative_to(paths.ROOT.resolve()))
    except ValueError:
        return str(path)


# --- books and churn ----------------------------------------------------------------------------------
def books(spark, sizes: list[int], ttl_s: float = 3600.0, seed: int = 11) -> dict:
    """N open books: N orders (request + one purchase, 10% overfilled), all within the TTL; the drain's
    sustained events/s, the last batches' rate (with ~N books open) and peak RSS of the Spark processes."""
    rows = []
    for n in sizes:
        skip = _books_preflight(rows, n)
        if skip:
            log.warning("books %d: not run: %s", n, skip)
            rows.append({"books": n, "skipped": skip})
            continue
        mix = Mix(orders=n, purchases_per_order=1, overfill_fraction=0.1, open_orders=1, seed=seed, id_prefix=f"b{n}-")
        # All events within a tenth of the TTL of event time: every book stays open to the end.
        backlog = Backlog(mix, int(time.time() * 1000), events_per_second=max(1000.0, 2 * n / (ttl_s / 10)))
        t = tag()
        with bench_topics(t) as kafka:
            sent = loadgen.send(backlog.records(), kafka.trades_topic, progress_every=1_000_000, total=2 * n)
            with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt:
                settings = auditor_settings(t, ckpt, ttl_seconds=ttl_s, idle_ticks=False)
                with MemorySampler() as mem:
                    res = run_auditor(spark, settings)
            check = compare(read_alerts(kafka), expected_chunked(backlog.records(), ttl_ms=int(ttl_s * 1000)))
        last = res["batches"][-3:] if len(res["batches"]) > 3 else res["batches"]
        rows.append({"books": n, "events": sent.count, "sustained_eps": sustained_rate(res["batches"]),
                     "last_batches_eps": sum(r for r, _ in last) / (sum(m for _, m in last) / 1000 or float("nan")),
                     "peak_rss_mib": mem.peak / MIB, "baseline_rss_mib": mem.baseline / MIB,
                     "wall_s": res["wall_s"], "load_avg": os.getloadavg()[0], **check})
        log.info("books %d: %s", n, rows[-1])
    measured = [r for r in rows if not r.get("skipped")]
    return {"rows": rows, "correct": bool(measured) and all(r["correct"] for r in measured)}


def _books_preflight(done: list[dict], n: int, headroom: float = 0.9) -> str | None:
    """Why N open books would not fit, projected from the memory per book measured in this run against
    the memory available now; None if it fits or nothing is known. A size that cannot fit is reported
    as not run instead of swapping the machine for an hour.

    With two sizes measured, the cost of a book is the slope between the two largest (peak RSS
    difference / books difference): the fixed costs (the JVM's heap, which grows to its limit whatever
    the books; the Python workers' imports) cancel out, and only the books still to be added count. With
    one, its whole RSS growth / its books: an overestimate, on the safe side."""
    import psutil

    measured = sorted((r for r in done if not r.get("skipped") and r["books"] > 0), key=lambda r: r["books"])
    if not measured:
        return None
    ref = measured[-1]
    if len(measured) >= 2 and ref["books"] > measured[-2]["books"]:
        low = measured[-2]
        per_book = max(ref["peak_rss_mib"] - low["peak_rss_mib"], 0.0) / (ref["books"] - low["books"])
        how = f"slope between {low['books']:,} and {ref['books']:,}"
        needed = per_book * max(n - ref["books"], 0)
    else:
        per_book = max(ref["peak_rss_mib"] - ref["baseline_rss_mib"], 0.0) / ref["books"]
        how = f"RSS growth at {ref['books']:,}"
        needed = per_book * n
    available = psutil.virtual_memory().available / MIB
    if needed <= headroom * available:
        return None
    return (f"projected RSS growth {needed:,.0f} MiB ({per_book * 1024:.2f} KiB per open book, {how}) > "
            f"{headroom:.0%} of the {available:,.0f} MiB available")


CHURN_PARTITIONS = 2  # one shard per partition and core (co-partitioned plan)


def churn(spark, orders: int, ttl_s: float = 5.0, event_rate: float | None = None, seed: int = 13) -> dict:
    """Books opened and closed per second: orders (request + 2 purchases; 20% orphans) spread on event
    time at `event_rate` events/s (default ≤ 20k/s, ≥ 8 TTLs in all) with a TTL of `ttl_s`, so ~ttl × order rate books are open at a time
    and books expire all along the stream; a tail of flush requests past the last deadline expires
    every book of the body on every shard.

    The trades topic has CHURN_PARTITIONS partitions, one shard each under the co-partitioned plan (the
    default), so each shard's event clock follows one partition in Kafka order and the alerts equal the
    reference's. Under the shuffle plan a shard applies a batch's events partition by partition, so its
    clock can run ahead of another partition's events by up to the batch's span of event time; past the
    TTL a book would expire before its own earlier events from the other partition are applied, and the
    alerts would depend on the batching. That is why this section used one partition until the
    co-partitioned plan, which on one partition runs one shard on one core (docs/benchmarks.md)."""
    from aldebaran.audit import parse as events

    mix = Mix(orders=orders, purchases_per_order=2, overfill_fraction=0.3, orphan_fraction=0.2, open_orders=100,
              seed=seed, id_prefix="c-")
    start = int(time.time() * 1000)
    body_events = sum(1 for _ in loadgen.mix_records(mix))
    # Default: at most 20k events/s of event time, and the body spans at least 8 TTLs.
    event_rate = event_rate or min(20_000.0, max(100.0, body_events / (8 * ttl_s)))
    last_ts = start + int((body_events - 1) * 1000 / event_rate)
    flush_ts = last_ts + int(ttl_s * 1000) + 1
    tail = [Record(f"flush-{i}".encode(), events.encode(events.request(f"flush-{i}", 1)), flush_ts) for i in range(256)]
    backlog = Backlog(mix, start, event_rate, tail)
    t = tag()
    with bench_topics(t, partitions=CHURN_PARTITIONS) as kafka:
        sent = loadgen.send(backlog.records(), kafka.trades_topic, progress_every=500_000)
        with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt:
            settings = auditor_settings(t, ckpt, ttl_seconds=ttl_s, idle_ticks=False)
            res = run_auditor(spark, settings)
        check = compare(read_alerts(kafka), expected_of(backlog.records(), ttl_ms=int(ttl_s * 1000)))
    body_share = body_events / sent.count
    busy_s = sum(m for _, m in res["batches"]) / 1000
    events_per_order = body_events / max(1, orders)
    return {"orders": orders, "events": sent.count, "partitions": CHURN_PARTITIONS, "ttl_s": ttl_s,
            "event_rate": event_rate,
            "event_time_span_s": (last_ts - start) / 1000,
            "open_books_approx": int(ttl_s * event_rate / events_per_order),
            "books_per_s": orders / res["wall_s"], "books_per_s_busy": orders / (busy_s * body_share) if busy_s else float("nan"),
            "wall_s": res["wall_s"], "batches": len(res["batches"]), "load_avg": os.getloadavg()[0], **check}
