"""Runs on channels that cannot deduplicate, against real Kafka and MinIO: a dispatcher SIGKILLed part-way
through a run's sends (tests/integration/fault_dispatch.py, a failure injection), then a new dispatcher of
the same group takes over.

- log channel (its file is its own sent-log, with an exact lookup): the adopted run is settled by asking
  the file; nothing is written twice, nothing is lost, nothing is left in doubt;
- SMS without a lookup: exactly the claimed runs' pending alerts become IN_DOUBT records, each findable
  by its alert id; nothing is texted twice, every other alert is delivered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aldebaran.delivery.channels import configured_channels
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import IN_DOUBT, RetryPolicy
from aldebaran.delivery.runs import CLAIMED, RECORDED
from aldebaran.delivery.settings import DeliverySettings
from aldebaran_capacity.receivers import SmsProvider
from tests.integration.test_dispatch_failures import make_alert, publish

HERE = Path(__file__).resolve().parent


@pytest.fixture
def settings(s3_prefix):
    return DeliverySettings(prefix=f"{s3_prefix}/deliveries", lease_seconds=3, max_attempts=3,
                            backoff_base_seconds=0.3, backoff_max_seconds=1.0, sweep_seconds=0.5,
                            lookup_grace_seconds=0.5)


@pytest.fixture
def ledger(store, settings):
    return Ledger(store, prefix=settings.prefix, lease_seconds=settings.lease_seconds,
                  policy=RetryPolicy(settings.max_attempts, settings.backoff_base_seconds, settings.backoff_max_seconds))


def crash_part_way(settings, group: str, sent: int) -> None:
    """A dispatcher that sends `sent` alerts of its first run, then dies by SIGKILL before any record."""
    proc = subprocess.run([sys.executable, str(HERE / "fault_dispatch.py"), settings.prefix, group, "3", str(sent)],
                          env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]


def runs(ledger, channel: str, topic: str) -> list:
    return [r for p in (0, 1) for r in ledger.runs(channel, topic, p)]


def test_log_channel_crash_mid_run_is_settled_by_lookup(kafka_topics, ledger, settings, monkeypatch, tmp_path, unique):
    path = tmp_path / "alerts.log.jsonl"
    monkeypatch.setenv("ALDEBARAN_LOG_CHANNEL_PATH", str(path))
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    alerts = [make_alert(f"log-{i}") for i in range(3000)]
    publish(kafka_topics, alerts + alerts[:300])  # and 300 repeats (the topic is at-least-once)
    group = f"g-{unique}"

    crash_part_way(settings, group, sent=250)
    claimed = [r for r in runs(ledger, "log", kafka_topics.alerts_topic) if r.state == CLAIMED]
    assert 1 <= len(claimed) <= 2 and len({r.partition for r in claimed}) == len(claimed)  # ≤ one run per partition
    written = [json.loads(line)["idempotency_key"] for line in path.read_text().splitlines()]
    assert 250 <= len(written) < 3000

    stats = Dispatcher(ledger, configured_channels(), kafka=kafka_topics, group=group, settings=settings).run_once(
        idle_timeout=3.0)
    lines = [json.loads(line)["idempotency_key"] for line in path.read_text().splitlines()]
    assert sorted(lines) == sorted(a["alert_id"] for a in alerts)  # each alert once: none twice, none lost
    assert lines[: len(written)] == written  # what the dead owner wrote stays; nothing was rewritten
    every = runs(ledger, "log", kafka_topics.alerts_topic)
    assert all(r.state == RECORDED for r in every) and ledger.indexed("in_doubt", "log") == []
    adopted = [r for r in every if any("adopted" in h["note"] for h in r.history)]
    assert sorted((r.partition, r.start) for r in adopted) == sorted((r.partition, r.start) for r in claimed)
    assert stats.sent == {"log": 3000 - len(written)} and stats.in_doubt == {}


def test_sms_without_lookup_crash_mid_run_leaves_that_run_in_doubt(kafka_topics, ledger, settings, monkeypatch,
                                                                   unique):
    with SmsProvider() as sms:
        monkeypatch.setenv("ALDEBARAN_CHANNELS", "sms")
        monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_SMS", json.dumps(
            {"conn_type": "sms", "host": sms.url, "login": sms.account_sid, "password": sms.auth_token,
             "extra": {"from": "+15550001111", "to": "+15552223333", "lookup": False}}))
        alerts = [make_alert(f"sms-{i}") for i in range(60)]
        publish(kafka_topics, alerts)
        group = f"g-{unique}"

        crash_part_way(settings, group, sent=5)
        claimed = [r for r in runs(ledger, "sms", kafka_topics.alerts_topic) if r.state == CLAIMED]
        assert 1 <= len(claimed) <= 2 and all(len(r.entries) <= 16 for r in claimed)  # runs of one send window
        pending = sorted(e[1] for r in claimed for e in r.entries)
        texted_before = len(sms.messages)

        stats = Dispatcher(ledger, configured_channels(), kafka=kafka_topics, group=group, settings=settings).run_once(
            idle_timeout=3.0)
        assert sorted(ledger.indexed("in_doubt", "sms")) == pending  # exactly the claimed runs' pending alerts
        for alert_id in pending:  # each findable by its id, for an operator
            record, _ = ledger.get("sms", alert_id)
            assert record.state == IN_DOUBT and "adopted" in record.error
        assert set(sms.sends.values()) == {1}  # no text twice
        assert stats.sent == {"sms": 60 - len(pending)} and stats.in_doubt == {"sms": len(pending)}
        assert len(sms.messages) == texted_before + 60 - len(pending)  # every alert not in doubt was texted
        states = [e[2] for r in runs(ledger, "sms", kafka_topics.alerts_topic) for e in r.entries]
        assert states.count("D") == 60 - len(pending) and states.count("U") == len(pending)
