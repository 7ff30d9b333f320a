"""Airflow 3 plugin: the delivery ledger as a page in the Airflow UI (Browse → Deliveries).

Routes, mounted by the api-server under ``/aldebaran`` (``fastapi_apps``):

    GET /aldebaran/deliveries/                      per-channel stats, the records that need attention
                                                    (IN_DOUBT, DEAD, retrying: from the ledger's index)
                                                    and the latest records, each linking to its detail page
    GET /aldebaran/deliveries/<channel>/<alert_id>  one record: its state, history, alert and raw JSON
    GET /aldebaran/deliveries/explain?alert_id=<id>  one alert's story, as `aldebaran explain` prints it:
                                                    the alert, the trades that built its book (topic,
                                                    partition, offset, event id, shares), the trigger,
                                                    every channel's delivery state with its history
    GET /aldebaran/api/deliveries/stats             the per-channel stats as JSON

Query parameters: ``limit`` (records per list, 1-200, default 20) and ``ledger``, the ledger prefix
(default: the dispatcher's, ``deliveries``). ``ledger`` may only name another delivery ledger in the
same bucket: at most four safe key segments ending in ``deliveries`` (``tests/<id>/deliveries``), so
the page cannot be pointed at checkpoints, the archive or anything else in the bucket.

Authentication: Airflow does not authenticate plugin apps (a Starlette mount inherits none of the
core API's dependencies), so every route depends on Airflow's own ``get_user``: the JWT from an
``Authorization: Bearer`` header (``POST /auth/token``) or the UI's ``_token`` cookie, validated by the
configured auth manager, which must then allow GET on the custom view ``AldebaranDeliveries``
(``is_authorized_custom_view``; the simple auth manager allows every role from VIEWER up). Missing
credentials get 401, or a redirect to the login page for a browser; invalid ones or no permission, 403.

Nothing happens at import: every Airflow process imports plugins (each task run, for macros), so this
module imports only ``airflow.plugins_manager``. The FastAPI app is built on the api-server's first
request; Airflow's security module, FastAPI and the S3 ledger (boto3) are imported only then.
"""

# No `from __future__ import annotations`: FastAPI evaluates the route signatures, whose annotations
# refer to names imported inside create_app().
import functools
import html
import json
import logging
from datetime import datetime, timezone
from urllib.parse import quote, urlencode

from airflow.plugins_manager import AirflowPlugin

log = logging.getLogger(__name__)

URL_PREFIX = "/aldebaran"
RESOURCE = "AldebaranDeliveries"  # the custom view the auth manager authorizes
DEFAULT_LIMIT, MAX_LIMIT = 20, 200
LEDGER_LEAF = "deliveries"  # every delivery ledger prefix ends with this segment
MAX_LEDGER_DEPTH = 4
ATTENTION = (("in_doubt", "In doubt"), ("dead", "Dead"), ("retry", "Retrying / in flight"))
# Counts from the ledger's small index (what needs attention); delivered alerts live in group-commit runs
# and are not counted here (`aldebaran deliveries stats` adds each channel's Kafka backlog).
STAT_COLUMNS = (
    ("retrying", "retrying"), ("dead", "dead"), ("in_doubt", "in doubt"), ("lease_seconds", "lease"),
    ("max_attempts", "max attempts"),
)
# No script may run on these pages, whatever a record contains; they may only be framed by Airflow's UI.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'self'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}


# --- request inputs ------------------------------------------------------------------------------
def ledger_prefix(value: str | None, default: str) -> str:
    """The ledger prefix a request asks for, validated: `default`, or `<segment>/.../deliveries`."""
    from aldebaran.objectstore import safe_segment

    if value is None or value == default:
        return default
    parts = value.split("/")
    if len(parts) > MAX_LEDGER_DEPTH or parts[-1] != LEDGER_LEAF:
        raise ValueError(
            f"ledger prefix must be at most {MAX_LEDGER_DEPTH} segments ending in {LEDGER_LEAF!r}: {value!r}"
        )
    for part in parts:
        safe_segment(part, "ledger prefix segment")
    return value


@functools.cache
def _store():
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import load
    from aldebaran.storage import open_store

    return open_store(load(DeliverySettings).store)


def ledger_backend():
    """FastAPI dependency: the ledger's storage (ALDEBARAN_DELIVERY_STORE, default the S3/MinIO bucket of
    ALDEBARAN_S3_*). Tests override it."""
    return _store()


def open_ledger(backend, prefix: str | None):
    from aldebaran.delivery.dispatcher import default_ledger
    from aldebaran.delivery.ledger import Ledger

    base = default_ledger(backend)  # the dispatcher's prefix, lease and retry policy
    chosen = ledger_prefix(prefix, base.prefix)
    if chosen == base.prefix:
        return base
    return Ledger(backend, prefix=chosen, lease_seconds=base.lease_seconds, policy=base.policy)


# --- reading the ledger --------------------------------------------------------------------------
def latest_records(ledger, channel: str, limit: int) -> list:
    """The `limit` most recently written per-alert records of a channel, newest first (failures, SMS,
    pages: alerts delivered inside a run have no record of their own; find them by id). The listing's
    LastModified picks them, so only `limit` records are read."""
    from aldebaran.storage import safe_segment

    prefix = f"{ledger.prefix}/{safe_segment(channel, 'channel')}/alerts/"
    newest = sorted(ledger.store.list(prefix), key=lambda o: o["LastModified"], reverse=True)
    ids = [o["Key"][len(prefix):-len(".json")] for o in newest if o["Key"].endswith(".json")]
    records = [got[0] for alert_id in ids[:limit] if "/" not in alert_id and (got := ledger.get(channel, alert_id))]
    return sorted(records, key=lambda r: r.updated_at, reverse=True)[:limit]


def attention(ledger, channel: str, limit: int) -> list[tuple[str, str, int, list]]:
    """(kind, title, how many are indexed, up to `limit` of their records) per index of the channel.

    A marker can outlive its record's stay in that state (the ledger writes markers first and removes
    them last); such records are left out, so the count is an upper bound."""
    from aldebaran.delivery.records import DELIVERED

    sections = []
    for kind, title in ATTENTION:
        ids = ledger.indexed(kind, channel)
        records = [got[0] for alert_id in ids[:limit] if (got := ledger.get(channel, alert_id))]
        sections.append((kind, title, len(ids), [r for r in records if r.state != DELIVERED]))
    return sections


def overview(ledger, limit: int) -> list[dict]:
    return [
        {"stats": ledger.stats(channel), "attention": attention(ledger, channel, limit),
         "latest": latest_records(ledger, channel, limit)}
        for channel in ledger.channels()
    ]


def record_alert(record):
    """A record's alert as an :class:`aldebaran.model.Alert`; None if the record holds no valid one."""
    from aldebaran.model import Alert, AlertError

    try:
        return Alert.from_dict(record.alert)
    except AlertError:
        return None


# --- HTML (every value goes through esc()) ------------------------------------------------------
CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5rem;color:#1a202c}
h1{font-size:1.4rem;margin:0 0 .25rem}h2{font-size:1.15rem;margin:1.75rem 0 .5rem}
h3{font-size:1rem;margin:1rem 0 .35rem}.meta{color:#4a5568;margin:0 0 1rem}
table{border-collapse:collapse;margin:.25rem 0 .75rem}th,td{border:1px solid #cbd5e0;padding:.25rem .55rem;text-align:left;vertical-align:top}
th{background:#edf2f7}td.n{text-align:right;font-variant-numeric:tabular-nums}code,pre{font-family:ui-monospace,monospace}
pre{background:#f7fafc;border:1px solid #cbd5e0;padding:.75rem;overflow:auto}
.s{display:inline-block;padding:0 .4rem;border-radius:.25rem;font-size:.8rem;font-weight:600}
.s-delivered{background:#c6f6d5}.s-claimed{background:#bee3f8}.s-retry{background:#feebc8}
.s-dead{background:#fed7d7}.s-in_doubt{background:#fefcbf}.s-unknown{background:#e2e8f0}
.empty{color:#718096;font-style:italic}.err{color:#9b2c2c}
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def when(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def location(ledger, key: str) -> str:
    return ledger.store.uri(key)


def state_badge(state: str) -> str:
    from aldebaran.delivery.records import STATES

    css = state.lower() if state in STATES else "unknown"
    return f'<span class="s s-{css}">{esc(state)}</span>'


def query(prefix: str, default: str, limit: int) -> str:
    params = {}
    if prefix != default:
        params["ledger"] = prefix
    if limit != DEFAULT_LIMIT:
        params["limit"] = limit
    return f"?{urlencode(params)}" if params else ""


def page(title: str, body: str, user_name: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width,initial-scale=1'><title>{esc(title)}</title>"
        f"<style>{CSS}</style></head><body>{body}"
        f"<p class=meta>Signed in to Airflow as {esc(user_name)}.</p></body></html>"
    )


def stat_cell(key: str, value) -> str:
    if key == "lease_seconds":
        text = duration(value)
    else:
        text = "–" if value is None else value
    return f"<td class=n>{esc(text)}</td>"


def stats_table(rows: list[dict]) -> str:
    head = "".join(f"<th>{esc(label)}</th>" for _, label in STAT_COLUMNS)
    body = "".join(
        f'<tr><td><a href="#channel-{esc(s["channel"])}">{esc(s["channel"])}</a></td>'
        + "".join(stat_cell(key, s.get(key)) for key, _ in STAT_COLUMNS) + "</tr>"
        for s in rows
    )
    return f"<table id=stats><thead><tr><th>channel</th>{head}</tr></thead><tbody>{body}</tbody></table>"


def records_table(records: list, channel: str, qs: str, base: str = "") -> str:
    if not records:
        return "<p class=empty>none</p>"
    rows = []
    for r in records:
        alert = record_alert(r)
        kind, order_id = (alert.kind, alert.order_id) if alert else (None, None)
        href = f"{base}{quote(channel, safe='')}/{quote(r.alert_id, safe='')}{qs}"
        detail = r.error or (f"next attempt {when(r.next_at)}" if r.next_at else "")
        rows.append(
            f'<tr><td><a href="{esc(href)}"><code>{esc(r.alert_id)}</code></a></td><td>{state_badge(r.state)}</td>'
            f"<td class=n>{esc(r.attempt)}</td><td>{esc(kind)}</td><td>{esc(order_id)}</td>"
            f"<td>{esc(when(r.updated_at))}</td><td>{esc(detail)}</td></tr>"
        )
    return (
        "<table><thead><tr><th>alert id</th><th>state</th><th>attempt</th><th>kind</th><th>order id</th>"
        f"<th>updated</th><th>error / next attempt</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def render_overview(ledger, channels: list[dict], default_prefix: str, limit: int, user_name: str) -> str:
    qs = query(ledger.prefix, default_prefix, limit)
    parts = [
        "<h1>Alert deliveries</h1>",
        f"<p class=meta>Ledger <code>{esc(location(ledger, ledger.prefix + '/'))}</code> · "
        f"{esc(when(ledger.clock()))} · latest {esc(limit)} records per channel</p>",
        # Alerts delivered in a group-commit run have no record of their own: find any alert by its id.
        f'<form method=get action="find"><label>Find an alert: <input name=alert_id size=34 '
        f'pattern="[A-Za-z0-9][A-Za-z0-9._=-]*" required></label>'
        + (f'<input type=hidden name=ledger value="{esc(ledger.prefix)}">' if ledger.prefix != default_prefix else "")
        + " <button>show</button></form>",
    ]
    if not channels:
        parts.append("<p class=empty>No delivery records yet.</p>")
        return page("Alert deliveries", "".join(parts), user_name)
    parts.append(stats_table([c["stats"] for c in channels]))
    for c in channels:
        name = c["stats"]["channel"]
        parts.append(f'<section id="channel-{esc(name)}"><h2>Channel {esc(name)}</h2>')
        for kind, title, count, records in c["attention"]:
            more = f" (showing {len(records)})" if count > len(records) else ""
            parts.append(f'<h3 class="attention-{esc(kind)}">{esc(title)}: {esc(count)}{esc(more)}</h3>')
            if count:
                parts.append(records_table(records, name, qs))
        parts.append(f"<h3>Latest {esc(len(c['latest']))} records</h3>")
        parts.append(records_table(c["latest"], name, qs))
        parts.append("</section>")
    return page("Alert deliveries", "".join(parts), user_name)


def render_found(alert_id: str, views: list[dict], ledger, default_prefix: str, limit: int, user_name: str) -> str:
    """One alert on every channel: its own record (linked) or its entry in a group-commit run."""
    qs = query(ledger.prefix, default_prefix, limit)
    rows = []
    for v in views:
        channel = v["channel"]
        if v.get("source") == "record":
            where = f'<a href="{esc(channel)}/{esc(alert_id)}{esc(qs)}">its record</a>'
        elif v.get("run"):
            r = v["run"]
            where = (f"run partition {esc(r['partition'])} offsets {esc(r['start'])}–{esc(r['end'])}, "
                     f"{esc(r['state'])}, epoch {esc(r['epoch'])}, owner {esc(r['owner'])}, "
                     f"recorded {esc(when(r.get('recorded_at')))}")
        else:
            where = esc(v.get("note", ""))
        receipt = v.get("receipt")
        rows.append(f"<tr><td>{esc(channel)}</td><td>{state_badge(str(v.get('state')))}</td><td>{where}</td>"
                    f"<td><code>{esc(json.dumps(receipt, sort_keys=True)) if receipt else ''}</code></td></tr>")
    explain_qs = "&" + qs[1:] if qs else ""  # the same ledger and limit, after alert_id
    body = (
        f'<p><a href="./{esc(qs)}">← all deliveries</a></p><h1>Alert <code>{esc(alert_id)}</code></h1>'
        f'<p><a href="explain?alert_id={esc(quote(alert_id, safe=""))}{esc(explain_qs)}">Explain: the trades that '
        "built it, its trigger, every delivery's history</a></p>"
        "<table id=found><thead><tr><th>channel</th><th>state</th><th>where</th><th>receipt</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return page(f"alert {alert_id}", body, user_name)


def render_detail(record, ledger, default_prefix: str, limit: int, user_name: str) -> str:
    from dataclasses import asdict

    qs = query(ledger.prefix, default_prefix, limit)
    fields = [
        ("state", state_badge(record.state)), ("attempt", esc(record.attempt)), ("owner", esc(record.owner)),
        ("created", esc(when(record.created_at))), ("updated", esc(when(record.updated_at))),
        ("lease until", esc(when(record.lease_until))), ("next attempt", esc(when(record.next_at))),
        ("delivered", esc(when(record.delivered_at))),
        ("receipt", f"<code>{esc(json.dumps(record.receipt, sort_keys=True))}</code>" if record.receipt else ""),
        ("error", f"<span class=err>{esc(record.error)}</span>" if record.error else ""),
    ]
    summary = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in fields)
    history = "".join(
        f"<tr><td>{esc(when(h.get('at')))}</td><td>{state_badge(str(h.get('state')))}</td>"
        f"<td class=n>{esc(h.get('attempt'))}</td><td>{esc(h.get('note'))}</td></tr>"
        for h in record.history
    )
    alert = record_alert(record)
    # An unreadable alert is still shown as stored (the record JSON below has it too).
    fields = alert.to_dict() if alert else (record.alert if isinstance(record.alert, dict) else {})
    alert_rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(json.dumps(v) if isinstance(v, (dict, list)) else v)}</td></tr>"
        for k, v in fields.items()
    )
    body = (
        f'<p><a href="../{esc(qs)}">← all deliveries</a></p>'
        f"<h1>{esc(record.channel)} / <code>{esc(record.alert_id)}</code></h1>"
        f"<p class=meta>Record <code>{esc(location(ledger, ledger.key(record.channel, record.alert_id)))}</code></p>"
        f"<h2>Delivery</h2><table id=record>{summary}</table>"
        "<h2>History</h2><table id=history><thead><tr><th>at</th><th>state</th><th>attempt</th><th>note</th></tr></thead>"
        f"<tbody>{history}</tbody></table>"
        f"<h2>Alert</h2><table id=alert>{alert_rows}</table>"
        f"<h2>Record JSON</h2><pre>{esc(json.dumps(asdict(record), indent=2, sort_keys=True))}</pre>"
    )
    return page(f"{record.channel} / {record.alert_id}", body, user_name)


def render_explain(story, ledger, default_prefix: str, limit: int, user_name: str) -> str:
    """`aldebaran explain` as a page: the same Explanation (aldebaran.explain), every value escaped."""
    qs = query(ledger.prefix, default_prefix, limit)
    alert = story.alert or {}
    alert_rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(json.dumps(v) if isinstance(v, (dict, list)) else v)}</td></tr>"
        for k, v in alert.items()
    )
    where = (f"partition {story.position[0]}, offset {story.position[1]}" if story.position
             else "no longer on the alerts topic")
    trades = "".join(
        f"<tr><td class=n>{esc(t.partition)}</td><td class=n>{esc(t.offset)}</td><td><code>{esc(t.event_id)}</code></td>"
        f"<td>{esc(t.kind)}</td><td class=n>{esc(t.shares)}</td><td>{esc(t.found)}</td>"
        f"<td>{'trigger' if t.trigger else ''}</td><td>{esc(t.note)}</td></tr>"
        for t in story.trades
    )
    trig = story.trigger
    ts = alert.get("trigger_event_ts")
    trigger = (f"event <code>{esc(alert.get('trigger_event_id'))}</code> at {esc(when(ts / 1000 if ts else None))}"
               + (f", {esc(story.topic)}[{esc(trig.partition)}]@{esc(trig.offset)}, {esc(trig.kind)} of "
                  f"{esc(trig.shares)} shares" if trig else ""))
    deliveries, histories = [], []
    for i, d in enumerate(story.deliveries):
        run = d.get("run") or {}
        if d.get("source") == "record":
            place = f'<a href="{esc(quote(d["channel"], safe=""))}/{esc(quote(story.alert_id, safe=""))}{esc(qs)}">its record</a>, attempt {esc(d.get("attempt"))}'
        elif run:
            place = (f"run partition {esc(run.get('partition'))} offsets {esc(run.get('start'))}–{esc(run.get('end'))}, "
                     f"{esc(run.get('state'))}, epoch {esc(run.get('epoch'))}, owner {esc(run.get('owner'))}")
        else:
            place = esc(d.get("note"))
        deliveries.append(f"<tr><td>{esc(d.get('channel'))}</td><td>{state_badge(str(d.get('state')))}</td><td>{place}</td></tr>")
        rows = "".join(
            f"<tr><td>{esc(when(h.get('at')))}</td><td>{esc(h.get('state') or '')}</td><td>{esc(h.get('note'))}</td></tr>"
            for h in d.get("history") or run.get("history") or []
        )
        histories.append(f"<h3>{esc(d.get('channel'))}</h3><table id=history-{i}><thead><tr><th>at</th><th>state</th>"
                         f"<th>note</th></tr></thead><tbody>{rows}</tbody></table>")
    notes = "".join(f"<li>{esc(n)}</li>" for n in story.notes)
    body = (
        f'<p><a href="./{esc(qs)}">← all deliveries</a></p><h1>Explain alert <code>{esc(story.alert_id)}</code></h1>'
        f"<p class=meta>On the alerts topic: {esc(where)}</p>"
        f"<h2>Alert</h2><table id=alert>{alert_rows}</table>"
        f"<h2>Trades that built its book</h2><p class=meta>topic {esc(story.topic or '?')}, "
        f"{esc('?' if story.events is None else story.events)} events</p>"
        "<table id=trades><thead><tr><th>partition</th><th>offset</th><th>event id</th><th>kind</th><th>shares</th>"
        f"<th>found</th><th>trigger</th><th>note</th></tr></thead><tbody>{trades}</tbody></table>"
        f"<h2>Trigger</h2><p id=trigger>{trigger}</p>"
        + (f"<ul id=notes>{notes}</ul>" if notes else "")
        + "<h2>Deliveries</h2><table id=deliveries><thead><tr><th>channel</th><th>state</th><th>where</th></tr></thead>"
        f"<tbody>{''.join(deliveries)}</tbody></table>{''.join(histories)}"
    )
    return page(f"explain {story.alert_id}", body, user_name)


def error_page(status_code: int, message: str, home: str) -> str:
    body = f'<p><a href="{esc(home)}">← all deliveries</a></p><h1>{esc(status_code)}</h1><p class=err>{esc(message)}</p>'
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Deliveries: error</title>"
        f"<style>{CSS}</style></head><body>{body}</body></html>"
    )


# --- the FastAPI app -----------------------------------------------------------------------------
@functools.cache
def authorization():
    """The dependency every route has: Airflow's user from the request, allowed to read RESOURCE.

    `get_user` (airflow.api_fastapi.core_api.security) takes the JWT from `Authorization: Bearer`
    or else from the `_token` cookie the UI holds (JWTRefreshMiddleware, a root middleware, has
    already resolved the cookie for mounted apps too) and has the auth manager validate it:
    401 without credentials, 403 for an invalid token. Cached, so that tests can override it."""
    from typing import Annotated

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, HTTPException, status

    def authorized_user(user: Annotated[BaseUser, Depends(get_user)]) -> BaseUser:
        if not get_auth_manager().is_authorized_custom_view(method="GET", resource_name=RESOURCE, user=user):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"not allowed to read {RESOURCE}")
        return user

    return authorized_user


def create_app():
    """The plugin's FastAPI app: routes relative to its mount point (URL_PREFIX)."""
    from typing import Annotated

    from aldebaran.exceptions import ConfigError, ObjectStoreError
    from aldebaran.objectstore import safe_segment
    from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
    from fastapi.exception_handlers import http_exception_handler
    from fastapi.responses import HTMLResponse, RedirectResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    # No /docs or /openapi.json: they would be served without authentication.
    app = FastAPI(title="Aldebaran deliveries", docs_url=None, redoc_url=None, openapi_url=None)
    User = Annotated[object, Depends(authorization())]
    Backend = Annotated[object, Depends(ledger_backend)]
    Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="records per list")]
    LedgerPrefix = Annotated[str | None, Query(description="ledger prefix, ending in /deliveries")]

    def wants_html(request: Request) -> bool:
        """A browser asking for one of the pages (not the JSON API)."""
        root = request.scope.get("root_path", "")
        return request.url.path.startswith(f"{root}/deliveries/") and "text/html" in request.headers.get("accept", "")

    @app.exception_handler(StarletteHTTPException)
    async def login_or_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == status.HTTP_401_UNAUTHORIZED and wants_html(request):
            from airflow.api_fastapi.app import get_auth_manager

            login = get_auth_manager().get_url_login(next_url=str(request.url))
            return RedirectResponse(login, status.HTTP_307_TEMPORARY_REDIRECT)
        if wants_html(request):
            home = f"{request.scope.get('root_path', '')}/deliveries/"
            return HTMLResponse(error_page(exc.status_code, str(exc.detail), home), exc.status_code,
                                headers={**SECURITY_HEADERS, **(exc.headers or {})})
        return await http_exception_handler(request, exc)

    @app.exception_handler(ObjectStoreError)
    @app.exception_handler(ConfigError)
    async def ledger_unavailable(request: Request, exc: Exception):
        # The object store is down or unconfigured (ALDEBARAN_S3_*): say so, with its location.
        log.warning("delivery ledger unavailable: %s", exc)
        return await login_or_error(request, HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                                           f"delivery ledger unavailable: {exc}"))

    def open_or_400(backend, prefix: str | None):
        try:
            return open_ledger(backend, prefix)
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None

    @app.get("/deliveries/", response_class=HTMLResponse)
    def deliveries_page(user: User, backend: Backend, ledger: LedgerPrefix = None, limit: Limit = DEFAULT_LIMIT):
        book = open_or_400(backend, ledger)
        default = open_ledger(backend, None).prefix
        body = render_overview(book, overview(book, limit), default, limit, user.get_name())
        return HTMLResponse(body, headers=SECURITY_HEADERS)

    @app.get("/deliveries/find", response_class=HTMLResponse)
    def find_page(alert_id: str, user: User, backend: Backend, ledger: LedgerPrefix = None,
                  limit: Limit = DEFAULT_LIMIT):
        """Any alert by its id, on every channel, without listing the ledger (delivery/tools.find)."""
        from aldebaran.delivery.tools import find, locate_alert

        try:
            safe_segment(alert_id, "alert id")
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        book = open_or_400(backend, ledger)
        channels = book.channels()
        records = {c: book.get(c, alert_id) for c in channels}
        # A key scan of the alerts topic only when some channel has no record of its own.
        position = None if all(records.values()) else locate_alert(alert_id, timeout=10.0)
        views = [find(book, c, alert_id, position) for c in channels]
        default = open_ledger(backend, None).prefix
        return HTMLResponse(render_found(alert_id, views, book, default, limit, user.get_name()),
                            headers=SECURITY_HEADERS)

    @app.get("/deliveries/explain", response_class=HTMLResponse)
    def explain_page(alert_id: str, user: User, backend: Backend, ledger: LedgerPrefix = None,
                     limit: Limit = DEFAULT_LIMIT):
        """`aldebaran explain` as a page: the one function that builds it (aldebaran.explain.explain)."""
        from aldebaran.exceptions import AlertNotFound
        from aldebaran.explain import explain

        try:
            safe_segment(alert_id, "alert id")
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        book = open_or_400(backend, ledger)
        try:
            story = explain(alert_id, book, locate_timeout=10.0)
        except AlertNotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        default = open_ledger(backend, None).prefix
        return HTMLResponse(render_explain(story, book, default, limit, user.get_name()), headers=SECURITY_HEADERS)

    @app.get("/deliveries/{channel}/{alert_id}", response_class=HTMLResponse)
    def delivery_page(channel: str, alert_id: str, user: User, backend: Backend, ledger: LedgerPrefix = None,
                      limit: Limit = DEFAULT_LIMIT):
        try:
            safe_segment(channel, "channel")
            safe_segment(alert_id, "alert id")
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        book = open_or_400(backend, ledger)
        got = book.get(channel, alert_id)
        if got is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND,
                                f"no delivery record for {channel}/{alert_id} in {book.prefix}")
        default = open_ledger(backend, None).prefix
        body = render_detail(got[0], book, default, limit, user.get_name())
        return HTMLResponse(body, headers=SECURITY_HEADERS)

    @app.get("/api/deliveries/stats")
    def deliveries_stats(user: User, backend: Backend, ledger: LedgerPrefix = None) -> dict:
        book = open_or_400(backend, ledger)
        rows = [book.stats(channel) for channel in book.channels()]
        return {"ledger": book.prefix, "store": book.store.uri(), "generated_at": book.clock(), "channels": rows}

    return app


class LazyApp:
    """An ASGI app that builds the real one (create_app) on its first request.

    Plugin modules are imported by every Airflow process, but only the api-server serves requests;
    Airflow's security module alone costs ~0.9 s and ~400 modules to import."""

    def __init__(self, factory) -> None:
        self.factory = factory
        self.app = None

    async def __call__(self, scope, receive, send) -> None:
        if self.app is None:
            self.app = self.factory()  # synchronous: no other request runs in between
        await self.app(scope, receive, send)


class AldebaranDeliveriesPlugin(AirflowPlugin):
    name = "aldebaran_deliveries"
    fastapi_apps = [{"app": LazyApp(create_app), "url_prefix": URL_PREFIX, "name": "Aldebaran deliveries"}]
    external_views = [
        {
            "name": "Deliveries",
            # Relative (no leading slash), resolved against the UI's base URL, so it works under a sub-path.
            "href": "aldebaran/deliveries/",
            # Rendered in an iframe at /plugin/aldebaran-deliveries; links inside it stay in the frame.
            "url_route": "aldebaran-deliveries",
            "destination": "nav",
            "category": "browse",
        }
    ]
