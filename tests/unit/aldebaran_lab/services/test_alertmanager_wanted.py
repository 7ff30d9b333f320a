"""When the local Alertmanager is wanted (`make up` starts it, `make setup` builds it): a channel or the
on-call target of kind alertmanager on this machine, and nothing else."""

from __future__ import annotations

import json

from aldebaran_lab.services.alertmanager import wanted

LOCAL_AM = json.dumps({"conn_type": "alertmanager", "host": "http://127.0.0.1:9093"})
REMOTE_AM = json.dumps({"conn_type": "alertmanager", "host": "https://am.example.com"})


def test_only_the_log_channel_wants_nothing():
    assert not wanted({"ALDEBARAN_CHANNELS": "log"})


def test_a_local_alertmanager_channel_wants_it():
    assert wanted({"ALDEBARAN_CHANNELS": "log,am", "AIRFLOW_CONN_ALDEBARAN_AM": LOCAL_AM})


def test_a_remote_alertmanager_channel_does_not():
    assert not wanted({"ALDEBARAN_CHANNELS": "am", "AIRFLOW_CONN_ALDEBARAN_AM": REMOTE_AM})


def test_the_on_call_target_on_the_local_alertmanager_wants_it():
    env = {"ALDEBARAN_CHANNELS": "log", "ALDEBARAN_ONCALL_CONNECTION": "pager", "AIRFLOW_CONN_PAGER": LOCAL_AM}
    assert wanted(env)
    assert not wanted({**env, "AIRFLOW_CONN_PAGER": REMOTE_AM})
    assert not wanted({**env, "AIRFLOW_CONN_PAGER": json.dumps({"conn_type": "http", "host": "127.0.0.1"})})
