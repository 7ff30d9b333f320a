"""A Twilio-style SMS provider: sends messages, and answers "did you send reference X?"."""

from __future__ import annotations

import base64
import collections
import datetime as dt
import hmac
import secrets
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from aiohttp import web

from aldebaran_capacity.receivers.base import LOCALHOST, HttpReceiver, json_response


@dataclass(slots=True)
class SmsMessage:
    sid: str
    to: str
    sender: str
    body: str
    account_sid: str
    received_at: float
    reference: str | None = None
    status: str = "queued"
    date_created: str = field(default="")

    def as_json(self) -> dict:
        return {"sid": self.sid, "status": self.status, "to": self.to, "from": self.sender, "body": self.body,
                "reference": self.reference, "date_created": self.date_created}


def _rfc2822(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")


class SmsProvider(HttpReceiver):
    """A Twilio-style Messages API at :attr:`path` (``/2010-04-01/Accounts/{sid}/Messages.json``), basic
    auth (account SID, auth token) on every call (401 otherwise, counted in `unauthorized`):

    - ``POST`` form fields To, From, Body and optionally Reference → 201 ``{"sid": "SM…", "status":
      "queued", …}``. Like the real thing it cannot deduplicate: every accepted POST is a message.
      `sends` counts them per (To, Body) — one alert's text — and `sends_by_reference` per Reference
      (the channel sends the alert id), so a test can assert that no alert was ever sent twice.
    - ``GET ?Reference=<ref>`` → 200 ``{"messages": [{"sid", "status", "to", "from", "body", "reference",
      "date_created"}, …]}`` (empty if none): the message log a sender asks after an unknown outcome.

    Injected failures and delays apply to both. `received_at` / `repeats` are keyed by Reference (by
    the text when a message has none)."""

    def __init__(self, account_sid: str | None = None, auth_token: str | None = None, host: str = LOCALHOST,
                 port: int = 0) -> None:
        super().__init__(host, port)
        self.account_sid = account_sid or "AC" + secrets.token_hex(16)
        self.auth_token = auth_token or secrets.token_urlsafe(24)
        self._credentials = "Basic " + base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        self.messages: list[SmsMessage] = []
        self.sends: collections.Counter = collections.Counter()
        self.sends_by_reference: collections.Counter = collections.Counter()
        self._by_reference: dict[str, list[SmsMessage]] = collections.defaultdict(list)
        self.unauthorized = 0

    @property
    def path(self) -> str:
        return f"/2010-04-01/Accounts/{self.account_sid}/Messages.json"

    def by_reference(self, reference: str) -> list[SmsMessage]:
        with self.lock:
            return list(self._by_reference.get(reference, ()))

    def handle(self, request: web.BaseRequest, body: bytes, now: float) -> web.StreamResponse:
        if not hmac.compare_digest(request.headers.get("Authorization", "").encode(), self._credentials.encode()):
            with self.lock:
                self.unauthorized += 1
            return json_response(401, {"code": 20003, "message": "Authentication Error - invalid username",
                                       "status": 401}, {"WWW-Authenticate": 'Basic realm="Twilio API"'})
        if request.path != self.path:
            return json_response(404, {"code": 20404, "message": "The requested resource was not found",
                                       "status": 404})
        status = self._next_failure()
        if status is not None:
            return json_response(status, {"code": 20500 if status >= 500 else 20429, "message": "injected failure",
                                          "status": status})
        if request.method == "GET":
            return self._lookup(request)
        if request.method != "POST":
            return json_response(405, {"code": 20004, "message": "Method not allowed", "status": 405})
        return self._send(body, now)

    def _send(self, body: bytes, now: float) -> web.StreamResponse:
        form = dict(parse_qsl(body.decode(errors="replace"), keep_blank_values=True))
        for required, code in (("To", 21604), ("From", 21603), ("Body", 21602)):
            if not form.get(required):
                return json_response(400, {"code": code, "message": f"A '{required}' is required.", "status": 400})
        reference = form.get("Reference") or None
        message = SmsMessage("SM" + self._new_request_id().rjust(32, "0"), form["To"], form["From"], form["Body"],
                             self.account_sid, now, reference, date_created=_rfc2822(now))
        with self.lock:
            self.messages.append(message)
            self.sends[(message.to, message.body)] += 1
            if reference is not None:
                self.sends_by_reference[reference] += 1
                self._by_reference[reference].append(message)
            self._record_receipt(reference or message.body, now)
        return json_response(201, dict(message.as_json(), account_sid=self.account_sid))

    def _lookup(self, request: web.BaseRequest) -> web.StreamResponse:
        reference = request.query.get("Reference")
        if not reference:
            return json_response(400, {"code": 21650, "message": "A 'Reference' is required.", "status": 400})
        return json_response(200, {"messages": [m.as_json() for m in self.by_reference(reference)]})
