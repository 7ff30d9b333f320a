"""HTTP plumbing shared by the webhook and SMS channels: one aiohttp client per channel.

:class:`HttpClient` owns an event loop in a background thread and one ``ClientSession`` on it (one
``TCPConnector``: keep-alive, at most `limit` connections). Blocking callers (``send``, ``lookup``,
the dispatcher's threads) hand it coroutines with :meth:`HttpClient.run`; a ``send_many`` runs all of
its requests as one coroutine, so a run of 2,000 alerts is 2,000 requests in flight over `limit`
connections, not 2,000 thread hops.

Errors are translated at this boundary (:meth:`HttpClient.request`): nothing can have reached the
server (no connection could be made, connect timeout, TLS handshake refused) → RetryableError; it may
have (read timeout, connection lost after the request was written) → OutcomeUnknown; the request
cannot be built → PermanentError. Messages name host:port, never the URL's path or query, which may
hold tokens. No automatic retries and no redirects: the ledger decides about retries.

Why two HTTP clients: aiohttp (here) is the webhook and SMS channels' async client, one coroutine per
run of thousands of requests; httpx (:mod:`aldebaran.delivery.channels.push`) is there for HTTP/2, which
APNs requires and aiohttp does not speak. The same-run benchmark that keeps aiohttp here is
``aldebaran bench http-clients`` (docs/benchmarks.md, "One HTTP client or two": this webhook channel on
httpx's AsyncClient delivers fewer alerts a second for more CPU per delivery). Dropping httpx needs an
aiohttp HTTP/2 path to APNs.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
import weakref
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from aldebaran.delivery.exceptions import OutcomeUnknown, PermanentError, RetryableError
from aldebaran.delivery.channels.text import one_line

USER_AGENT = "aldebaran-dispatch/0.1"
T = TypeVar("T")


def target(url: str) -> str:
    """host:port of a URL, for messages and receipts: never its path or query (which may hold tokens)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def elapsed_ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 1)


@dataclass(frozen=True, slots=True)
class Response:
    """An HTTP answer, read in full (alert endpoints answer with a few hundred bytes)."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON; ValueError if it is not."""
        return json.loads(self.body)

    def text(self, limit: int = 200) -> str:
        """The body as one bounded line of text, for error messages."""
        return one_line(self.body.decode(errors="replace"), limit) if self.body else ""


class HttpClient:
    """One aiohttp session on a private event loop thread; created on first use, released by close().

    `verify`: True (system CAs), False, or the path of a CA bundle."""

    def __init__(self, name: str, limit: int, verify: bool | str = True) -> None:
        self.name = name
        self.limit = limit
        self.verify = verify
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session = None

    # --- the loop -------------------------------------------------------------------------------
    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=f"http-{self.name}", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                # A channel dropped without close() must not leave its loop thread behind.
                self._finalizer = weakref.finalize(self, loop.call_soon_threadsafe, loop.stop)
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the client's loop and wait for its result (from any thread but the loop's)."""
        return asyncio.run_coroutine_threadsafe(coro, self._running_loop()).result()

    async def session(self):
        """The session (on the loop: called from coroutines only)."""
        if self._session is None:
            import aiohttp

            if self.verify is False:
                tls: ssl.SSLContext | bool = False
            else:
                tls = ssl.create_default_context(cafile=self.verify if isinstance(self.verify, str) else None)
            connector = aiohttp.TCPConnector(limit=self.limit, limit_per_host=self.limit, ssl=tls)
            # trust_env: HTTP(S)_PROXY / NO_PROXY apply, as they did with requests.
            self._session = aiohttp.ClientSession(connector=connector, headers={"User-Agent": USER_AGENT},
                                                  trust_env=True)
        return self._session

    def close(self) -> None:
        """Close the session and stop the loop's thread. Idempotent; a later call starts afresh."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        self._finalizer.detach()

        async def shutdown() -> None:
            session, self._session = self._session, None
            if session is not None:
                await session.close()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    # --- one request ------------------------------------------------------------------------------
    async def request(self, where: str, method: str, url: str, *, timeout: float, **kwargs: Any) -> Response:
        """One request, read in full; aiohttp's errors translated (see the module docstring).
        `timeout` bounds the connect and each read, like requests' timeout did."""
        import aiohttp

        host = target(url)
        # No total: the time a request waits for a free pooled connection is not a failure.
        limits = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=timeout, sock_read=timeout)
        session = await self.session()
        try:
            async with session.request(method, url, timeout=limits, allow_redirects=False, **kwargs) as resp:
                return Response(resp.status, resp.headers, await resp.read())
        except aiohttp.InvalidURL:
            raise PermanentError(f"{where} ({host}): request not possible (invalid URL)") from None
        except aiohttp.ConnectionTimeoutError:  # no connection: nothing was sent
            raise RetryableError(f"{where} ({host}): timed out connecting (ConnectionTimeoutError)") from None
        except aiohttp.ClientConnectorError as exc:  # refused, DNS, TLS handshake: nothing was sent
            raise RetryableError(f"{where} ({host}): connection failed ({type(exc).__name__})") from None
        except (aiohttp.ServerTimeoutError, asyncio.TimeoutError) as exc:
            raise OutcomeUnknown(f"{where} ({host}): timed out ({type(exc).__name__})") from None
        except aiohttp.ClientConnectionError as exc:  # lost once connected: the request may be in
            raise OutcomeUnknown(f"{where} ({host}): connection failed ({type(exc).__name__})") from None
        except aiohttp.ClientError as exc:  # e.g. a malformed response: the request was sent
            raise OutcomeUnknown(f"{where} ({host}): response failed ({type(exc).__name__})") from None
