"""Where a shard's state files live: a local directory or an object-store prefix, behind four calls."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Protocol

_NAME = re.compile(r"^(delta|snapshot)-(\d{12})\.jsonl\.gz$")


def file_name(kind: str, version: int) -> str:
    """The state file of a version: `delta-<version>.jsonl.gz` or `snapshot-<version>.jsonl.gz`."""
    return f"{kind}-{version:012d}.jsonl.gz"


class Files(Protocol):
    def put(self, name: str, data: bytes) -> None: ...
    def get(self, name: str) -> bytes: ...
    def names(self) -> list[str]: ...
    def delete(self, name: str) -> None: ...


class LocalFiles:
    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def put(self, name: str, data: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.root / name)  # atomic: a reader sees the old or the new file, whole

    def get(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def names(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("*.gz")) if self.root.exists() else []

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


class S3Files:
    def __init__(self, uri: str) -> None:
        from aldebaran.settings import ObjectStoreSettings, load
        from aldebaran.storage import S3Store

        bucket, _, prefix = uri.split("://", 1)[1].partition("/")
        self.store = S3Store(load(ObjectStoreSettings, bucket=bucket))  # boto3 client made on first use
        self.prefix = prefix.rstrip("/") + "/"

    def put(self, name: str, data: bytes) -> None:
        self.store.put(self.prefix + name, data, content_type="application/gzip")

    def get(self, name: str) -> bytes:
        from aldebaran.exceptions import NotFound

        try:
            return self.store.get(self.prefix + name).body
        except NotFound as exc:
            # The same error as LocalFiles: ShardStore.load falls back to a cold load on it.
            raise FileNotFoundError(f"{exc}") from exc

    def names(self) -> list[str]:
        return sorted(o["Key"][len(self.prefix):] for o in self.store.list(self.prefix))

    def delete(self, name: str) -> None:
        self.store.delete(self.prefix + name)


_S3_FILES: dict[tuple[int, str], "S3Files"] = {}


def files_for(root: str) -> Files:
    """The files under `root`. An S3 root's client is kept per process and root, so a shard's every batch
    reuses one boto3 client and its connections (a new client per batch cost ~10 ms per shard per batch,
    measured in docs/design.md § 5); keyed by pid too, so a forked snapshot writer makes its own, never
    uses its parent's."""
    if root.startswith(("s3://", "s3a://")):
        key = (os.getpid(), root)
        files = _S3_FILES.get(key)
        if files is None:
            files = _S3_FILES[key] = S3Files(root)
        return files
    return LocalFiles(root.removeprefix("file://"))


def versions(files: Files) -> tuple[dict[int, str], dict[int, str]]:
    """{version: file name} of the deltas and of the snapshots present."""
    deltas, snaps = {}, {}
    for name in files.names():
        m = _NAME.match(name)
        if m:
            (deltas if m.group(1) == "delta" else snaps)[int(m.group(2))] = name
    return deltas, snaps
