"""SMS channel: a Twilio-style Messages API, one recipient per channel.

``POST {base}/2010-04-01/Accounts/{sid}/Messages.json`` with basic auth (account SID, auth token) and
the form fields To, From, Body (:func:`~.text.sms_text`). 2xx → receipt with the provider's ``sid``;
429/5xx → retry; other 4xx → permanent.

The provider cannot deduplicate: a failure after the request may have been written is an unknown
outcome, which the ledger records IN_DOUBT instead of sending a second text, and a ledger run holds
one window of sends (``max_run`` = ``concurrency``), so a crash between send and record puts at most
that many into doubt; each alert also gets a sent marker in the ledger, so a repeat of its id is never
texted twice. With the connection extra ``lookup: true`` each message also carries
``Reference=<alert_id>``, and :meth:`SmsChannel.lookup` asks the provider
(``GET <messages url>?Reference=<alert_id>`` → ``{"messages": [...]}``) whether it has that message,
so the sweep settles an IN_DOUBT delivery without an operator, once
``ALDEBARAN_DELIVERY_LOOKUP_GRACE_SECONDS`` have passed (a provider's message log lags a little).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from typing import ClassVar
from urllib.parse import quote

from pydantic import SecretStr

from aldebaran.delivery.channels.base import DEFAULT_CONCURRENCY, Channel, Promise, register
from aldebaran.delivery.channels.connection import Connection, scrub
from aldebaran.delivery.channels.http import HttpClient, Response, elapsed_ms, target
from aldebaran.delivery.channels.text import one_line, sms_text
from aldebaran.delivery.exceptions import PermanentError, RetryableError
from aldebaran.model import Alert

log = logging.getLogger(__name__)

E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
RECEIPT_FIELDS = ("sid", "status", "reference", "to", "date_created")


@register("sms", conn_types=("twilio",))
class SmsChannel(Channel):
    """A Twilio-style SMS API (module docstring); cannot deduplicate."""

    can_dedupe: ClassVar[bool] = False
    in_doubt_policy: ClassVar[str] = ("IN_DOUBT: settled by the provider's lookup (extra lookup: true), "
                                      "else by an operator; never re-sent automatically")
    provider_rate: ClassVar[str | None] = "the provider's (Twilio: about 1 message/s per long-code number)"
    delivery_promise: ClassVar[Promise] = Promise.AT_MOST_ONCE_IN_DOUBT
    lookup_promise: ClassVar[Promise | None] = Promise.EXACTLY_ONCE  # doubt settled by the provider's lookup

    def __init__(self, name: str, base_url: str, account_sid: str, auth_token: str | SecretStr,
                 sender: str, recipient: str, timeout: float = 10.0, verify: bool | str = True, *,
                 lookup: bool = False, concurrency: int = DEFAULT_CONCURRENCY, max_run: int | None = None) -> None:
        super().__init__(name, concurrency=concurrency, max_run=max_run)
        self.base_url = base_url.rstrip("/")
        self.account_sid = account_sid
        self._token = auth_token if isinstance(auth_token, SecretStr) else SecretStr(auth_token)
        self.sender = sender
        self.recipient = recipient
        self.timeout = timeout
        self.verify = verify
        self.has_lookup = lookup
        self.url = f"{self.base_url}/2010-04-01/Accounts/{quote(account_sid, safe='')}/Messages.json"
        self.target = target(self.url)
        self._http = HttpClient(f"sms-{name}", limit=concurrency, verify=verify)

    @classmethod
    def from_connection(cls, name: str, conn: Connection) -> "SmsChannel":
        """host = the provider's base URL (default https://api.twilio.com), login = account SID,
        password = auth token, extra ``from`` and ``to`` (one E.164 number), ``timeout``, ``verify``,
        ``lookup`` (the provider answers ``GET ?Reference=``; default false)."""
        if not conn.host:
            conn = dataclasses.replace(conn, host="https://api.twilio.com")
        recipient = conn.extra_str("to", required="the recipient's phone number, E.164 like +15551234567")
        if not E164.match(recipient):
            raise conn.error("field extra.to", "must be one phone number in E.164 form (+ and 7-15 digits); "
                             "define one sms channel per recipient")
        return cls(
            name,
            base_url=conn.base_url(default_scheme="https"),
            account_sid=conn.require("login", "the account SID"),
            auth_token=conn.secret("the auth token"),
            sender=conn.extra_str("from", required="the sending number or sender id"),
            recipient=recipient,
            timeout=conn.extra_seconds("timeout", 10.0),
            verify=conn.extra_verify(),
            lookup=conn.extra_bool("lookup", False),
        )

    def __repr__(self) -> str:
        return (f"SmsChannel(name={self.name!r}, target={self.target!r}, account_sid={self.account_sid!r}, "
                f"lookup={self.has_lookup})")

    async def _call(self, method: str, **kwargs) -> Response:
        import aiohttp

        auth = aiohttp.BasicAuth(self.account_sid, self._token.get_secret_value())
        return await self._http.request(f"sms {self.name}", method, self.url, timeout=self.timeout, auth=auth, **kwargs)

    def send(self, alert: Alert, idempotency_key: str) -> dict:
        form = {"To": self.recipient, "From": self.sender, "Body": sms_text(alert)}
        if self.has_lookup:
            form["Reference"] = idempotency_key
        t0 = time.monotonic()
        resp = self._http.run(self._call("POST", data=form))
        if 200 <= resp.status < 300:
            try:
                payload = resp.json()
            except ValueError:
                payload = {}
            payload = payload if isinstance(payload, dict) else {}
            if not payload.get("sid"):  # accepted, but no handle on the message: do not send it again
                log.warning("sms %s (%s): HTTP %d without a message sid", self.name, self.target, resp.status)
            return {"sid": payload.get("sid"), "status": payload.get("status"), "http_status": resp.status,
                    "elapsed_ms": elapsed_ms(t0)}
        text = f"sms {self.name} ({self.target}): HTTP {resp.status} {self._problem(resp)}".rstrip()
        if resp.status == 429 or resp.status >= 500:
            raise RetryableError(text)
        raise PermanentError(text)

    def lookup(self, alert_id: str) -> dict | None:
        """The provider's first message with ``Reference=alert_id`` as a receipt (sid, status,
        reference, to, date_created), or None if it has none. RetryableError for any other answer."""
        if not self.has_lookup:
            return super().lookup(alert_id)
        resp = self._http.run(self._call("GET", params={"Reference": alert_id}))
        where = f"sms {self.name} ({self.target}): lookup of {alert_id}"
        if resp.status != 200:
            raise RetryableError(f"{where}: HTTP {resp.status} {self._problem(resp)}".rstrip())
        try:
            messages = resp.json().get("messages")
        except (ValueError, AttributeError):
            messages = None
        if not isinstance(messages, list) or not all(isinstance(m, dict) and m.get("sid") for m in messages):
            raise RetryableError(f"{where}: not a message list: {self._scrubbed(resp)}")
        if not messages:
            return None
        first = messages[0]
        return {**{k: first.get(k) for k in RECEIPT_FIELDS}, "http_status": resp.status, "found_by": "lookup"}

    def _problem(self, resp: Response) -> str:
        """A provider error's ``code: message``, else the answer's text (scrubbed, bounded)."""
        try:
            problem = resp.json()
            return f"code {problem.get('code')}: {one_line(scrub(str(problem.get('message', '')), self._secrets()), 200)}"
        except (ValueError, AttributeError):
            return self._scrubbed(resp)

    def _scrubbed(self, resp: Response) -> str:
        return one_line(scrub(resp.body.decode(errors="replace"), self._secrets()), 200) if resp.body else ""

    def _secrets(self) -> list[str]:
        return [self._token.get_secret_value()]

    def close(self) -> None:
        self._http.close()
        super().close()
