"""What a micro-batch's checkpoint writes cost on an object store (`aldebaran bench checkpoint-files`).

Every committed batch writes two files into the Spark checkpoint (offsets/ before it runs: `walCommit`;
commits/ after: `commitOffsets`). Spark's default checkpoint file manager writes each to a temporary
file and renames it into place; on S3 a rename is a copy plus a delete, each after a few HEAD/LIST calls.
Spark's `AbortableStreamBasedCheckpointFileManager` (spark-hadoop-cloud) writes straight to the final key
and aborts the upload if the write fails, so nothing half-written is ever visible.

One Spark session (local[1], the configured object store through s3a), a `rate` source into a no-op
`foreachBatch`, back-to-back batches of a few rows: each candidate runs `batches` batches after two
untimed ones, in turn, `rounds` times; the medians of Spark's own `durationMs` per candidate are reported.
Point it at the HA profile's erasure-coded MinIO with `ALDEBARAN_ENV_FILE=.env.ha`."""

from __future__ import annotations

import logging
import statistics
import time
import uuid

log = logging.getLogger(__name__)

CANDIDATES = {
    "rename": None,  # Spark's default: temp file + rename
    "abortable-stream": "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager",
    # the platform's (aldebaran/jvm): the abortable stream without the probes around each write, and a
    # conditional create in place of the close-time check
    "object-store": "io.aldebaran.spark.ObjectStoreCheckpointFileManager",
}
PHASES = ("walCommit", "commitOffsets", "triggerExecution")


def _one(spark, prefix: str, label: str, manager: str | None, batches: int, timeout: float) -> list[dict]:
    if manager:
        spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", manager)
    else:
        spark.conf.unset("spark.sql.streaming.checkpointFileManagerClass")
    checkpoint = f"{prefix}/{label}-{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load().writeStream
             .foreachBatch(lambda df, batch_id: None).option("checkpointLocation", checkpoint)
             .trigger(processingTime="100 milliseconds").start())
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < batches + 2:
            if query.exception() is not None:
                raise RuntimeError(f"{label}: the query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: {len(seen)} batches in {timeout:.0f}s")
            time.sleep(0.5)
            seen |= {p["batchId"]: p["durationMs"] for p in query.recentProgress}
    finally:
        query.stop()
    return [seen[b] for b in sorted(seen)[2:batches + 2]]


def run(batches: int = 10, rounds: int = 2, timeout: float = 180.0) -> dict:
    from aldebaran.runtime import spark as sparkmod
    from aldebaran.settings import ObjectStoreSettings, load

    spark = sparkmod.session("aldebaran-bench-checkpoint-files", master="local[1]", s3a=True)
    prefix = f"s3a://{load(ObjectStoreSettings).bucket}/lab/checkpoint-files"
    durations: dict[str, list[dict]] = {name: [] for name in CANDIDATES}
    try:
        for r in range(rounds):
            for name, manager in CANDIDATES.items():
                durations[name] += _one(spark, prefix, name, manager, batches, timeout)
                log.info("checkpoint-files: round %d/%d, %s done", r + 1, rounds, name)
    finally:
        spark.stop()
    out = {name: {phase: statistics.median(d.get(phase, 0) for d in ds) for phase in PHASES}
           for name, ds in durations.items()}
    writes = {name: out[name]["walCommit"] + out[name]["commitOffsets"] for name in CANDIDATES}
    # `ratio`: rename ÷ abortable stream (the key earlier runs published); `ratio_to_platform`: each
    # candidate ÷ the platform's manager, same run
    return {"batches_per_candidate": batches * rounds, "median_ms": out, "checkpoint_writes_ms": writes,
            "ratio": round(writes["rename"] / writes["abortable-stream"], 2) if writes["abortable-stream"] else None,
            "ratio_to_platform": {name: round(w / writes["object-store"], 2) if writes["object-store"] else None
                                  for name, w in writes.items()}}
