"""S3 / MinIO access with the conditional writes the platform's idempotency rests on.

Only calls that AWS S3 itself supports are used (PutObject with If-None-Match / If-Match, GetObject,
ListObjectsV2, DeleteObject), so the same code runs against MinIO here and S3 in AWS. botocore errors
are translated at this boundary: 412 → AlreadyExists / PreconditionFailed, 404 → NotFound.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator

from aldebaran.exceptions import AlreadyExists, NotFound, ObjectStoreError, PreconditionFailed
from aldebaran.settings import ObjectStoreSettings, load

# Keys are built from ids that may come from outside; nothing may climb out of its prefix.
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,254}$")


def safe_segment(value: str, what: str = "key segment") -> str:
    """Validate one path segment derived from an id (no '/', '..', control characters, ...)."""
    if not isinstance(value, str) or not _SAFE_SEGMENT.match(value) or ".." in value:
        raise ValueError(f"unsafe {what} for an object key: {value!r}")
    return value


@dataclass(frozen=True)
class StoredObject:
    key: str
    body: bytes
    etag: str

    def json(self) -> Any:
        return json.loads(self.body)


class ObjectStore:
    """One bucket of S3/MinIO. Cheap to create; the boto3 client is built lazily."""

    def __init__(self, settings: ObjectStoreSettings | None = None) -> None:
        self.settings = settings or load(ObjectStoreSettings)
        self.bucket = self.settings.bucket
        self._client = None

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            s = self.settings
            self._client = boto3.client(
                "s3",
                endpoint_url=s.endpoint(),
                region_name=s.region,
                aws_access_key_id=s.access_key.get_secret_value() if s.access_key else None,
                aws_secret_access_key=s.secret_key.get_secret_value() if s.secret_key else None,
                config=Config(
                    signature_version="s3v4",
                    s3={"addressing_style": "path" if s.endpoint() else "auto"},
                    retries={"max_attempts": 3, "mode": "standard"},
                    connect_timeout=3,
                    read_timeout=10,
                    max_pool_connections=32,
                ),
            )
        return self._client

    # --- errors ---------------------------------------------------------------------------
    def _translate(self, exc: Exception, key: str, conditional: str | None = None) -> Exception:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 409 and conditional:
                if conditional == "create":
                    return AlreadyExists(f"s3://{self.bucket}/{key} already exists")
                return PreconditionFailed(f"s3://{self.bucket}/{key} changed since it was read")
            if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
                return NotFound(f"s3://{self.bucket}/{key} not found")
            return ObjectStoreError(f"s3://{self.bucket}/{key}: {code or status}: {exc}")
        if isinstance(exc, BotoCoreError):
            return ObjectStoreError(
                f"object store {self.settings.endpoint() or 'AWS S3'} unreachable for s3://{self.bucket}/{key}: {exc}"
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
        if self.settings.region != "us-east-1" and not self.settings.endpoint():
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.settings.region}
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

    def create(self, key: str, body: bytes, content_type: str = "application/json") -> str:
        """Create `key` only if absent (If-None-Match: *). Returns the ETag; AlreadyExists if present."""
        try:
            resp = self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, IfNoneMatch="*"
            )
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, key, conditional="create") from exc
        return resp["ETag"]

    def replace(self, key: str, body: bytes, etag: str, content_type: str = "application/json") -> str:
        """Overwrite `key` only if its ETag is still `etag` (If-Match). PreconditionFailed otherwise."""
        try:
            resp = self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, IfMatch=etag
            )
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, key, conditional="update") from exc
        return resp["ETag"]

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

    def list(self, prefix: str) -> Iterator[dict]:
        """Yield {Key, ETag, Size, LastModified} under `prefix`, in key order."""
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
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
