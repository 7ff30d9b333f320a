"""A small S3 client for the delivery ledger's hot path: PUT (plain, If-None-Match: *, If-Match),
GET and DELETE of small objects, SigV4-signed, over one keep-alive HTTP(S) connection per thread.

Why: every delivery costs two conditional PUTs, and boto3 spends milliseconds of Python per call
(request model, event hooks, retries), which capped the dispatcher far below its target. This client
speaks the same standard S3 REST API (works on AWS S3 and MinIO: nothing MinIO-specific), with
static credentials only; without them (AWS default credential chain) the ledger uses boto3.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.client
import threading
import time
import urllib.parse

from aldebaran.exceptions import AlreadyExists, NotFound, ObjectStoreError, PreconditionFailed

IDLE_RECONNECT_SECONDS = 4.0
_SAFE = "-_.~/"


class S3Lite:
    def __init__(self, endpoint: str | None, bucket: str, region: str, access_key: str, secret_key: str,
                 timeout: float = 10.0) -> None:
        if endpoint:
            url = urllib.parse.urlparse(endpoint)
            self.scheme, self.host = url.scheme, url.netloc
            self.base_path = f"/{bucket}"  # path-style, as boto3 does with a custom endpoint
        else:
            self.scheme, self.host = "https", f"{bucket}.s3.{region}.amazonaws.com"
            self.base_path = ""
        self.bucket, self.region = bucket, region
        self._access, self._secret = access_key, secret_key
        self.timeout = timeout
        self._local = threading.local()
        self._keys: dict[str, bytes] = {}

    # --- signing --------------------------------------------------------------------------------
    def _signing_key(self, day: str) -> bytes:
        key = self._keys.get(day)
        if key is None:
            k = hmac.new(("AWS4" + self._secret).encode(), day.encode(), hashlib.sha256).digest()
            for part in (self.region, "s3", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            self._keys = {day: k}
            key = k
        return key

    def _headers(self, method: str, path: str, body: bytes, extra: dict[str, str]) -> dict[str, str]:
        now = dt.datetime.now(dt.UTC)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload_hash = hashlib.sha256(body).hexdigest()
        headers = {"host": self.host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
        headers.update({k.lower(): v for k, v in extra.items()})
        signed = sorted(headers)
        canonical = "\n".join([
            method, path, "",
            "".join(f"{h}:{headers[h].strip()}\n" for h in signed),
            ";".join(signed), payload_hash,
        ])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self._access}/{scope}, "
                                    f"SignedHeaders={';'.join(signed)}, Signature={signature}")
        return headers

    # --- transport ---------------------------------------------------------------------------------
    def _conn(self, fresh: bool = False) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        # A keep-alive connection idle for a while may have been closed by the server; a new one costs
        # less than a failed request (and a PUT must not be repeated once the server may have read it).
        if conn is not None and time.monotonic() - getattr(self._local, "used", 0.0) > IDLE_RECONNECT_SECONDS:
            fresh = True
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            conn = cls(self.host, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _request(self, method: str, key: str, body: bytes = b"", extra: dict[str, str] | None = None):
        path = self.base_path + "/" + urllib.parse.quote(key, safe=_SAFE)
        for attempt in (1, 2):  # one reconnect: a keep-alive connection the server closed meanwhile
            headers = self._headers(method, path, body, extra or {})
            conn = self._conn(fresh=attempt == 2)
            sent = False
            try:
                conn.request(method, path, body=body or None, headers=headers)
                sent = True
                resp = conn.getresponse()
                data = resp.read()
                self._local.used = time.monotonic()
                return resp.status, dict((k.lower(), v) for k, v in resp.getheaders()), data
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                # Failing while sending: the server has not got a whole request, so it applied nothing
                # and any method may be sent again. Failing after: a PUT may have been applied; the
                # caller's conditional logic (read back, compare) decides — never blindly repeat it.
                if attempt == 2 or (sent and method not in ("GET", "HEAD", "DELETE")):
                    raise ObjectStoreError(f"object store {self.host} unreachable for {key}: {exc}") from exc
        raise AssertionError("unreachable")

    @staticmethod
    def _error(status: int, data: bytes, key: str) -> ObjectStoreError:
        code = ""
        if b"<Code>" in data:
            code = data.split(b"<Code>", 1)[1].split(b"</Code>", 1)[0].decode(errors="replace")
        return ObjectStoreError(f"{key}: HTTP {status} {code}")

    # --- operations ----------------------------------------------------------------------------------
    def put(self, key: str, body: bytes, if_none_match: bool = False, if_match: str | None = None,
            content_type: str = "application/json") -> str:
        extra = {"content-type": content_type}
        if if_none_match:
            extra["if-none-match"] = "*"
        if if_match:
            extra["if-match"] = if_match
        status, headers, data = self._request("PUT", key, body, extra)
        if status == 200:
            return headers.get("etag", "")
        if status == 412 or (status == 409 and (if_none_match or if_match)):
            if if_none_match:
                raise AlreadyExists(f"s3://{self.bucket}/{key} already exists")
            raise PreconditionFailed(f"s3://{self.bucket}/{key} changed since it was read")
        if status == 404 and if_match:
            raise NotFound(f"s3://{self.bucket}/{key} not found")
        raise self._error(status, data, key)

    def get(self, key: str) -> tuple[bytes, str]:
        status, headers, data = self._request("GET", key)
        if status == 200:
            return data, headers.get("etag", "")
        if status == 404:
            raise NotFound(f"s3://{self.bucket}/{key} not found")
        raise self._error(status, data, key)

    def delete(self, key: str) -> None:
        status, _, data = self._request("DELETE", key)
        if status not in (200, 204, 404):
            raise self._error(status, data, key)
