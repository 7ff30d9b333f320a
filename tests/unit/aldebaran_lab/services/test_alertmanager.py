"""When `make up` starts the local Alertmanager (aldebaran_lab.services.alertmanager.wanted): only when a
configured channel points at this machine."""

from __future__ import annotations

import json


def test_make_up_starts_alertmanager_only_when_a_channel_points_at_this_machine():
    from aldebaran_lab.services.alertmanager import wanted

    def env(host: str, names: str = "log,am") -> dict:
        return {"ALDEBARAN_CHANNELS": names,
                "AIRFLOW_CONN_ALDEBARAN_AM": json.dumps({"conn_type": "alertmanager", "host": host})}

    assert wanted(env("http://127.0.0.1:9093")) and wanted(env("http://localhost:9093"))
    assert not wanted(env("https://alertmanager.example.com"))
    assert not wanted(env("http://127.0.0.1:9093", names="log"))  # defined, but not a configured channel
    assert not wanted({"ALDEBARAN_CHANNELS": "Not A Name"})  # `make up` goes on; the dispatchers will say why
