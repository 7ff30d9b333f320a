"""The crash the provider channels' integration tests share: a dispatcher SIGKILLed between a run's send
and its record (tests/integration/fault_dispatch.py, a failure injection), against real Kafka and MinIO,
then a new dispatcher of the same group that takes the run over.

A channel that deduplicates re-sends the adopted run with the same keys and the provider drops the
repeats; one that cannot (push) leaves the run's alerts IN_DOUBT and sends nothing again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aldebaran.delivery.channels import configured_channels
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import RetryPolicy
from aldebaran.delivery.runs import CLAIMED
from aldebaran.delivery.settings import DeliverySettings

HERE = Path(__file__).resolve().parent


def delivery_settings(s3_prefix: str) -> DeliverySettings:
    return DeliverySettings(prefix=f"{s3_prefix}/deliveries", lease_seconds=3, max_attempts=3,
                            backoff_base_seconds=0.3, backoff_max_seconds=1.0, sweep_seconds=0.5,
                            lookup_grace_seconds=0.5)


def ledger_for(store, settings: DeliverySettings) -> Ledger:
    return Ledger(store, prefix=settings.prefix, lease_seconds=settings.lease_seconds,
                  policy=RetryPolicy(settings.max_attempts, settings.backoff_base_seconds, settings.backoff_max_seconds))


def configure(monkeypatch, name: str, connection: dict) -> None:
    """Channel `name` as an operator defines it: ALDEBARAN_CHANNELS and its Airflow connection."""
    monkeypatch.setenv("ALDEBARAN_CHANNELS", name)
    monkeypatch.setenv(f"AIRFLOW_CONN_ALDEBARAN_{name.upper()}", json.dumps(connection))


def runs(ledger: Ledger, channel: str, topic: str) -> list:
    return [r for p in (0, 1) for r in ledger.runs(channel, topic, p)]


def crash_then_take_over(ledger: Ledger, settings: DeliverySettings, kafka, channel: str, group: str):
    """SIGKILL a dispatcher right after its first sends, check it left its runs claimed and unrecorded,
    then run a new dispatcher of the same group to the end; (the runs the dead one claimed, its stats)."""
    proc = subprocess.run([sys.executable, str(HERE / "fault_dispatch.py"), settings.prefix, group, "3"],
                          env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]  # SIGKILLed between send and record
    claimed = [r for r in runs(ledger, channel, kafka.alerts_topic) if r.state == CLAIMED]
    assert claimed, "the killed dispatcher left no claimed run"
    stats = Dispatcher(ledger, configured_channels(), kafka=kafka, group=group, settings=settings).run_once(
        idle_timeout=3.0)
    return claimed, stats
