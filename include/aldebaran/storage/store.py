"""The platform's one storage layer: every durable write (delivery ledger, book state, leases,
heartbeats, the alert archive, supervisor state) goes through a :class:`Store`.

Two backends honour one contract (tests/integration/test_ledger_contract.py runs it against both):

- :class:`S3Store`: S3 or MinIO over boto3. Only calls AWS S3 itself supports are used (PutObject with
  If-None-Match / If-Match, GetObject, ListObjectsV2 with StartAfter, DeleteObject), so the same code
  runs against MinIO here and S3 in AWS. botocore errors are translated at this boundary:
  412 → AlreadyExists / PreconditionFailed, 404 → NotFound, anything else → ObjectStoreError (a refused
  credential names where the credentials came from). How it reaches the store (the Airflow connection
  ``aldebaran_s3``, else ALDEBARAN_S3_*; keys, token, role or the AWS chain) is aldebaran.storage.s3access.
- :class:`LocalStore` (aldebaran.storage.local, imported from here): a directory, for tests and demos on
  one machine: O_EXCL create, and compare-and-swap by content hash under an exclusive flock.

The contract: ``create`` stores only if absent (AlreadyExists otherwise); ``replace`` only if the
current ETag is the one given (PreconditionFailed otherwise); ``get`` → StoredObject (NotFound);
``list(prefix, start_after)`` yields {Key, ETag, Size} in key order; ``put``/``delete`` are
unconditional.

Writer tokens: a conditional write whose reply was lost (it landed, botocore's retry met it: 412) is
no lost race, or a dispatcher would think itself fenced and an auditor its lease lost. Each one carries
a writer token (S3: metadata ``x-amz-meta-aldebaran-writer``; the directory: a hidden ``.<name>.writer``
set under the object's lock); when one that may have landed (retried by botocore, or repeated by the
caller with its first token) fails its condition, the object is read back: ours if it has our token.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Iterator, Protocol

from aldebaran.exceptions import AlreadyExists, NotFound, ObjectStoreError, PreconditionFailed
from aldebaran.storage.s3access import S3Access, resolve, session
from aldebaran.settings import ObjectStoreSettings, load
from aldebaran.storage.local import LocalStore, StoredObject

__all__ = ["LocalStore", "S3Store", "Store", "StoredObject", "open_prefix", "open_store", "read_json", "safe_segment",
           "writer_token", "WRITER"]

# S3 error codes of a refused credential: the message says where the credentials came from.
_CREDENTIAL_ERRORS = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                      "InvalidClientTokenId", "AuthorizationHeaderMalformed"}

# Keys are built from ids that may come from outside; nothing may climb out of its prefix.
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,254}$")


def safe_segment(value: str, what: str = "key segment") -> str:
    """Validate one path segment derived from an id (no '/', '..', control characters, ...)."""
    if not isinstance(value, str) or not _SAFE_SEGMENT.match(value) or ".." in value:
        raise ValueError(f"unsafe {what} for an object key: {value!r}")
    return value


WRITER = "aldebaran-writer"  # the metadata key of a conditional write's writer token


def writer_token() -> str:
    """A fresh writer token: give the same one to every repetition of one write (see the module's doc)."""
    return uuid.uuid4().hex


def read_json(store: "Store", key: str) -> Any | None:
    """The JSON document at `key` in `store`; None when there is none."""
    try:
        return json.loads(store.get(key).body)
    except NotFound:
        return None


class S3Store:
    """One bucket of S3/MinIO. Cheap to create: the connection is resolved and the boto3 client built on
    first use. `access` overrides the resolved one (aldebaran.storage.s3access.resolve)."""

    def __init__(self, settings: ObjectStoreSettings | None = None, access: S3Access | None = None) -> None:
        self.settings = settings or load(ObjectStoreSettings)
        self.bucket = self.settings.bucket
        self._access = access
        self._client = None

    @property
    def access(self) -> S3Access:
        if self._access is None:
            self._access = resolve(self.settings)
        return self._access

    @property
    def client(self):
        if self._client is None:
            from botocore.config import Config

            a = self.access
            self._client = session(a).client(
                "s3",
                endpoint_url=a.endpoint_url,
                region_name=a.region,
                verify=a.verify,
                config=Config(
                    signature_version="s3v4",
                    s3={"addressing_style": "path" if a.endpoint_url else "auto"},
                    retries={"max_attempts": 3, "mode": "standard"},
                    connect_timeout=3,
                    read_timeout=10,
                    max_pool_connections=32,
                ),
            )
        return self._client

    # --- errors ---------------------------------------------------------------------------
    def _translate(self, exc: Exception, key: str, conditional: str | None = None) -> Exception:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 409 and conditional:
                if conditional == "create":
                    return AlreadyExists(f"s3://{self.bucket}/{key} already exists")
                return PreconditionFailed(f"s3://{self.bucket}/{key} changed since it was read")
            if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
                return NotFound(f"s3://{self.bucket}/{key} not found")
            if code in _CREDENTIAL_ERRORS or status in (401, 403):
                return ObjectStoreError(f"s3://{self.bucket}/{key}: {code or status}: credentials refused; they "
                                        f"came from {self.access.describe()}: {exc}")
            return ObjectStoreError(f"s3://{self.bucket}/{key}: {code or status}: {exc}")
        if isinstance(exc, NoCredentialsError):
            return ObjectStoreError(f"s3://{self.bucket}/{key}: no credentials: {self.access.describe()} has no "
                                    "keys, and the AWS default credential chain found none")
        if isinstance(exc, BotoCoreError):
            return ObjectStoreError(
                f"object store {self.access.endpoint_url or 'AWS S3'} unreachable for s3://{self.bucket}/{key} "
                f"(through {self.access.source}): {exc}"
            )
        return exc

    # --- buckets ---------------------------------------------------------------------------
    def ensure_bucket(self) -> bool:
        """Create the bucket if missing; True if created."""
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
            return False
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404:
                raise self._translate(exc, "") from exc
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if self.access.region != "us-east-1" and not self.access.endpoint_url:
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.access.region}
        try:
            self.client.create_bucket(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._translate(exc, "") from exc
            return False
        return True

    def bucket_exists(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
            return True
        except ClientError:
            return False

    # --- objects ---------------------------------------------------------------------------
    def put(self, key: str, body: bytes, content_type: str = "application/json") -> str:
        try:
            resp = self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)
        except Exception as exc:  # noqa: BLE001 - translated, not swallowed
            raise self._translate(exc, key) from exc
        return resp["ETag"]

    def create(self, key: str, body: bytes, content_type: str = "application/json", token: str | None = None) -> str:
        """Create `key` only if absent (If-None-Match: *). Returns the ETag; AlreadyExists if present
        (unless the object there is this write's own: `token`, or botocore's retry of it)."""
        return self._conditional(key, body, content_type, "create", token, IfNoneMatch="*")

    def replace(self, key: str, body: bytes, etag: str, content_type: str = "application/json",
                token: str | None = None) -> str:
        """Overwrite `key` only if its ETag is still `etag` (If-Match). PreconditionFailed otherwise
        (unless the object there is this write's own: `token`, or botocore's retry of it)."""
        return self._conditional(key, body, content_type, "update", token, IfMatch=etag)

    def _conditional(self, key: str, body: bytes, content_type: str, kind: str, token: str | None,
                     **condition) -> str:
        mine = token or writer_token()
        try:
            resp = self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type,
                                          Metadata={WRITER: mine}, **condition)
        except Exception as exc:  # noqa: BLE001 - translated, not swallowed
            error = self._translate(exc, key, conditional=kind)
            # A fresh token sent once cannot be on the object: only a repeated request may have landed.
            repeated = token is not None or exc_attempts(exc) > 0
            if isinstance(error, (AlreadyExists, PreconditionFailed)) and repeated:
                landed = self._written_by(key, mine)
                if landed is not None:
                    return landed
            raise error from exc
        return resp["ETag"]

    def _written_by(self, key: str, token: str) -> str | None:
        """The ETag of `key` if its current version carries `token`; None if not (or it is gone). A store
        that cannot be asked raises ObjectStoreError: the write's fate is unknown, not a lost race."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:  # noqa: BLE001 - translated, not swallowed
            error = self._translate(exc, key)
            if isinstance(error, NotFound):
                return None
            raise error from exc
        return head["ETag"] if head.get("Metadata", {}).get(WRITER) == token else None

    def get(self, key: str) -> StoredObject:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key)
            return StoredObject(key, resp["Body"].read(), resp["ETag"])
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, key) from exc

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, key) from exc

    def list(self, prefix: str, start_after: str | None = None, page_size: int | None = None) -> Iterator[dict]:
        """Yield {Key, ETag, Size, LastModified} under `prefix`, in key order (after `start_after`).
        `page_size`: keys per request, for a reader that wants the first few only (a full page of 1000
        keys costs a parse of its XML that dwarfs the request)."""
        paginator = self.client.get_paginator("list_objects_v2")
        kwargs: dict = {"StartAfter": start_after} if start_after else {}
        if page_size:
            kwargs["PaginationConfig"] = {"PageSize": page_size}
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, **kwargs):
                yield from page.get("Contents", [])
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, prefix) from exc

    def delete_prefix(self, prefix: str) -> int:
        keys = [o["Key"] for o in self.list(prefix)]
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
            )
        return len(keys)

    def uri(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"

    describe = uri


def exc_attempts(exc: Exception) -> int:
    """How many times botocore retried the request that ended in `exc` (0: it was sent once)."""
    response = getattr(exc, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("RetryAttempts") or 0)


class Store(Protocol):
    """What every backend offers (S3Store, LocalStore)."""

    bucket: str

    def create(self, key: str, body: bytes, content_type: str = ..., token: str | None = None) -> str: ...
    def replace(self, key: str, body: bytes, etag: str, content_type: str = ..., token: str | None = None) -> str: ...
    def get(self, key: str) -> StoredObject: ...
    def list(self, prefix: str, start_after: str | None = None, page_size: int | None = None) -> Iterator[dict]: ...
    def put(self, key: str, body: bytes, content_type: str = ...) -> str: ...
    def delete(self, key: str) -> None: ...
    def delete_prefix(self, prefix: str) -> int: ...
    def uri(self, key: str = "") -> str: ...


def open_store(location: str | None = None) -> "S3Store | LocalStore":
    """The store at `location`: ``file:///dir`` or a plain path → LocalStore; None or ``s3://…``
    (``s3a://…``, Spark's spelling) → that (or the configured) bucket of the object store
    aldebaran.storage.s3access resolves. A key path after the bucket is ignored; :func:`open_prefix` keeps it."""
    return open_prefix(location)[0]


def open_prefix(location: str | None = None) -> "tuple[S3Store | LocalStore, str]":
    """The store holding `location` and the key prefix `location` names inside it ("" or ending in "/"):
    ``s3://bucket/a/b`` → (bucket's S3Store, "a/b/"); a directory → (LocalStore of it, "")."""
    if location and location.startswith(("s3://", "s3a://")):
        bucket, _, prefix = location.split("://", 1)[1].partition("/")
        prefix = prefix.strip("/")
        return S3Store(load(ObjectStoreSettings, bucket=bucket)), prefix + "/" if prefix else ""
    if location:
        return LocalStore(location.removeprefix("file://")), ""
    return S3Store(), ""
