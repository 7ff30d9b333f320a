"""What makes the alert watcher resume soon after its triggerer is killed, and how kill-triggerer tells a run
the watcher woke from a sweep (docs/reliability.md § Triggerer and the asset watcher)."""

from __future__ import annotations

import json

import pytest

from aldebaran.exceptions import ConfigError
from aldebaran.settings import load


def test_the_sweep_cron_defaults_to_every_five_minutes_and_a_bad_one_names_its_setting(monkeypatch):
    from aldebaran.delivery.settings import WatcherSettings

    monkeypatch.delenv("ALDEBARAN_DISPATCH_SWEEP_CRON", raising=False)
    assert load(WatcherSettings).sweep_cron == "*/5 * * * *"
    monkeypatch.setenv("ALDEBARAN_DISPATCH_SWEEP_CRON", "0 0 1 1 *")
    assert load(WatcherSettings).sweep_cron == "0 0 1 1 *"
    monkeypatch.setenv("ALDEBARAN_DISPATCH_SWEEP_CRON", "@hourly")
    assert load(WatcherSettings).sweep_cron == "@hourly"
    for bad in ("every 5 minutes", "*/5 * * *", ""):
        monkeypatch.setenv("ALDEBARAN_DISPATCH_SWEEP_CRON", bad)
        with pytest.raises(ConfigError, match="ALDEBARAN_DISPATCH_SWEEP_CRON"):
            load(WatcherSettings)


def test_the_watchers_consumer_gives_a_killed_triggerers_partitions_up_within_ten_seconds(monkeypatch):
    from aldebaran.settings import KafkaSettings
    from aldebaran_lab.services.airflow import connections_env

    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_ALERTS_WATCHER", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_ALDEBARAN_KAFKA", raising=False)
    extra = json.loads(connections_env(KafkaSettings(), spark_master="local[1]")["AIRFLOW_CONN_KAFKA_ALERTS_WATCHER"])[
        "extra"]
    # librdkafka's default session is 45 s; the broker's group.min.session.timeout.ms is 6 s.
    assert 6000 <= extra["session.timeout.ms"] <= 10000
    assert extra["heartbeat.interval.ms"] * 3 <= extra["session.timeout.ms"]
    assert extra["group.id"] == "aldebaran-alert-watcher" and extra["enable.auto.commit"] is False


def test_every_airflow_the_platform_writes_moves_a_dead_triggerers_watcher_after_15_seconds(tmp_path):
    import yaml

    from aldebaran import paths
    from aldebaran_lab.services.airflow import TRIGGERER_HEALTH_CHECK_THRESHOLD

    assert TRIGGERER_HEALTH_CHECK_THRESHOLD == "15"
    compose = yaml.safe_load((paths.ROOT / "docker-compose.yml").read_text())
    envs = [svc.get("environment") or {} for name, svc in compose["services"].items() if name.startswith("airflow")]
    assert envs and all(e.get("AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD") == "15" for e in envs)
    watcher = json.loads(envs[0]["AIRFLOW_CONN_KAFKA_ALERTS_WATCHER"])["extra"]
    assert (watcher["session.timeout.ms"], watcher["heartbeat.interval.ms"]) == (10000, 2000)
    assert '"session.timeout.ms": 10000' in (paths.ROOT / ".env.example").read_text()


def test_an_idle_kill_passes_only_when_runs_the_watcher_woke_delivered_its_wave():
    from aldebaran_lab.chaos.watcher import watcher_failures

    woken = [("asset_triggered__1", "asset_triggered"), ("asset_triggered__2", "asset_triggered")]
    assert watcher_failures(1, "idle", woken) == []
    assert watcher_failures(1, "idle", []) != []
    assert watcher_failures(1, "idle", [("scheduled__1", "scheduled")]) != []
    # a sweep beside the watcher's run: which of them delivered cannot be told, so it does not pass
    assert watcher_failures(1, "idle", [*woken, ("scheduled__1", "scheduled")]) != []
    # a busy kill's wave is delivered by the run in flight: no new run needed
    assert watcher_failures(2, "busy", []) == []
