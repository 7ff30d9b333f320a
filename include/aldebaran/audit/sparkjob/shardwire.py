"""How a shard task and its host process find and talk to each other: the socket directory, the host's
identity (the executor JVM it serves) and the framing of a message. Both sides import it — the relay
(shardtasks.py) and the host (shardhost.py) — and nothing else.

- The sockets live in ``<tmp>/aldebaran-shards-<uid>``, one directory that every worker of the user's
  jobs finds by name. A host unpickles what arrives on its socket, so the directory must be ours alone:
  created 0700, and if it exists, it must be a real directory (not a symlink) owned by our uid with no
  group or other permissions, else :class:`UnsafeShardDirectory` (nothing is connected or bound there).
- A socket's name carries the checkpoint and the anchor's pid (:func:`executor_pid`), so a new executor
  never talks to an old host.

Wire format per task: a length-prefixed pickle of (context, batch id, partitions, shard), then an Arrow
IPC stream of the batches; the reply is a length-prefixed pickle of ("ok", rows) or ("error", traceback).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import struct
import tempfile

from aldebaran.exceptions import AuditorError

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


def send_message(f, payload: bytes) -> None:
    f.write(_LEN.pack(len(payload)))
    f.write(payload)
    f.flush()


def recv_message(f) -> bytes:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        raise ConnectionError("shard host closed the connection")
    (n,) = _LEN.unpack(head)
    body = f.read(n)
    if len(body) < n:
        raise ConnectionError("shard host closed the connection mid-message")
    return body


class Unclosable:
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

