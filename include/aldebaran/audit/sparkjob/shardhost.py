"""Where the co-partitioned plan's books live: one long-lived process per shard and executor (one copy of
each book), fed by the Spark tasks that read the shard's partition.

Spark hands a task to whichever of its Python workers is idle, so books kept in the workers' memory end
up copied in every worker, each catching up on the deltas the other wrote. Here the Python worker that
runs shard p's task only relays: it streams the task's Arrow batches over a Unix socket to shard p's
host process and returns its rows. The host runs :func:`aldebaran.audit.sparkjob.copartitioned.process`
— parse, book step, DLQ and rerouted records, all durable before it replies — so the commit order is
the batch's. (Books in the workers were measured against this: docs/benchmarks.md "Plans and parsers
side by side".)

Lifetime and identity:

- A host is started by the first task that needs it (a file lock makes sure only one starts) and stops
  when the process that anchors it — the executor's JVM (:func:`shardwire.executor_pid`) — is gone, or after
  ``IDLE_SECONDS`` without work. Its socket's name carries the checkpoint and the anchor's pid, so a new
  executor (a restarted auditor) never talks to an old host: a host's cache never outlives the executor
  whose batches built it. The anchor is the JVM, not the Python worker's parent: one executor runs one
  PySpark daemon per kind of Python work (the batch's mapInArrow tasks, the RDD jobs that run idle
  shards and stop the hosts), so a daemon-named host would be missed by the stop job and started twice.
- A host that dies (killed, out of memory) fails the task; Spark retries it and a new host loads the
  shard cold (snapshot + deltas). A failure inside the host is sent back and raised in the task.

The rooms: this module is the host process (``python -m aldebaran.audit.sparkjob.shardhost``, the name
the process shows); shardtasks.py is what runs in Spark's Python workers (the relay, the idle shards, the
standby's warm-up, the stop job); shardwire.py is what both share (the private socket directory, a host's
identity, the framing).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import sys
import time
import traceback

from aldebaran.audit.sparkjob.shardwire import recv_message, send_message
from aldebaran.runtime.procs import pid_alive

IDLE_SECONDS = 600.0


def serve(path: str, anchor: int, idle_seconds: float = IDLE_SECONDS) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(tmp)
    os.replace(tmp, path)  # the socket appears whole, under its name, only once it listens
    srv.listen(4)
    srv.settimeout(1.0)
    last = time.monotonic()
    try:
        while pid_alive(anchor) and time.monotonic() - last < idle_seconds:
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                continue
            conn.settimeout(None)
            with conn:
                if not _handle(conn):
                    break
            last = time.monotonic()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        srv.close()


def _handle(conn: socket.socket) -> bool:
    """Serve one connection; False when asked to stop."""
    import pyarrow as pa

    from aldebaran.audit.sparkjob.copartitioned import process

    with conn.makefile("rwb") as f:
        reader = None
        try:
            request = pickle.loads(recv_message(f))
            if request == "stop":
                send_message(f, pickle.dumps(("ok", [])))
                return False
            if request[0] == "warm":  # a standby auditor's prefetch: the shard's latest version, cached
                send_message(f, pickle.dumps(("ok", _warm(*request[1:]))))
                return True
            ctx, batch_id, partitions, shard = request
            reader = pa.ipc.open_stream(f)
            reply = ("ok", process(ctx, batch_id, partitions, shard, iter(reader)))
        except Exception:  # sent back and raised in the task, which Spark retries
            reply = ("error", traceback.format_exc())
            if reader is not None:
                with contextlib.suppress(Exception):
                    for _ in reader:  # let the task finish writing, or it would block on a full socket
                        pass
        send_message(f, pickle.dumps(reply))
        return True


def _warm(ctx, shard: int, version: int | None = None) -> dict:
    """Load the shard at `version` (the auditor's last committed batch), or its latest version if None or
    not written yet, into this process's cache."""
    from aldebaran.audit.sparkjob.rows import store_for
    from aldebaran.audit.state.files import versions

    store = store_for(ctx, shard)
    deltas, snapshots = versions(store.files)
    written = [*deltas, *snapshots]
    latest = version if version is not None and version in written else max(written, default=None)
    if latest is None:
        return {"shard": shard, "version": None, "books": 0, "loaded": "none"}
    try:
        books = len(store.load(latest).books)
    except FileNotFoundError:  # the active auditor is cleaning up old versions: next time
        return {"shard": shard, "version": None, "books": 0, "loaded": "retry"}
    return {"shard": shard, "version": latest, "books": books, "loaded": store.loaded}




if __name__ == "__main__":
    from aldebaran.runtime import logs

    logs.setup("shardhost")
    serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
