"""What the provider channels share (Alertmanager, PagerDuty, Opsgenie, FCM, APNs): a JSON POST over the
channel's :class:`~.http.HttpClient`, and one reading of an HTTP answer's status.

A status is translated once, here: 2xx delivered; 408, 429 and 5xx a retry (the provider's
``Retry-After``, when it sends one, is named in the error, so an operator reading the record sees how long
the provider asked for); any other 4xx permanent (a bad key, a refused payload: sending again cannot help).
Errors name the channel and host:port, never the URL's path (it may hold a key) or a secret.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

from pydantic import SecretStr

from aldebaran.delivery.channels.base import Channel, Outcome
from aldebaran.delivery.channels.connection import scrub
from aldebaran.delivery.channels.http import HttpClient, Response, elapsed_ms, target
from aldebaran.delivery.channels.text import email_text, one_line
from aldebaran.delivery.exceptions import PermanentError, RetryableError
from aldebaran.model import Alert

RETRY_STATUSES = (408, 429)


def description(alert: Alert, channel: str) -> str:
    """The alert's report for an incident's description: the e-mail's text without its e-mail footer."""
    report = email_text(alert, channel).split("\n--\n", 1)[0].rstrip()
    return (f"{report}\n\nAlert id {alert.alert_id}. Delivery record: "
            f"aldebaran deliveries show --channel {channel} --alert-id {alert.alert_id}\n")


def is_retryable(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


def retry_after(headers: Any) -> str | None:
    """The answer's ``Retry-After`` (seconds or an HTTP date), as sent; None without one."""
    value = headers.get("Retry-After") if headers is not None else None
    return one_line(value, 40) if value else None


def status_error(where: str, status: int, body: bytes, headers: Any, secrets: list[str]) -> Exception:
    """The channel error an HTTP status stands for (module docstring); the body, scrubbed and bounded,
    is the detail."""
    text = one_line(scrub(body.decode(errors="replace"), secrets), 200) if body else ""
    detail = f"{where}: HTTP {status} {text}".rstrip()
    if is_retryable(status):
        wait = retry_after(headers)
        return RetryableError(detail + (f" (Retry-After: {wait})" if wait else ""))
    return PermanentError(detail)


async def post_json(http: HttpClient, where: str, url: str, payload: Any, *, timeout: float,
                    headers: dict[str, str] | None = None, **kwargs: Any) -> tuple[Response, float]:
    """POST `payload` as compact JSON; (the answer, its elapsed ms). Transport errors are translated by
    :meth:`HttpClient.request` (nothing sent → RetryableError, maybe sent → OutcomeUnknown)."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    t0 = time.monotonic()
    resp = await http.request(where, "POST", url, timeout=timeout, data=body,
                              headers={"Content-Type": "application/json", **(headers or {})}, **kwargs)
    return resp, elapsed_ms(t0)


def answer_json(resp: Response) -> dict:
    """The answer's JSON object, or {} when it has none (a 2xx needs no body to count)."""
    try:
        payload = resp.json()
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


class EventApiChannel(Channel):
    """A provider API that takes one alert per JSON POST and deduplicates by a key of ours (PagerDuty,
    Opsgenie): a run is sent as concurrent requests over one keep-alive pool. A subclass says what one
    request is (:meth:`request`) and what its 2xx answer keeps (:meth:`receipt`)."""

    can_dedupe = True

    def __init__(self, name: str, url: str, key: str | SecretStr, *, timeout: float = 10.0,
                 verify: bool | str = True, concurrency: int = 16, max_run: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency, max_run=max_run)
        self.url = url
        self.target = target(url)
        self._key = key if isinstance(key, SecretStr) else SecretStr(key)
        self.timeout = timeout
        self._http = HttpClient(f"{self.kind}-{name}", limit=concurrency, verify=verify)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, target={self.target!r})"

    def request(self, alert: Alert) -> tuple[dict, dict[str, str]]:
        """(JSON payload, headers) of the request that sends `alert`."""
        raise NotImplementedError

    def receipt(self, answer: dict) -> dict:
        """What the delivery record keeps of a 2xx answer (no secrets)."""
        return {}

    def resolve_request(self, alert: Alert) -> tuple[str, dict, dict[str, str]]:
        """(URL, JSON payload, headers) of the request that resolves the provider's alert keyed by `alert`'s
        id (the platform's on-call page, aldebaran.platform.oncall); a kind without one does not override it."""
        raise NotImplementedError(f"{self.kind} channel {self.name} cannot resolve")

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        return self._http.run(self._post(alert)).result()

    def resolve(self, alert: Alert) -> dict:
        """Resolve (close) the provider's open alert keyed by `alert`'s id; the receipt, or the channel error."""
        url, body, headers = self.resolve_request(alert)
        return self._http.run(self._post(alert, (url, body, headers))).result()

    def send_many(self, alerts: Sequence[Alert]) -> list[Outcome]:
        batch = list(alerts)
        return self._http.run(self._post_all(batch)) if batch else []

    async def _post_all(self, alerts: list[Alert]) -> list[Outcome]:
        return list(await asyncio.gather(*(self._post(a) for a in alerts)))

    async def _post(self, alert: Alert, request: tuple[str, dict, dict[str, str]] | None = None) -> Outcome:
        where = f"{self.kind} {self.name} ({self.target})"
        url, body, headers = request or (self.url, *self.request(alert))
        try:
            resp, elapsed = await post_json(self._http, where, url, body, timeout=self.timeout, headers=headers)
        except (RetryableError, PermanentError) as exc:
            return Outcome.failed(alert.alert_id, exc)
        if 200 <= resp.status < 300:
            return Outcome.delivered(alert.alert_id, {"status": resp.status, "elapsed_ms": elapsed,
                                                      **self.receipt(answer_json(resp))})
        return Outcome.failed(alert.alert_id, status_error(where, resp.status, resp.body, resp.headers,
                                                           [self._key.get_secret_value()]))

    def close(self) -> None:
        self._http.close()
        super().close()


__all__ = ["EventApiChannel", "RETRY_STATUSES", "answer_json", "description", "is_retryable", "post_json", "retry_after",
           "status_error"]
