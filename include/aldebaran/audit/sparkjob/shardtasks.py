"""The task side of the co-partitioned plan's shard hosts: what runs inside Spark's Python workers. A shard
task relays its Arrow batches to its shard's host (started if needed) and returns the host's rows; the
driver's RDD jobs run idle shards, warm a standby's hosts and stop them. Apart from the host (shardhost.py)
because none of this runs in the host process, and the host runs none of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import socket
import subprocess
import sys
import time

from aldebaran.audit.sparkjob.shardwire import Unclosable, executor_pid, recv_message, send_message, socket_path

START_SECONDS = 60.0


# The local property that carries the batch id to the shard tasks (BatchWriter sets it on the driver's thread
# before the batch's job): the task function then does not change from batch to batch, so it is pickled and
# registered with the JVM once, not per batch (docs/design.md §5, "The fixed cost of a batch").
BATCH_ID_PROPERTY = "aldebaran.batch_id"
TICK_TOPIC = "__aldebaran_tick__"  # the expiry clock's rows (job.tick_source): they start a batch, nothing more


def shard_tasks_function(ctx, batch_id: int | None, partitions: int):
    """The co-partitioned plan's mapInArrow body: relays the task's rows (one Kafka partition's, the raw
    columns of copartitioned.RAW_FIELDS) to that shard's host and returns its rows. The expiry clock's rows
    are dropped here (a ``where`` in the plan cost a py4j call and an analysis per batch). `batch_id` None:
    the task reads it from its local property BATCH_ID_PROPERTY, and fails without it."""

    def run(batches):
        import pyarrow as pa
        import pyarrow.compute as pc

        from aldebaran.audit.sparkjob.rows import arrow_schema

        t0 = time.perf_counter()
        # The task's input in full before the host call: a few hundred kB a batch, and it splits the task's
        # time into its input (the Kafka read and the JVM → Python transfer) and the host's round trip.
        got = []
        for rb in batches:
            if len(rb):
                ticks = pc.equal(rb.column("topic"), TICK_TOPIC)
                if pc.any(ticks).as_py():
                    rb = rb.filter(pc.invert(ticks))
                if len(rb):
                    got.append(rb)
        if not got:  # an empty task (e.g. the expiry clock's)
            return
        t1 = time.perf_counter()
        shard_id = got[0].column("partition")[0].as_py()
        records = call(ctx, _batch_id() if batch_id is None else batch_id, partitions, shard_id, got[0].schema,
                       iter(got))
        for r in records:
            if r.get("row_type") == "stats":
                r["input_ms"] = round((t1 - t0) * 1000, 1)
                r["host_ms"] = round((time.perf_counter() - t1) * 1000, 1)
        yield pa.RecordBatch.from_pylist(records, schema=arrow_schema())

    return run


def _batch_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    value = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
    if value is None:  # never guess a batch id: the books' versions are keyed by it
        raise RuntimeError(f"shard task: no local property {BATCH_ID_PROPERTY} (set by BatchWriter before the job)")
    return int(value)


def idle_shards_function(ctx, batch_id: int, partitions: int):
    """RDD mapPartitions body: run each listed shard with no events for `batch_id` (its expiry, its delta),
    so every shard's version follows the batches. Returns the same rows as the shard tasks."""

    def run(shard_ids):
        import pyarrow as pa

        for shard_id in shard_ids:
            yield from call(ctx, batch_id, partitions, shard_id, pa.schema([]), iter(()))

    return run


def call(ctx, batch_id: int, partitions: int, shard: int, schema, batches) -> list[dict]:
    """Run one shard's batch (Arrow record batches of `schema`; none for an idle shard) in its host process,
    started if needed; the rows it returns."""
    import pyarrow as pa

    anchor = executor_pid()
    path = socket_path(ctx.state_root, shard, anchor)
    sock = _connect(path) or _start(path, anchor, ctx.host_idle_seconds)
    with sock, sock.makefile("rwb") as f:
        send_message(f, pickle.dumps((ctx, batch_id, partitions, shard)))
        writer = pa.ipc.new_stream(Unclosable(f), schema)
        for rb in batches:
            if len(rb):
                writer.write_batch(rb)
        writer.close()
        f.flush()
        status, payload = pickle.loads(recv_message(f))
    if status != "ok":
        raise RuntimeError(f"shard {shard} host ({path}) failed batch {batch_id}:\n{payload}")
    _freeze_worker_heap()
    return payload


_FROZEN = False


def _freeze_worker_heap() -> None:
    """Once per Python worker, after its first shard task imported what every task needs: move every object
    there is into the collector's permanent generation (gc.freeze).

    Why: a reused pyspark worker runs a full gc.collect() after every task (pyspark/daemon.py). With pyarrow,
    pandas and the product imported that walks a heap of long-lived objects each time; profiled at 1,000
    events/s it was ~25 % of a core per busy worker, whatever the batch's size (docs/design.md §5, "The
    fixed cost of a batch"). Frozen objects are skipped by collections; they are the imports and caches a
    worker keeps for its whole life anyway."""
    global _FROZEN
    if not _FROZEN:
        import gc

        gc.collect()
        gc.freeze()
        _FROZEN = True


def _connect(path: str) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return s
    except OSError:
        s.close()
        return None


def _start(path: str, anchor: int, idle_seconds: float) -> socket.socket:
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        s = _connect(path)  # another task may have started it while we waited for the lock
        if s is not None:
            return s
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a dead host's socket
        with open(path.removesuffix(".sock") + ".log", "ab") as errors:
            proc = subprocess.Popen([sys.executable, "-m", "aldebaran.audit.sparkjob.shardhost", path, str(anchor),
                                     str(idle_seconds)],
                                    stdin=subprocess.DEVNULL, stdout=errors, stderr=errors, close_fds=True,
                                    start_new_session=True)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            s = _connect(path)
            if s is not None:
                return s
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"shard host {path} did not start (exit {proc.poll()}; log {path.removesuffix('.sock')}.log)")



WARM_SCHEMA = "shard int, version long, books long, loaded string"


def warm_function(ctx, version: int | None = None):
    """mapInArrow body for a standby auditor, over a DataFrame of shard ids (column ``id``): each shard's
    host on this executor (started if needed) loads the shard at `version`, the last batch Spark committed,
    and keeps it cached, so a takeover's first batch (the next one) finds its books in memory instead of
    loading them cold. (A version the active wrote for a batch Spark never committed would not do: that
    batch runs again and asks for the version before it.) It runs as a mapInArrow task on purpose: the
    query's tasks are such tasks, so the same kind of Python worker (forked, imports done) waits for them."""

    def run(batches):
        import pyarrow as pa

        anchor = executor_pid()
        for rb in batches:
            for shard in rb.column("id").to_pylist():
                path = socket_path(ctx.state_root, shard, anchor)
                sock = _connect(path) or _start(path, anchor, ctx.host_idle_seconds)
                with sock, sock.makefile("rwb") as f:
                    send_message(f, pickle.dumps(("warm", ctx, shard, version)))
                    status, payload = pickle.loads(recv_message(f))
                if status != "ok":
                    raise RuntimeError(f"shard {shard} host ({path}) failed to warm:\n{payload}")
                yield pa.RecordBatch.from_pylist([payload], schema=pa.schema([
                    ("shard", pa.int32()), ("version", pa.int64()), ("books", pa.int64()), ("loaded", pa.string())]))

    return run


def stop_function(state_root: str):
    """RDD foreachPartition body: stop this executor's hosts of the listed shards (the auditor calls it when
    its query ends; a host it misses stops on its own when idle or when the executor is gone)."""

    def run(shards) -> None:
        for shard in shards:
            s = _connect(socket_path(state_root, shard, executor_pid()))
            if s is None:
                continue
            with s, s.makefile("rwb") as f, contextlib.suppress(OSError, ConnectionError):
                send_message(f, pickle.dumps("stop"))
                recv_message(f)

    return run
