"""Failure injection at the HTTP layer of a real S3Store (MinIO): a PUT that lands and whose reply is lost.

The request goes out through botocore's own HTTP session and MinIO applies it; then the connection "drops"
(ConnectionClosedError) before botocore sees the answer. botocore retries the same request (same headers,
so the same writer token in its metadata) and meets its own write: a conditional PUT gets 412. What the
caller makes of that 412 is what a test checks. Nothing below the session is faked: the store, the
conditions and the read-back are MinIO's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

from botocore.exceptions import ConnectionClosedError


def key_is(key: str) -> Callable:
    """A request matcher: a request on exactly this object key (path-style or virtual-host URLs)."""
    return lambda request: unquote(urlsplit(request.url).path).endswith("/" + key)


class LostReplyFaultInjection:
    """While installed (a context manager), the next `times` PUTs that `match` are sent, land, and lose their
    reply. `lost`: the status each dropped reply had (200: the write landed); `retried`: the status of the
    PUT that came next on the same URL (botocore's retry: 412 for a conditional write that had landed)."""

    def __init__(self, store, match: Callable | None = None, times: int = 1) -> None:
        self.session = store.client._endpoint.http_session
        self.match = match or (lambda request: True)
        self.times = times
        self.lost: list[int] = []
        self.retried: list[int] = []
        self._dropped_urls: set[str] = set()
        self._lock = threading.Lock()
        self._real = None

    def arm(self, times: int = 1) -> None:
        """Drop the next `times` matching replies again, with fresh `lost` / `retried` lists."""
        with self._lock:
            self.times, self.lost, self.retried = times, [], []
            self._dropped_urls.clear()

    def _send(self, request):
        response = self._real(request)
        if request.method != "PUT" or not self.match(request):
            return response
        with self._lock:
            if request.url in self._dropped_urls:  # botocore's retry of a request whose reply we dropped
                self._dropped_urls.discard(request.url)
                self.retried.append(response.status_code)
                return response
            if len(self.lost) >= self.times:
                return response
            self.lost.append(response.status_code)
            self._dropped_urls.add(request.url)
        raise ConnectionClosedError(endpoint_url=request.url)

    def __enter__(self) -> "LostReplyFaultInjection":
        self._real = self.session.send
        self.session.send = self._send
        return self

    def __exit__(self, *exc) -> None:
        del self.session.send  # the instance attribute: the class's method again
