"""What each channel kind promises (``Channel.promise``: the promise in one word, deduplication key,
in-doubt policy, provider rate) is what docs/operations.md's channel table and the README say, what
`aldebaran deliveries channels` lists and what the Deliveries page shows per channel."""

from __future__ import annotations

import json
import re

import pytest

from aldebaran.runtime import paths
from aldebaran.delivery import channels as ch
from aldebaran.delivery import pages
from aldebaran.delivery.ledger import Ledger
from aldebaran.storage.store import LocalStore

ROOT = paths.ROOT
OPERATIONS = ROOT / "docs" / "operations.md"
WORDS = {"exactly-once", "at-most-once+in-doubt", "at-least-once-stable-key"}


def table_rows() -> dict[str, list[str]]:
    text = OPERATIONS.read_text()
    section = text.split("## Channels: what each one promises", 1)[1].split("\n## ", 1)[0]
    table = section.split("| kind | promise | conn types |", 1)[1].split("\n\n", 1)[0]  # the first table only
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([a-z]+)`", cells[0]) if len(cells) == 6 else None
        if match:
            rows[match.group(1)] = cells
    return rows


def test_the_operations_table_has_every_kind_with_its_declared_promise():
    rows = table_rows()
    assert set(rows) == set(ch.KINDS)
    for kind, cls in ch.KINDS.items():
        _, word, types, dedupe, in_doubt, rate = rows[kind]
        promise = cls.promise()
        with_lookup = f" (`{promise['promise_with_lookup']}` with `lookup: true`)" if promise["promise_with_lookup"] else ""
        assert word == f"`{promise['promise']}`" + with_lookup, kind
        assert set(re.findall(r"`([a-z_]+)`", types)) == {t for t, k in ch.CONN_TYPES.items() if k == kind}
        assert dedupe.startswith("yes: " if promise["dedupe"] else "no"), kind
        assert (promise["dedupe_key"] or "") in dedupe and in_doubt == promise["in_doubt"]
        assert rate == (promise["provider_rate"] or "– (not provider-bound)")


def test_every_registered_kind_declares_one_of_the_three_promises():
    assert {p.value for p in ch.Promise} == WORDS
    for kind, cls in ch.KINDS.items():
        assert "delivery_promise" in vars(cls), f"{kind} inherits its promise instead of declaring it"
        assert cls.promise()["promise"] in WORDS and cls.promise(lookup=True)["promise"] in WORDS


def test_no_kind_promises_more_than_its_flags_allow():
    for kind, cls in ch.KINDS.items():
        promise = cls.delivery_promise
        if promise is ch.Promise.EXACTLY_ONCE and cls.can_dedupe:
            # Only a provider that is known to drop a repeat of its key may say so; a mailbox, a topic or
            # somebody's webhook receiver is not.
            assert kind in {"alertmanager", "pagerduty", "opsgenie"}, kind
        if promise is ch.Promise.EXACTLY_ONCE and not cls.can_dedupe:
            assert cls.remembers_sent and not cls.lookup_lags, kind  # settled by an exact lookup at once
        if not cls.can_dedupe and not cls.remembers_sent:
            assert promise is ch.Promise.AT_MOST_ONCE_IN_DOUBT, kind
        if cls.can_dedupe and promise is not ch.Promise.EXACTLY_ONCE:
            assert promise is ch.Promise.AT_LEAST_ONCE_STABLE_KEY, kind
    assert ch.EmailChannel.delivery_promise is ch.KafkaChannel.delivery_promise is ch.Promise.AT_LEAST_ONCE_STABLE_KEY
    assert ch.WebhookChannel.delivery_promise is ch.Promise.AT_LEAST_ONCE_STABLE_KEY


def test_a_kind_without_a_declared_promise_is_refused():
    class Vague(ch.Channel):
        pass

    with pytest.raises(TypeError, match="'vague' .*must declare delivery_promise"):
        ch.register("vague")(Vague)
    assert "vague" not in ch.KINDS


def test_an_sms_channel_with_lookup_is_exactly_once_and_without_at_most_once():
    base = dict(base_url="https://sms.example", account_sid="AC1", auth_token="t", sender="+15550000000",
                recipient="+15551234567")
    with ch.SmsChannel("sms", **base) as plain, ch.SmsChannel("sms", lookup=True, **base) as looked:
        assert plain.delivers is ch.Promise.AT_MOST_ONCE_IN_DOUBT and looked.delivers is ch.Promise.EXACTLY_ONCE
    assert ch.LogChannel.delivery_promise is ch.Promise.EXACTLY_ONCE


# The README's names for the kinds (a kind with a lookup is named with and without it).
README_NAMES = {"log": ("log", False), "Alertmanager": ("alertmanager", False), "PagerDuty": ("pagerduty", False),
                "Opsgenie": ("opsgenie", False), "SMS with lookup": ("sms", True), "SMS without lookup": ("sms", False),
                "webhook": ("webhook", False), "email": ("email", False), "Kafka bus": ("kafka", False),
                "push": ("fcm", False)}
README_WORDS = {"exactly once": "exactly-once", "at least once under a stable key": "at-least-once-stable-key",
                "at most once + IN_DOUBT": "at-most-once+in-doubt"}


def test_the_readme_claims_each_kind_at_its_declared_promise_and_no_more():
    intro = (ROOT / "README.md").read_text().split("\n\n", 2)[1]
    claimed = {}
    for bold, names in re.findall(r"\*\*([^*]+)\*\*[^(*]*\(([^)]*)\)", " ".join(intro.split())):
        if bold in README_WORDS:
            for name in names.split(", "):
                kind, lookup = README_NAMES[name]
                claimed[(kind, lookup)] = README_WORDS[bold]
    expected = {(kind, lookup): cls.promise(lookup=lookup)["promise"] for kind, cls in ch.KINDS.items()
                for lookup in ((False, True) if cls.lookup_promise else (False,))}
    # "push" names FCM and APNs at once
    assert expected.pop(("apns", False)) == expected[("fcm", False)]
    assert claimed == expected
    assert "exactly once**, using" not in intro  # no blanket claim


def test_the_cli_lists_each_configured_channel_with_its_promise(monkeypatch, capsys):
    from aldebaran.cli import main as cli

    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log,alerts_bus,pager")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_ALERTS_BUS", json.dumps({"conn_type": "kafka", "extra": {"topic": "t"}}))
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_LOG", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_PAGER", raising=False)
    assert cli.main(["deliveries", "channels"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["channel", "kind", "promise"]
    assert rows[1:] == [["log", "log", "exactly-once"], ["alerts_bus", "kafka", "at-least-once-stable-key"],
                        ["pager", "-", "unknown", "(no", "connection", "here)"]]


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
    assert f"Kind <code>{kind}</code>" in line and f"promise: <strong>{pages.esc(promise['promise'])}</strong>" in line
    assert pages.esc(promise["in_doubt"]) in line and pages.esc(promise["provider_rate"]) in line
    assert ("deduplicates: yes, by" in line) == promise["dedupe"]
    assert "Kind unknown here" in html.split('id="channel-mystery"')[1]
