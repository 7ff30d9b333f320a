"""The alert watcher's sweep (aldebaran.delivery.settings.WatcherSettings): what wakes dispatch when the watcher
is down (docs/reliability.md § Triggerer and the asset watcher). The watcher's consumer settings in the local
Airflow: tests/unit/aldebaran_lab/services/test_airflow.py; kill-triggerer's verdict:
tests/unit/aldebaran_lab/chaos/test_watcher.py."""

from __future__ import annotations

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
