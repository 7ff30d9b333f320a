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
  when the process that anchors it — the executor's JVM (:func:`executor_pid`) — is gone, or after
  ``IDLE_SECONDS`` without work. Its socket's name carries the checkpoint and the anchor's pid, so a new
  executor (a restarted auditor) never talks to an old host: a host's cache never outlives the executor
  whose batches built it. The anchor is the JVM, not the Python worker's parent: one executor runs one
  PySpark daemon per kind of Python work (the batch's mapInArrow tasks, the RDD jobs that run idle
  shards and stop the hosts), so a daemon-named host would be missed by the stop job and started twice.
- A host that dies (killed, out of memory) fails the task; Spark retries it and a new host loads the
  shard cold (snapshot + deltas). A failure inside the host is sent back and raised in the task.
- The sockets live in ``<tmp>/aldebaran-shards-<uid>``, one directory that every worker of the user's
  jobs finds by name. A host unpickles what arrives on its socket, so the directory must be ours alone:
  created 0700, and if it exists, it must be a real directory (not a symlink) owned by our uid with no
  group or other permissions, else :class:`UnsafeShardDirectory` (nothing is connected or bound there).

Wire format per task: a length-prefixed pickle of (context, batch id, partitions, shard), then an Arrow
IPC stream of the batches; the reply is a length-prefixed pickle of ("ok", rows) or ("error", traceback).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import pickle
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback

from aldebaran.exceptions import AuditorError
from aldebaran.runtime.procs import pid_alive

log = logging.getLogger(__name__)

IDLE_SECONDS = 600.0
START_SECONDS = 60.0
_LEN = struct.Struct("!Q")


class UnsafeShardDirectory(AuditorError):
    """The shard hosts' socket directory could be used by someone else (module docstring)."""


def _dir() -> str:
    path = os.path.join(tempfile.gettempdir(), f"aldebaran-shards-{os.getuid()}")
    with contextlib.suppress(FileExistsError):  # another worker made it first, or it was planted: checked below
        os.mkdir(path, 0o700)
    check_private_dir(path)
    return path


def check_private_dir(path: str) -> None:
    """Raise UnsafeShardDirectory unless `path` is a directory (not a symlink to one) owned by this uid
    with no group or other permissions."""
    st = os.lstat(path)  # never follow a link: a planted one would lead our sockets elsewhere
    uid = os.getuid()
    if stat.S_ISLNK(st.st_mode):
        problem = "is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory"
    elif st.st_uid != uid:
        problem = f"is owned by uid {st.st_uid}"
    elif st.st_mode & 0o077:
        problem = f"has mode {stat.S_IMODE(st.st_mode):04o} (group or others may use it)"
    else:
        return
    raise UnsafeShardDirectory(
        f"shard socket directory {path} {problem}: the shard hosts exchange pickles there, so it must be a "
        f"directory of uid {uid} with mode 0700; remove it (or fix it) and restart the auditor")


def executor_pid() -> int:
    """The pid of the executor JVM this Python worker serves: the worker's parent is PySpark's daemon (which
    the JVM started), or the JVM itself when daemons are off (spark.python.use.daemon=false). Without
    /proc (not Linux) the parent, whatever it is."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            if b"pyspark.daemon" not in f.read():
                return parent
        with open(f"/proc/{parent}/stat") as f:  # "pid (comm) state ppid ...": comm may hold spaces
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return parent


def socket_path(state_root: str, shard: int, anchor_pid: int) -> str:
    digest = hashlib.sha1(f"{state_root}|{anchor_pid}".encode()).hexdigest()[:16]
    return os.path.join(_dir(), f"{digest}-{shard:04d}.sock")


def _send(f, payload: bytes) -> None:
    f.write(_LEN.pack(len(payload)))
    f.write(payload)
    f.flush()


def _recv(f) -> bytes:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        raise ConnectionError("shard host closed the connection")
    (n,) = _LEN.unpack(head)
    body = f.read(n)
    if len(body) < n:
        raise ConnectionError("shard host closed the connection mid-message")
    return body


class _Unclosable:
    """A file the Arrow stream writer may 'close' without closing the socket under it."""

    def __init__(self, f) -> None:
        self.f = f
        self.closed = False

    def write(self, data) -> int:
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.flush()


# --- the task side -------------------------------------------------------------------------------
def shard_tasks_function(ctx, batch_id: int, partitions: int):
    """The co-partitioned plan's mapInArrow body: relays the task's rows (one Kafka partition's, the raw
    columns of copartitioned.RAW_FIELDS) to that shard's host and returns its rows."""

    def run(batches):
        import pyarrow as pa

        from aldebaran.audit.sparkjob.rows import arrow_schema

        t0 = time.perf_counter()
        # The task's input in full before the host call: a few hundred kB a batch, and it splits the task's
        # time into its input (the Kafka read and the JVM → Python transfer) and the host's round trip.
        got = [rb for rb in batches if len(rb)]
        if not got:  # an empty task (e.g. the tick stream's, its rows filtered out)
            return
        t1 = time.perf_counter()
        shard_id = got[0].column("partition")[0].as_py()
        records = call(ctx, batch_id, partitions, shard_id, got[0].schema, iter(got))
        for r in records:
            if r.get("row_type") == "stats":
                r["input_ms"] = round((t1 - t0) * 1000, 1)
                r["host_ms"] = round((time.perf_counter() - t1) * 1000, 1)
        yield pa.RecordBatch.from_pylist(records, schema=arrow_schema())

    return run


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
        _send(f, pickle.dumps((ctx, batch_id, partitions, shard)))
        writer = pa.ipc.new_stream(_Unclosable(f), schema)
        for rb in batches:
            if len(rb):
                writer.write_batch(rb)
        writer.close()
        f.flush()
        status, payload = pickle.loads(_recv(f))
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


# --- the host side -------------------------------------------------------------------------------
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
            request = pickle.loads(_recv(f))
            if request == "stop":
                _send(f, pickle.dumps(("ok", [])))
                return False
            if request[0] == "warm":  # a standby auditor's prefetch: the shard's latest version, cached
                _send(f, pickle.dumps(("ok", _warm(*request[1:]))))
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
        _send(f, pickle.dumps(reply))
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
                    _send(f, pickle.dumps(("warm", ctx, shard, version)))
                    status, payload = pickle.loads(_recv(f))
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
                _send(f, pickle.dumps("stop"))
                _recv(f)

    return run


if __name__ == "__main__":
    from aldebaran.runtime import logs

    logs.setup("shardhost")
    serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
