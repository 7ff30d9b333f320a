"""The real services `make test` started: healthy, provisioned, and the object store's conditional writes."""

from __future__ import annotations

import json
import urllib.request

import pytest

from aldebaran.exceptions import AlreadyExists, PreconditionFailed
from aldebaran.kafka import admin as kadmin
from aldebaran.settings import KafkaSettings, load
from aldebaran_lab import services


def test_core_services_running_and_healthy(services_up):
    rows = {s.name: s for s in services.status(services.CORE)}
    assert set(rows) == {"minio", "kafka", "airflow"}
    for s in rows.values():
        assert s.running and s.healthy and s.pid, s
        assert s.address.startswith("127.0.0.1:"), f"{s.name} must bind to loopback, got {s.address}"


def test_platform_topics_exist_with_configured_partitions(services_up):
    settings = load(KafkaSettings)
    for topic in settings.topics():
        assert kadmin.partition_count(settings, topic) == settings.partitions


def test_bucket_exists(store):
    assert store.bucket_exists()


def test_airflow_health_reports_every_component(services_up):
    with urllib.request.urlopen("http://127.0.0.1:8080/api/v2/monitor/health", timeout=5) as resp:
        health = json.loads(resp.read())
    for part in ("metadatabase", "scheduler", "dag_processor"):
        assert health[part]["status"] == "healthy", health


def test_airflow_api_requires_login(services_up):
    req = urllib.request.Request("http://127.0.0.1:8080/api/v2/dags")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code in (401, 403)


def test_conditional_create_of_the_same_key_twice_yields_one_object(store, s3_prefix):
    key = f"{s3_prefix}/claim.json"
    etag = store.create(key, b'{"owner": "first"}')
    with pytest.raises(AlreadyExists):
        store.create(key, b'{"owner": "second"}')
    objects = list(store.list(s3_prefix + "/"))
    assert [o["Key"] for o in objects] == [key]
    got = store.get(key)
    assert got.json() == {"owner": "first"} and got.etag == etag


def test_conditional_replace_with_a_stale_etag_fails(store, s3_prefix):
    key = f"{s3_prefix}/record.json"
    first = store.create(key, b"v1")
    second = store.replace(key, b"v2", first)
    with pytest.raises(PreconditionFailed):
        store.replace(key, b"v3", first)  # someone else already moved it on
    assert store.get(key).body == b"v2" and store.get(key).etag == second


def test_starting_a_running_service_again_is_a_no_op(services_up):
    minio = services.get("minio")
    pid = minio.pid()
    minio.start()
    assert minio.pid() == pid
