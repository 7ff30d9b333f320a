"""The campaigns' receipts held to each channel's promise (chaos.receipts): `duplicated` only where the
promise forbids a repeat, same-key resends under their own name where it allows them; and the report's
new column. Hand-written counts, no services."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from aldebaran.delivery.channels.base import Promise
from aldebaran_lab.chaos import receipts
from aldebaran_lab.chaos.common import CampaignResult, bus_verdict, markdown
from aldebaran_lab.chaos.receipts import count, promise_of

PER_KEY = {"a1": 3, "a2": 1, "a3": 2, "a4": 0}  # a1 twice more, a3 once more, a4 never received


def test_each_campaign_channel_has_the_promise_its_kind_declares():
    assert promise_of("webhook") is Promise.AT_LEAST_ONCE_STABLE_KEY
    assert promise_of("bus") is Promise.AT_LEAST_ONCE_STABLE_KEY
    assert promise_of("email") is Promise.AT_LEAST_ONCE_STABLE_KEY
    assert promise_of("sms") is Promise.AT_MOST_ONCE_IN_DOUBT
    assert promise_of("sms_lookup") is Promise.EXACTLY_ONCE
    assert promise_of("log") is Promise.EXACTLY_ONCE


def test_same_key_resends_are_reported_apart_where_the_promise_allows_them():
    r = count(PER_KEY, Promise.AT_LEAST_ONCE_STABLE_KEY)
    assert (r.received, r.receipts, r.duplicated, r.resent_same_key) == (3, 6, 0, 3)
    assert r.figures() == {"receipts": 6, "duplicated": 0, "resent_same_key": 3}


def test_a_copy_under_another_key_is_a_duplicate_even_on_a_stable_key_channel():
    r = count(PER_KEY, Promise.AT_LEAST_ONCE_STABLE_KEY, other_key=2)
    assert (r.duplicated, r.resent_same_key) == (2, 3)


@pytest.mark.parametrize("promise", [Promise.AT_MOST_ONCE_IN_DOUBT, Promise.EXACTLY_ONCE])
def test_an_alert_received_twice_is_one_duplicate_where_the_promise_forbids_a_resend(promise):
    r = count(PER_KEY, promise)
    # a1 (3 receipts) and a3 (2): two alerts duplicated, however many copies; no resend allowed
    assert (r.received, r.receipts, r.duplicated, r.resent_same_key) == (3, 6, 2, None)
    assert count(PER_KEY, promise, other_key=1).duplicated == 3


def test_nothing_received_twice_is_nothing_duplicated_nor_resent():
    once = {"a1": 1, "a2": 1}
    assert count(once, Promise.AT_LEAST_ONCE_STABLE_KEY).figures() == {"receipts": 2, "duplicated": 0,
                                                                      "resent_same_key": 0}
    assert count(once, Promise.AT_MOST_ONCE_IN_DOUBT).figures() == {"receipts": 2, "duplicated": 0,
                                                                   "resent_same_key": None}
    assert count({}, Promise.EXACTLY_ONCE).received == 0


def test_receipts_per_key_from_a_receivers_stats_and_from_the_log_channels_lines():
    stats = {"received_at": {"a1": 1.0, "a2": 2.0, "zz": 3.0}, "repeats": {"a1": 2}}
    assert receipts.stats_per_key(stats) == Counter({"a1": 3, "a2": 1, "zz": 1})
    assert receipts.stats_per_key({"received_at": {"a1": 1.0}}) == Counter({"a1": 1})  # an older receiver
    lines = [json.dumps({"idempotency_key": k, "sent_at": 0, "alert": {}}) for k in ("a1", "a2", "a1")] + [""]
    assert receipts.log_lines_per_key(lines) == Counter({"a1": 2, "a2": 1})
    assert count(receipts.log_lines_per_key(lines), promise_of("log")).duplicated == 1


def test_a_recipient_from_its_stats_against_the_expected_alerts():
    stats = {"received_at": {"a1": 1.0, "a2": 2.0, "zz": 3.0}, "repeats": {"a1": 2, "zz": 1}}
    assert receipts.recipient(stats, {"a1", "a2", "a3"}, promise_of("webhook")) == {
        "expected": 3, "received": 2, "lost": 1, "receipts": 6, "duplicated": 0, "resent_same_key": 3,
        "unexpected": 1}
    sms = receipts.recipient(stats, {"a1", "a2", "a3"}, promise_of("sms_lookup"))
    assert (sms["duplicated"], sms["resent_same_key"]) == (2, None)


class _Message:
    def __init__(self, key: str, alert_id: str, ts_ms: int) -> None:
        self._key, self._value, self._ts = key.encode(), json.dumps({"alert_id": alert_id}).encode(), ts_ms

    def key(self):
        return self._key

    def value(self):
        return self._value

    def timestamp(self):
        return (1, self._ts)


def test_the_bus_counts_its_messages_per_key(monkeypatch):
    # a1 twice under its key (a resend), a2 once, a3 once under key "x" (not its id: a duplicate)
    msgs = [_Message("a1", "a1", 1000), _Message("a1", "a1", 3000), _Message("a2", "a2", 2000),
            _Message("x", "a3", 2500)]
    monkeypatch.setattr("aldebaran.kafka.io.read_topic", lambda kafka, topic, timeout: iter(msgs))
    figures, first = bus_verdict(None, "bus", {"a1", "a2", "a3"})
    assert figures == {"expected": 3, "received": 2, "lost": 1, "duplicated": 1, "resent_same_key_deduplicated": 1,
                       "unexpected": 1, "receipts": 4, "resent_same_key": 1}
    assert first == {"a1": 1.0, "a2": 2.0, "x": 2.5}


def test_the_report_has_the_resent_same_key_column():
    result = CampaignResult("kill-dispatch", "short", runs=3, faults=2, lost=0, duplicated=0, resent_same_key=7,
                            recovery_s=[1.0])
    result.rows = [{"scenario": "webhook (idempotent)", "runs": 3, "faults": 2, "lost": 0, "duplicated": 0,
                    "resent_same_key": 7, "recovery": "r"},
                   {"scenario": "sms", "runs": 3, "faults": 2, "lost": 0, "duplicated": 0, "resent_same_key": None,
                    "recovery": "r"},
                   {"scenario": "a kill", "runs": 1, "faults": 1, "lost": "–", "duplicated": "–", "recovery": "r"}]
    lines = markdown(result, "aldebaran chaos kill-dispatch --short").splitlines()
    assert lines[2] == "| scenario | runs | faults injected | lost | duplicated | resent, same key | recovery time |"
    assert lines[3] == "|---|---|---|---|---|---|---|"
    assert lines[4:7] == ["| webhook (idempotent) | 3 | 2 | 0 | 0 | 7 | r |", "| sms | 3 | 2 | 0 | 0 | – | r |",
                          "| a kill | 1 | 1 | – | – | – | r |"]
    # a campaign without rows: its own figures
    single = CampaignResult("failover", "short", runs=2, faults=1, lost=0, duplicated=0, recovery_s=[2.0])
    assert markdown(single, "c").splitlines()[4].startswith("| failover | 2 | 1 | 0 | 0 | – | median 2.0 s")


def test_a_campaign_report_keeps_reliability_md_short_and_its_details_beside_it(tmp_path):
    import json

    from aldebaran_lab.chaos.common import CampaignResult, write_report

    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n\n<!-- chaos:kill-x -->\nold table\n<!-- /chaos:kill-x -->\nafter\n")
    events = [{"kill": i, "pid": 1000 + i, "at": i * 1.5} for i in range(200)]
    result = CampaignResult("kill-x", "short", runs=3, faults=2, lost=0, duplicated=0, details={"events": events})
    write_report(result, "aldebaran chaos kill-x --short", doc)
    text = doc.read_text()
    assert "old table" not in text and text.endswith("<!-- /chaos:kill-x -->\nafter\n")
    assert len(text.splitlines()) < 20  # 200 events and not one line of them in the doc
    assert "[`img/chaos-kill-x.json`](img/chaos-kill-x.json)" in text
    saved = json.loads((tmp_path / "img" / "chaos-kill-x.json").read_text())
    assert saved["command"] == "aldebaran chaos kill-x --short" and saved["details"]["events"] == events
