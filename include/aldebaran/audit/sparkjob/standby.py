"""A warm standby auditor (``ALDEBARAN_AUDIT_STANDBY``, ``aldebaran auditor run --standby true``).

It is an auditor started before it is needed: its JVM and Spark session are up, its Python imported,
and it waits on the checkpoint's lease (:mod:`aldebaran.runtime.lease`) instead of failing when another auditor
holds it. Every ``standby_refresh_seconds`` it also prefetches the books: with the co-partitioned plan
(the plan of keyed topics) it asks each shard's host on its own executor to load the shard's latest
version (:func:`aldebaran.audit.sparkjob.shardtasks.warm_function`); the query it starts on takeover runs
its tasks on the same executor, so its first batch finds the books in memory, a few deltas behind at
most. The shuffle plan keeps books in Spark's Python workers, which a prefetch cannot aim at: there it
only waits.

While it waits it also announces itself beside the lease (:mod:`aldebaran.audit.sparkjob.handover`), so
that an active auditor whose executors are gone (their machine died) hands over to it at once instead
of waiting for a new executor and loading the books cold.

Takeover is the lease's: at once when the holder died on this host (its pid is gone), else once the
holder's lease has expired (``ALDEBARAN_AUDIT_LEASE_SECONDS``; the failover on another host takes up to
that long). Fencing is the lease's too: the old active, if it is merely slow, cannot commit a batch
once its renewal fails (``Lease.check`` before every batch).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

from aldebaran.audit.sparkjob.handover import announce, withdraw
from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.exceptions import AldebaranError, LeaseHeld, ObjectStoreError

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25  # how often the lease is looked at while waiting
# Logged once the standby's Spark session is up and it waits on the lease: the supervisor's standby slot
# (aldebaran.platform.standby_slot) and the failover campaign read a standby's log for it.
READY_LINE = "waiting for the lease"


def wait_for_lease(spark, settings, kafka, store):
    """Wait (without limit) for the checkpoint's lease while a thread prefetches the books; returns the
    Lease. The lease is looked at every POLL_SECONDS whatever the prefetch is doing."""
    from aldebaran.runtime.lease import acquire

    log.info("standby %s: Spark up; %s on %s (books prefetched every %.0fs)",
             settings.query_name, READY_LINE, settings.checkpoint, settings.standby_refresh_seconds)
    done = threading.Event()
    warmer = threading.Thread(target=_prefetch_loop, args=(spark, settings, kafka, store, done), daemon=True,
                              name="aldebaran-standby-prefetch")
    warmer.start()
    t0 = time.monotonic()
    try:
        while True:
            try:
                lease = acquire(store, settings.checkpoint, settings.query_name, settings.lease_seconds,
                                wait_seconds=3600.0, poll=POLL_SECONDS)
            except LeaseHeld:
                continue
            log.info("standby %s: lease taken after %.1fs on standby: taking over", settings.query_name,
                     time.monotonic() - t0)
            return lease
    finally:
        done.set()
        warmer.join(timeout=1.0)  # its last announcement before the withdrawal
        withdraw(store, settings.checkpoint)


def _prefetch_loop(spark, settings, kafka, store, done: threading.Event) -> None:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    last: list = []
    first = True
    while not done.is_set():
        try:
            if first:
                warm_clients(spark, settings, kafka)
                first = False
            warmed = prefetch(spark, settings, kafka)
        except (Py4JError, PySparkException, AldebaranError, OSError, RuntimeError) as exc:
            # Only a cost: the takeover's first batch then loads the books cold.
            log.warning("standby %s: prefetch failed (%s); the takeover would load the books cold",
                        settings.query_name, exc)
            warmed = []
        if not done.is_set():  # warm (or as warm as it gets): the active may hand over to it
            try:
                announce(store, settings.checkpoint, settings.standby_refresh_seconds)
            except ObjectStoreError as exc:
                log.warning("standby %s: not announced (%s)", settings.query_name, exc)
        summary = [(w["shard"], w["version"]) for w in warmed]
        if summary != last:
            log.info("standby %s: books prefetched %s", settings.query_name, json.dumps(warmed))
            last = summary
        done.wait(settings.standby_refresh_seconds)


def warm_clients(spark, settings, kafka) -> None:
    """What the query's start and first batch would otherwise set up cold in this JVM: the checkpoint's
    Hadoop filesystem (S3A: its client, pools and credentials; Hadoop caches it for the query) and the
    Kafka client classes (one message read from the trades topic, in a batch query)."""
    t0 = time.monotonic()
    path = spark._jvm.org.apache.hadoop.fs.Path(Checkpoint(settings.checkpoint).spark)
    path.getFileSystem(spark._jsc.hadoopConfiguration()).exists(path)
    from aldebaran.kafka.conn import spark_kafka_options

    (spark.read.format("kafka").options(**spark_kafka_options(spark, kafka, "source"))
     .option("subscribe", kafka.trades_topic).load().limit(1).collect())
    log.info("standby %s: checkpoint filesystem and Kafka client warmed in %.1fs", settings.query_name,
             time.monotonic() - t0)


def prefetch(spark, settings, kafka) -> list[dict]:
    """Each shard's version of the last committed batch loaded in its host on this executor (co-partitioned
    plan); [] for the shuffle plan or a checkpoint with no books yet."""
    from aldebaran.audit.sparkjob.plans import read_recorded
    from aldebaran.audit.sparkjob.rows import batch_context
    from aldebaran.audit.sparkjob.shardtasks import WARM_SCHEMA, warm_function

    ctx = batch_context(settings, kafka)
    plan = read_recorded(ctx.state_root)
    if plan is None or not plan.copartitioned:
        return []
    shards = spark.range(0, plan.shards, 1, plan.shards)
    version = last_committed(settings.checkpoint)
    return [r.asDict() for r in shards.mapInArrow(warm_function(ctx, version), WARM_SCHEMA).collect()]


def last_committed(checkpoint: str) -> int | None:
    """The id of the last batch the Spark checkpoint's commit log holds (None: none yet)."""
    cp = Checkpoint(checkpoint)
    root = cp.spark_commits
    if cp.is_s3:
        from aldebaran.storage.store import open_prefix

        store, prefix = open_prefix(root)
        names = [o["Key"].rsplit("/", 1)[-1] for o in store.list(prefix)]
    else:
        path = Path(root.removeprefix("file://"))
        names = [p.name for p in path.iterdir()] if path.is_dir() else []
    return max((int(n) for n in names if n.isdigit()), default=None)
