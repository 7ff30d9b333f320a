"""The Deliveries pages rendered from their Jinja2 templates: every value escaped by the environment,
whatever field it arrives in; the templates shipped as package data. Records are real ones, claimed and
reported in a ledger on the local-directory store."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from aldebaran.delivery import pages
from aldebaran.delivery.channels.base import Outcome
from aldebaran.delivery.ledger import Ledger
from aldebaran.model import Alert
from aldebaran.storage.store import LocalStore

ROOT = Path(__file__).resolve().parents[4]
HOSTILE = "<script>alert('x')</script>\"><img src=x onerror=alert(1)>"
ESCAPED = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"


@pytest.fixture
def ledger(tmp_path):
    return Ledger(LocalStore(tmp_path), prefix="deliveries")


def record(ledger, alert_id: str, outcome):
    alert = {"alert_id": alert_id, "kind": "OVERFILL", "order_id": HOSTILE, "client": HOSTILE, "stock": HOSTILE,
             "requested": 100, "purchased": 120}
    attempt = ledger.attempt(SimpleNamespace(name="sms", can_dedupe=False), Alert.from_dict(alert), "w1")
    attempt.report(outcome(alert_id))
    return attempt.record


def assert_inert(page: str) -> None:
    assert "<script" not in page and "<img" not in page
    assert ESCAPED in page


def test_hostile_values_are_escaped_on_the_overview_detail_and_error_pages(ledger):
    rec = record(ledger, "a1", lambda a: Outcome.unknown(a, HOSTILE))
    channels = pages.overview(ledger, 20)
    channels[0]["promise"] = {"kind": HOSTILE, "promise": HOSTILE, "dedupe": False, "dedupe_key": HOSTILE,
                              "in_doubt": HOSTILE, "provider_rate": HOSTILE}
    channels[0]["corrupt"] = [{"key": HOSTILE, "reason": HOSTILE}]
    overview = pages.render_overview(ledger, channels, "elsewhere", 7, HOSTILE,
                                     {"capped": True, "count": 2, "where": HOSTILE}, 3)
    assert_inert(overview)
    assert overview.count(ESCAPED) >= 9  # order id, error, the promise's four, corrupt key and reason, user
    # A macro's output (the state badge) is markup, not escaped a second time.
    assert '<span class="s s-in_doubt">IN_DOUBT</span>' in overview
    detail = pages.render_detail(rec, ledger, "deliveries", 20, HOSTILE)
    assert_inert(detail)
    assert_inert(pages.error_page(404, HOSTILE, HOSTILE))


def test_hostile_values_are_escaped_on_the_found_and_explain_pages(ledger):
    views = [{"channel": HOSTILE, "run": {"partition": 0, "start": 1, "end": 2, "state": HOSTILE, "epoch": 1,
                                          "owner": HOSTILE}, "state": HOSTILE, "receipt": {"r": HOSTILE}}]
    assert_inert(pages.render_found(HOSTILE, views, ledger, "deliveries", 20, HOSTILE))
    n = SimpleNamespace
    story = n(alert_id=HOSTILE, alert={"trigger_event_id": HOSTILE, "trigger_event_ts": None, "client": HOSTILE},
              position=None, topic=HOSTILE, events=1, notes=[HOSTILE], trigger=n(partition=0, offset=1, kind=HOSTILE,
                                                                                  shares=1),
              trades=[n(partition=0, offset=1, event_id=HOSTILE, kind=HOSTILE, shares=1, found=True, trigger=True,
                        note=HOSTILE)],
              deliveries=[{"channel": HOSTILE, "source": "record", "state": "RETRY", "attempt": 1,
                           "history": [{"at": None, "state": HOSTILE, "note": HOSTILE}]}],
              fast=[{"channel": HOSTILE, "lane": HOSTILE, "retraction": {"alert": {"reason": HOSTILE}}}])
    page = pages.render_explain(story, ledger, "deliveries", 20, HOSTILE)
    assert_inert(page)
    assert "<table id=fast>" in page and '<ul id=notes><li>' in page


def test_a_missing_value_shows_as_nothing_not_none(ledger):
    rec = record(ledger, "a2", lambda a: Outcome.delivered(a, {}))
    detail = pages.render_detail(rec, ledger, "deliveries", 20, "ops")
    assert "<tr><th>next attempt</th><td></td></tr>" in detail and "None" not in detail


def test_every_template_autoescapes_and_ships_as_package_data():
    names = pages.ENV.list_templates()
    assert {"base.html", "overview.html", "detail.html", "found.html", "explain.html", "error.html"} <= set(names)
    assert all(pages.ENV.get_template(name).environment.autoescape is True for name in names)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["aldebaran"]
    shipped = {p.relative_to(ROOT / "include" / "aldebaran") for pattern in data
               for p in (ROOT / "include" / "aldebaran").glob(pattern)}
    assert {Path("delivery/templates") / name for name in names} <= shipped
