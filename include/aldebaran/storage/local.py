"""The storage layer's local-directory backend (aldebaran.storage.store's contract, for tests and demos on one
machine), and the object both backends return. Import both from aldebaran.storage.store, which opens stores;
they live here so that the layer's module stays one screen of S3 and one of opening.

Create is a link of a finished temporary file (atomic create-if-absent, never a half-written object);
replace is compare-and-swap by content hash under an exclusive flock; a conditional write's writer token
(aldebaran.storage.store, "Writer tokens") is a hidden ``.<name>.writer`` beside the object, set under its lock.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from aldebaran.exceptions import AlreadyExists, NotFound, PreconditionFailed


@dataclass(frozen=True)
class StoredObject:
    key: str
    body: bytes
    etag: str

    def json(self) -> Any:
        return json.loads(self.body)


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


class LocalStore:
    """The same contract on a local directory (tests, demos, a single machine without an object store)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.bucket = str(self.root)
        self._real_root = self.root.resolve()  # once: resolving costs a stat per path component

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self._real_root not in path.parents:
            raise ValueError(f"key escapes the store's root: {key!r}")
        return path

    @staticmethod
    def _token_path(path: Path) -> Path:
        return path.with_name(f".{path.name}.writer")  # hidden: never listed

    def _set_token(self, path: Path, token: str | None) -> None:
        """Under the object's lock. No token: none may match this version, so a stale one goes."""
        self._token_path(path).write_text(token) if token else self._token_path(path).unlink(missing_ok=True)

    def _token_matches(self, path: Path, token: str) -> bool:
        try:
            return self._token_path(path).read_text() == token
        except FileNotFoundError:
            return False

    def create(self, key: str, body: bytes, content_type: str = "application/json", token: str | None = None) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # the body is complete before the name exists: a link to a finished temporary file is an atomic
        # create-if-absent, so a reader never sees an empty or half-written object
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
            fcntl.flock(fh, fcntl.LOCK_EX)  # the new object's lock, held until its writer token is set
            try:
                os.link(tmp, path)
            except FileExistsError:
                landed = self._written_by(path, token) if token else None
                if landed is not None:
                    return landed
                raise AlreadyExists(f"{path} already exists") from None
            finally:
                tmp.unlink(missing_ok=True)
            self._set_token(path, token)
        return _etag(body)

    def _written_by(self, path: Path, token: str) -> str | None:
        try:
            with open(path, "rb") as fh:
                fcntl.flock(fh, fcntl.LOCK_SH)
                return _etag(fh.read()) if self._token_matches(path, token) else None
        except FileNotFoundError:
            return None

    def replace(self, key: str, body: bytes, etag: str, content_type: str = "application/json",
                token: str | None = None) -> str:
        path = self._path(key)
        try:
            fh = open(path, "r+b")
        except FileNotFoundError:
            raise NotFound(f"{path} not found") from None
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # the compare and the swap happen under one lock
            current = fh.read()
            if _etag(current) != etag:
                if token and self._token_matches(path, token):
                    return _etag(current)  # this write, repeated: it landed the first time
                raise PreconditionFailed(f"{path} changed since it was read")
            fh.seek(0)
            fh.write(body)
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())
            self._set_token(path, token)
        return _etag(body)

    def get(self, key: str) -> StoredObject:
        path = self._path(key)
        try:
            with open(path, "rb") as fh:
                fcntl.flock(fh, fcntl.LOCK_SH)
                body = fh.read()
        except FileNotFoundError:
            raise NotFound(f"{path} not found") from None
        return StoredObject(key, body, _etag(body))

    def list(self, prefix: str, start_after: str | None = None, page_size: int | None = None) -> Iterator[dict]:
        # page_size is the S3 store's request size: a directory walk has none
        base = self.root / prefix
        directory = base if prefix in ("", ".") or prefix.endswith("/") else base.parent
        if not directory.exists():
            return
        keys = []
        for path in directory.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                key = str(path.relative_to(self.root))
                if key.startswith(prefix) and (start_after is None or key > start_after):
                    keys.append((key, path))
        for key, path in sorted(keys):
            st = path.stat()
            yield {"Key": key, "Size": st.st_size,
                   "LastModified": dt.datetime.fromtimestamp(st.st_mtime, dt.timezone.utc)}

    def put(self, key: str, body: bytes, content_type: str = "application/json") -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as fh:  # durable before it is visible, as create and replace are
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)  # a reader sees the old object or the new one, whole
        self._token_path(path).unlink(missing_ok=True)  # an unconditional write has no writer token
        return _etag(body)

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        self._token_path(path).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> int:
        keys = [o["Key"] for o in self.list(prefix)]
        for key in keys:
            self.delete(key)
        return len(keys)

    def ensure_bucket(self) -> bool:
        created = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        return created

    def bucket_exists(self) -> bool:
        return self.root.is_dir()

    def uri(self, key: str = "") -> str:
        return f"file://{self.root}/{key}"

    describe = uri
