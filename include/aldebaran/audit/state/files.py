"""Where a shard's state files live: the keys under one prefix of an aldebaran.storage.store Store (a local
directory or an object-store prefix), behind four calls."""

from __future__ import annotations

import os
import re

from aldebaran.exceptions import NotFound
from aldebaran.storage.store import Store, open_prefix

_NAME = re.compile(r"^(delta|snapshot)-(\d{12})\.jsonl\.gz$")


def file_name(kind: str, version: int) -> str:
    """The state file of a version: `delta-<version>.jsonl.gz` or `snapshot-<version>.jsonl.gz`."""
    return f"{kind}-{version:012d}.jsonl.gz"


class Files:
    """The files of one state root: `name` is the key under `prefix` in `store`. A put is whole or absent
    for a reader (LocalStore renames a finished, fsynced file; S3 is one PUT)."""

    def __init__(self, store: Store, prefix: str = "") -> None:
        self.store = store
        self.prefix = prefix

    def put(self, name: str, data: bytes) -> None:
        kind = "application/gzip" if name.endswith(".gz") else "application/json"
        self.store.put(self.prefix + name, data, content_type=kind)

    def get(self, name: str) -> bytes:
        try:
            return self.store.get(self.prefix + name).body
        except NotFound as exc:
            # One error for every backend: ShardStore.load falls back to a cold load on it.
            raise FileNotFoundError(str(exc)) from exc

    def names(self) -> list[str]:
        return sorted(o["Key"][len(self.prefix):] for o in self.store.list(self.prefix))

    def delete(self, name: str) -> None:
        self.store.delete(self.prefix + name)


_FILES: dict[tuple[int, str], Files] = {}


def files_for(root: str) -> Files:
    """The files under `root` (a directory, ``file://…``, ``s3://…`` or ``s3a://…``). Kept per process and
    root, so a shard's every batch reuses one boto3 client and its connections (a client per batch costs
    a shard several ms per batch, docs/design.md § 5); keyed by pid too, so a forked snapshot writer makes
    its own client, never uses its parent's."""
    key = (os.getpid(), root)
    files = _FILES.get(key)
    if files is None:
        files = _FILES[key] = Files(*open_prefix(root))
    return files


def versions(files: Files) -> tuple[dict[int, str], dict[int, str]]:
    """{version: file name} of the deltas and of the snapshots present."""
    deltas, snaps = {}, {}
    for name in files.names():
        m = _NAME.match(name)
        if m:
            (deltas if m.group(1) == "delta" else snaps)[int(m.group(2))] = name
    return deltas, snaps
