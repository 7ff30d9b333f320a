"""Storage backends of the delivery ledger. Both honour one contract (tests/integration/test_ledger_contract.py):

- ``create(key, body)``: store only if absent, return an etag; AlreadyExists otherwise.
- ``replace(key, body, etag)``: store only if the current etag is `etag`; PreconditionFailed otherwise.
- ``get(key)``: (body, etag); NotFound if absent.  ``list(prefix)``: keys under a prefix, sorted.
- ``put(key, body)`` / ``delete(key)``: unconditional (index markers only, never delivery records).

S3Backend maps these to PutObject with If-None-Match: * / If-Match (works on AWS S3 and MinIO).
LocalBackend serves one machine without an object store: O_EXCL create, and compare-and-swap by
content hash under an exclusive flock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import Iterator, Protocol

from aldebaran.exceptions import AlreadyExists, NotFound, PreconditionFailed
from aldebaran.objectstore import ObjectStore


class Backend(Protocol):
    def create(self, key: str, body: bytes) -> str: ...
    def replace(self, key: str, body: bytes, etag: str) -> str: ...
    def get(self, key: str) -> tuple[bytes, str]: ...
    def list(self, prefix: str) -> Iterator[str]: ...
    def put(self, key: str, body: bytes) -> None: ...
    def delete(self, key: str) -> None: ...
    def describe(self) -> str: ...


class S3Backend:
    """The ledger on S3/MinIO. With static credentials the hot path (conditional PUTs, GET, DELETE)
    goes through aldebaran.s3lite (the same S3 REST calls, without boto3's per-call overhead);
    listings, and everything when credentials come from the AWS default chain, use boto3."""

    def __init__(self, store: ObjectStore | None = None) -> None:
        self.store = store or ObjectStore()
        s = self.store.settings
        self.fast = None
        if s.access_key and s.secret_key:
            from aldebaran.s3lite import S3Lite

            self.fast = S3Lite(s.endpoint(), s.bucket, s.region, s.access_key.get_secret_value(),
                               s.secret_key.get_secret_value())

    def create(self, key: str, body: bytes) -> str:
        if self.fast:
            return self.fast.put(key, body, if_none_match=True)
        return self.store.create(key, body)

    def replace(self, key: str, body: bytes, etag: str) -> str:
        if self.fast:
            return self.fast.put(key, body, if_match=etag)
        return self.store.replace(key, body, etag)

    def get(self, key: str) -> tuple[bytes, str]:
        if self.fast:
            return self.fast.get(key)
        obj = self.store.get(key)
        return obj.body, obj.etag

    def list(self, prefix: str) -> Iterator[str]:
        for obj in self.store.list(prefix):
            yield obj["Key"]

    def put(self, key: str, body: bytes) -> None:
        if self.fast:
            self.fast.put(key, body)
        else:
            self.store.put(key, body)

    def delete(self, key: str) -> None:
        if self.fast:
            self.fast.delete(key)
        else:
            self.store.delete(key)

    def describe(self) -> str:
        return self.store.uri()


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


class LocalBackend:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError(f"key escapes the ledger root: {key!r}")
        return path

    def create(self, key: str, body: bytes) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise AlreadyExists(f"{path} already exists") from None
        with os.fdopen(fd, "wb") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        return _etag(body)

    def replace(self, key: str, body: bytes, etag: str) -> str:
        path = self._path(key)
        try:
            fh = open(path, "r+b")
        except FileNotFoundError:
            raise NotFound(f"{path} not found") from None
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # the compare and the swap happen under one lock
            if _etag(fh.read()) != etag:
                raise PreconditionFailed(f"{path} changed since it was read")
            fh.seek(0)
            fh.write(body)
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())
        return _etag(body)

    def get(self, key: str) -> tuple[bytes, str]:
        path = self._path(key)
        try:
            with open(path, "rb") as fh:
                fcntl.flock(fh, fcntl.LOCK_SH)
                body = fh.read()
        except FileNotFoundError:
            raise NotFound(f"{path} not found") from None
        return body, _etag(body)

    def list(self, prefix: str) -> Iterator[str]:
        base = self.root / prefix
        directory = base if prefix.endswith("/") else base.parent
        if not directory.exists():
            return
        for path in sorted(directory.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                key = str(path.relative_to(self.root))
                if key.startswith(prefix):
                    yield key

    def put(self, key: str, body: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(body)
        os.replace(tmp, path)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def describe(self) -> str:
        return f"file://{self.root}"
