"""The Deliveries pages of the Airflow UI (plugins/aldebaran_deliveries.py serves them): what a page reads
from the delivery ledger, and its HTML from the Jinja2 templates beside this module (``templates/``).
The environment autoescapes every value a template shows; the plugin adds the security headers (a CSP
that runs no script) and the authentication.

Pure functions of the ledger and its records, apart from the plugin so that the plugin only declares and
wires (its FastAPI app, Airflow's authorization), and so that the rendering is tested without Airflow.
"""

from __future__ import annotations

import html
import json
from datetime import datetime, timezone
from urllib.parse import quote, urlencode

import jinja2
from markupsafe import Markup

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


# --- HTML: the templates; values are escaped by the environment, never by a caller ----------------
def esc(value) -> Markup:
    """How a value shows on a page: None as nothing, anything else escaped (with the entities html.escape
    writes, ``&#x27;`` and ``&quot;``, which the pages have always shown). Every ``{{ }}`` of the templates
    goes through it (the environment's finalize); a Markup (a macro's output) is left as it is."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


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


def query(prefix: str, default: str, limit: int) -> str:
    params = {}
    if prefix != default:
        params["ledger"] = prefix
    if limit != DEFAULT_LIMIT:
        params["limit"] = limit
    return f"?{urlencode(params)}" if params else ""


def stat_text(key: str, value):
    """One cell of the counts table."""
    if key == "lease_seconds":
        return duration(value)
    if key == "fast":
        return "yes" if value else "–"
    return "–" if value is None else value


def _environment() -> jinja2.Environment:
    from aldebaran.delivery.records import STATES

    # autoescape on for every template whatever its name; esc is the one place a value becomes HTML.
    env = jinja2.Environment(loader=jinja2.PackageLoader("aldebaran.delivery", "templates"), autoescape=True,
                             finalize=esc, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(
        when=when, q=lambda value: quote(str(value), safe=""),
        json=lambda value, indent=None: json.dumps(value, indent=indent, sort_keys=True),
        cell=lambda value: json.dumps(value) if isinstance(value, (dict, list)) else value)
    env.globals.update(states=STATES, stat_columns=STAT_COLUMNS, stat_text=stat_text)
    return env


ENV = _environment()


def render_overview(ledger, channels: list[dict], default_prefix: str, limit: int, user_name: str,
                    quarantine: dict | None = None, dlq: int | None = None) -> str:
    return ENV.get_template("overview.html").render(
        title="Alert deliveries", user_name=user_name, channels=channels, limit=limit, now=ledger.clock(),
        where=location(ledger, ledger.prefix + "/"), prefix=ledger.prefix, default_prefix=default_prefix,
        qs=query(ledger.prefix, default_prefix, limit), quarantine=quarantine, dlq=dlq)


def render_found(alert_id: str, views: list[dict], ledger, default_prefix: str, limit: int, user_name: str) -> str:
    """One alert on every channel: its own record (linked) or its entry in a group-commit run."""
    return ENV.get_template("found.html").render(
        title=f"alert {alert_id}", user_name=user_name, alert_id=alert_id, views=views,
        qs=query(ledger.prefix, default_prefix, limit))


def render_detail(record, ledger, default_prefix: str, limit: int, user_name: str) -> str:
    return ENV.get_template("detail.html").render(
        title=f"{record.channel} / {record.alert_id}", user_name=user_name, record=record, stored=record.to_dict(),
        where=location(ledger, ledger.key(record.channel, record.alert_id)),
        qs=query(ledger.prefix, default_prefix, limit))


def render_explain(story, ledger, default_prefix: str, limit: int, user_name: str) -> str:
    """`aldebaran explain` as a page: the same Explanation (aldebaran.cli.story)."""
    return ENV.get_template("explain.html").render(
        title=f"explain {story.alert_id}", user_name=user_name, story=story,
        qs=query(ledger.prefix, default_prefix, limit))


def error_page(status_code: int, message: str, home: str) -> str:
    return ENV.get_template("error.html").render(title="Deliveries: error", status_code=status_code,
                                                  message=message, home=home)
