"""The Deliveries pages of the Airflow UI (plugins/aldebaran_deliveries.py serves them): what a page reads
from the delivery ledger, and its HTML. Every value goes through :func:`esc`; the plugin adds the
security headers (a CSP that runs no script) and the authentication.

Pure functions of the ledger and its records, apart from the plugin so that the plugin only declares and
wires (its FastAPI app, Airflow's authorization), and so that the rendering is tested without Airflow.
"""

from __future__ import annotations

import html
import json
from datetime import datetime, timezone
from urllib.parse import quote, urlencode

# The page's reads, named here as before (the plugin and the tools call pages.overview, pages.channel_promise).
from aldebaran.delivery.page_data import (ATTENTION, attention, channel_promise, delivers_fast,  # noqa: F401
                                          latest_records, overview, rejected, retractions)

DEFAULT_LIMIT, MAX_LIMIT = 20, 200  # records per list
# Counts from the ledger's small index (what needs attention); delivered alerts live in group-commit runs
# and are not counted here (`aldebaran deliveries stats` adds each channel's Kafka backlog).
STAT_COLUMNS = (
    ("fast", "fast lane"), ("retrying", "retrying"), ("dead", "dead"), ("in_doubt", "in doubt"),
    ("lease_seconds", "lease"), ("max_attempts", "max attempts"),
)


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
    elif key == "fast":
        text = "yes" if value else "–"
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
        kind, order_id = r.alert.kind, r.alert.order_id
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


def promise_line(promise: dict | None) -> str:
    """The channel's promise in one line (docs/operations.md § Channels: what each one promises)."""
    if not promise:
        return "<p class=promise>Kind unknown here (its connection is not in this process's environment).</p>"
    dedupe = f"yes, by {promise['dedupe_key']}" if promise["dedupe"] else "no" + (
        f" ({promise['dedupe_key']})" if promise["dedupe_key"] else "")
    return (f"<p class=promise>Kind <code>{esc(promise['kind'])}</code> · promise: <strong>{esc(promise['promise'])}"
            f"</strong> · deduplicates: {esc(dedupe)} · "
            f"in doubt: {esc(promise['in_doubt'])} · provider rate: {esc(promise['provider_rate'] or 'not provider-bound')}</p>")


def set_aside_line(quarantine: dict | None, dlq: int | None) -> str:
    """The quarantine's size (corrupt objects the dispatchers set aside) and the alerts dead-lettered to
    alerts.dlq, in one line: both are kept, not lost, and an operator reads them with the CLI."""
    parts = []
    if quarantine is not None:
        count = f"{'≥ ' if quarantine['capped'] else ''}{quarantine['count']}"
        parts.append(f'Quarantine: <strong id=quarantine-count>{esc(count)}</strong> corrupt object(s) set aside in '
                     f"<code>{esc(quarantine['where'])}</code> (<code>aldebaran deliveries quarantine</code>)")
    if dlq is not None:
        parts.append(f"alerts.dlq: <strong id=dlq-count>{esc(dlq)}</strong> rejected alert(s) dead-lettered by "
                     "the running dispatchers since each started")
    return f"<p class=meta id=set-aside>{' · '.join(parts)}</p>" if parts else ""


def corrupt_table(corrupt: list[dict], channel: str) -> str:
    """Objects this page could not read: skipped, not moved (the dispatcher's sweep quarantines them)."""
    rows = "".join(f"<tr><td><code>{esc(c['key'])}</code></td><td class=err>{esc(c['reason'])}</td></tr>"
                   for c in corrupt)
    return (f'<h3 class="corrupt">Corrupt, skipped: {esc(len(corrupt))}</h3><table id="corrupt-{esc(channel)}"><thead><tr>'
            f"<th>key</th><th>reason</th></tr></thead><tbody>{rows}</tbody></table>")


def render_overview(ledger, channels: list[dict], default_prefix: str, limit: int, user_name: str,
                    quarantine: dict | None = None, dlq: int | None = None) -> str:
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
        set_aside_line(quarantine, dlq),
    ]
    if not channels:
        parts.append("<p class=empty>No delivery records yet.</p>")
        return page("Alert deliveries", "".join(parts), user_name)
    parts.append(stats_table([c["stats"] for c in channels]))
    for c in channels:
        name = c["stats"]["channel"]
        parts.append(f'<section id="channel-{esc(name)}"><h2>Channel {esc(name)}</h2>')
        parts.append(promise_line(c.get("promise")))
        if c.get("corrupt"):
            parts.append(corrupt_table(c["corrupt"], name))
        for kind, title, count, records in c["attention"]:
            more = f" (showing {len(records)})" if count > len(records) else ""
            parts.append(f'<h3 class="attention-{esc(kind)}">{esc(title)}: {esc(count)}{esc(more)}</h3>')
            if count:
                parts.append(records_table(records, name, qs))
        if c["stats"].get("fast") or c.get("retractions"):
            parts.append(f'<h3 class="retractions">Retractions of fast-lane alerts: {esc(len(c["retractions"]))}</h3>')
            parts.append(records_table(c["retractions"], name, qs))
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
    stored = record.to_dict()
    alert_rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(json.dumps(v) if isinstance(v, (dict, list)) else v)}</td></tr>"
        for k, v in stored["alert"].items()
    )
    body = (
        f'<p><a href="../{esc(qs)}">← all deliveries</a></p>'
        f"<h1>{esc(record.channel)} / <code>{esc(record.alert_id)}</code></h1>"
        f"<p class=meta>Record <code>{esc(location(ledger, ledger.key(record.channel, record.alert_id)))}</code></p>"
        f"<h2>Delivery</h2><table id=record>{summary}</table>"
        "<h2>History</h2><table id=history><thead><tr><th>at</th><th>state</th><th>attempt</th><th>note</th></tr></thead>"
        f"<tbody>{history}</tbody></table>"
        f"<h2>Alert</h2><table id=alert>{alert_rows}</table>"
        f"<h2>Record JSON</h2><pre>{esc(json.dumps(stored, indent=2, sort_keys=True))}</pre>"
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
    fast = "".join(
        f"<tr><td>{esc(v['channel'])}</td><td>{esc(v.get('lane') or '–')}</td><td>{esc(v.get('state') or '–')}</td>"
        f"<td><code>{esc(v.get('sent_by') or '')}</code></td>"
        f"<td>{esc((v.get('retraction') or {}).get('state') or '–')}</td>"
        f"<td>{esc(((v.get('retraction') or {}).get('alert') or {}).get('reason') or '')}</td>"
        f"<td>{esc((v.get('reinstatement') or {}).get('state') or '–')}</td></tr>"
        for v in story.fast
    )
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
        + ("<h2>Fast lane</h2><table id=fast><thead><tr><th>channel</th><th>delivered by lane</th><th>entry</th>"
           "<th>sent marker (run)</th><th>retraction</th><th>why</th><th>reinstatement</th></tr></thead>"
           f"<tbody>{fast}</tbody></table>" if fast else "")
    )
    return page(f"explain {story.alert_id}", body, user_name)


def error_page(status_code: int, message: str, home: str) -> str:
    body = f'<p><a href="{esc(home)}">← all deliveries</a></p><h1>{esc(status_code)}</h1><p class=err>{esc(message)}</p>'
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Deliveries: error</title>"
        f"<style>{CSS}</style></head><body>{body}</body></html>"
    )
