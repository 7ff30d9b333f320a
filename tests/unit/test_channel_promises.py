"""What each channel kind promises (``Channel.promise``: deduplication key, in-doubt policy, provider rate)
is what docs/operations.md's channel table says and what the Deliveries page shows per channel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aldebaran.delivery import channels as ch
from aldebaran.delivery import pages
from aldebaran.delivery.ledger import Ledger
from aldebaran.storage import LocalStore

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def table_rows() -> dict[str, list[str]]:
    text = OPERATIONS.read_text()
    section = text.split("## Channels: what each one promises", 1)[1].split("\n## ", 1)[0]
    table = section.split("| kind | conn types |", 1)[1].split("\n\n", 1)[0]  # the first table only
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([a-z]+)`", cells[0]) if len(cells) == 5 else None
        if match:
            rows[match.group(1)] = cells
    return rows


def test_the_operations_table_has_every_kind_with_its_declared_promise():
    rows = table_rows()
    assert set(rows) == set(ch.KINDS)
    for kind, cls in ch.KINDS.items():
        _, types, dedupe, in_doubt, rate = rows[kind]
        promise = cls.promise()
        assert set(re.findall(r"`([a-z_]+)`", types)) == {t for t, k in ch.CONN_TYPES.items() if k == kind}
        assert dedupe.startswith("yes: " if promise["dedupe"] else "no"), kind
        assert (promise["dedupe_key"] or "") in dedupe and in_doubt == promise["in_doubt"]
        assert rate == (promise["provider_rate"] or "– (not provider-bound)")


def test_every_kind_that_cannot_deduplicate_puts_uncertain_sends_in_doubt():
    for kind, cls in ch.KINDS.items():
        if not cls.can_dedupe and not cls.remembers_sent:
            assert "IN_DOUBT" in cls.in_doubt_policy and "never re-sent" in cls.in_doubt_policy, kind


def test_the_page_finds_a_channels_kind_by_its_connection_or_its_name(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_ONCALL", json.dumps({"conn_type": "pagerduty", "password": "k"}))
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_APNS", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_ELSEWHERE", raising=False)
    assert pages.channel_promise("oncall") == ch.PagerDutyChannel.promise()
    assert pages.channel_promise("apns") == ch.ApnsChannel.promise()
    assert pages.channel_promise("elsewhere") is None
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_BROKEN", "{not json")
    assert pages.channel_promise("broken") is None


@pytest.mark.parametrize("kind", ["pagerduty", "apns"])
def test_the_overview_shows_each_channels_promise(tmp_path, kind):
    ledger = Ledger(LocalStore(tmp_path), prefix="deliveries")
    promise = ch.KINDS[kind].promise()
    channels = [{"stats": {"channel": kind}, "attention": [], "latest": [], "retractions": [], "promise": promise},
                {"stats": {"channel": "mystery"}, "attention": [], "latest": [], "retractions": [], "promise": None}]
    html = pages.render_overview(ledger, channels, "deliveries", 20, "ops")
    line = re.search(r'<section id="channel-' + kind + r'">.*?<p class=promise>(.*?)</p>', html, re.S).group(1)
    assert f"Kind <code>{kind}</code>" in line
    assert pages.esc(promise["in_doubt"]) in line and pages.esc(promise["provider_rate"]) in line
    assert ("deduplicates: yes, by" in line) == promise["dedupe"]
    assert "Kind unknown here" in html.split('id="channel-mystery"')[1]
