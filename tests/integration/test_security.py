"""Security properties as tests, against the running services: no configured secret in logs or error
messages, webhook payloads verified by HMAC at the receiver, services listening on the loopback address
only, ids that cannot climb out of their object-store prefix, no well-known default passwords.

The Airflow login requirement is covered where the page is tested: test_plugin.py (401/403 without or
with a forged token, browser redirect to /auth/login) and test_services.py::test_airflow_api_requires_login.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import requests

from aldebaran.runtime import paths
from aldebaran.audit.archive import Archive
from aldebaran.runtime.heartbeat import AUDITOR, key as heartbeat_key
from aldebaran.audit.findings import alert_id
from aldebaran.delivery.channels import alert_body, signature, signed_headers
from aldebaran.delivery.ledger import Ledger
from aldebaran.runtime.envfile import GENERATED
from aldebaran.exceptions import ConfigError
from aldebaran.storage.store import safe_segment
from aldebaran_capacity.receivers import WebhookReceiver
from aldebaran_lab import services

NOT_SECRET = {"ALDEBARAN_S3_ACCESS_KEY"}  # an identifier (like a user name), not a credential
WELL_KNOWN = {"minioadmin", "admin", "airflow", "password", "changeme", "secret", "root", "guest", "test",
              "123456", "letmein", "minio123", "miniostorage"}
HOSTILE_IDS = ["../escape", "..", "a/../../b", "/abs", "a/b", "a\\b", "a\x00b", "a\nb", "a\rb", "\x7f", "a\x1bb",
               "", ".hidden", "-opt", "x" * 300, "ä"]


def configured_secrets() -> dict[str, str]:
    """The credentials this platform was configured with (.env / environment), by variable name."""
    return {k: os.environ[k] for k in GENERATED if k not in NOT_SECRET and os.environ.get(k)}


def _scan(path: Path, values: dict[str, str]) -> list[str]:
    with open(path, "rb") as fh:
        data = fh.read(64 * 1024 * 1024).decode("utf-8", "replace")
    return [f"{name} in {path}" for name, value in values.items() if value in data]


def test_no_configured_secret_in_service_or_task_logs(services_up):
    values = configured_secrets()
    assert {"ALDEBARAN_S3_SECRET_KEY", "ALDEBARAN_AIRFLOW_ADMIN_PASSWORD"} <= values.keys()
    logs = [p for p in (paths.run_dir() / "logs").glob("*.log")]
    logs += [p for p in (paths.run_dir() / "airflow" / "logs").rglob("*") if p.is_file()]
    logs += [p for p in (paths.run_dir() / "chaos").rglob("*.log")]
    assert any(p.name == "minio.log" for p in logs) and any(p.name == "airflow.log" for p in logs)
    leaks = [hit for p in logs for hit in _scan(p, values)]
    assert leaks == []


def test_error_messages_do_not_show_credentials(services_up, tmp_path):
    wrong = "wrong-" + secrets.token_urlsafe(20)
    env = dict(os.environ, ALDEBARAN_S3_SECRET_KEY=wrong, ALDEBARAN_AUDIT_QUERY_NAME="security-probe")
    # Rejected by MinIO (signature mismatch): the failure is reported, the secret is not.
    proc = subprocess.run([str(paths.venv_bin("aldebaran")), "-v", "auditor", "status"], env=env,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and ("SignatureDoesNotMatch" in out or "signature" in out.lower())
    assert wrong not in out and os.environ["ALDEBARAN_S3_SECRET_KEY"] not in out
    # An invalid setting next to a secret: the setting is named, the secret is not shown.
    env = dict(os.environ, ALDEBARAN_S3_BUCKET="Not_A_Bucket", ALDEBARAN_S3_SECRET_KEY=wrong)
    proc = subprocess.run([str(paths.venv_bin("aldebaran")), "auditor", "status"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "ALDEBARAN_S3_BUCKET" in proc.stderr and wrong not in proc.stderr


def test_webhook_receiver_verifies_the_hmac_signature():
    secret = secrets.token_urlsafe(24)
    from aldebaran.model import Alert

    alert = {"alert_id": alert_id("OVERFILL", "sec-1"), "kind": "OVERFILL", "order_id": "sec-1"}
    body = alert_body(Alert.from_dict(alert))
    with WebhookReceiver(secret) as receiver:
        def post(data: bytes, sig: str | None, stamp: str) -> int:
            headers = {"Idempotency-Key": alert["alert_id"], "Content-Type": "application/json",
                       "X-Aldebaran-Timestamp": stamp}
            if sig is not None:
                headers["X-Aldebaran-Signature"] = sig
            return requests.post(receiver.url + "/alerts", data=data, headers=headers, timeout=5).status_code

        now = str(int(time.time()))
        tampered = body.replace(b"sec-1", b"sec-2")
        assert post(body, None, now) == 401  # unsigned
        assert post(tampered, signature(body, secret, now), now) == 401  # body changed after signing
        assert post(body, signature(body, "another-" + secret, now), now) == 401  # signed with another key
        assert post(body, signature(body, secret, now).upper(), now) == 401
        assert post(body, signature(body, secret, now), str(int(now) + 1)) == 401  # timestamp changed after signing
        assert receiver.rejected_signatures == 5 and not receiver.accepted
        old = signed_headers(body, secret, now=time.time() - 3600)  # signed right, an hour ago: a replay
        assert post(body, old["X-Aldebaran-Signature"], old["X-Aldebaran-Timestamp"]) == 401
        assert receiver.rejected_stale == 1 and not receiver.accepted
        assert post(body, signature(body, secret, now), now) == 201
        assert list(receiver.accepted) == [alert["alert_id"]]


def _listeners(pid: int) -> list[tuple[str, int, str]]:
    """(address, port, process title) of every listening TCP socket of a service's process group."""
    out = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) != pid:
                continue
            title = " ".join(proc.cmdline())[:60]
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    out.append((conn.laddr.ip, conn.laddr.port, title))
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            continue
    return out


def test_services_listen_on_the_loopback_address_only(services_up):
    loopback = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
    exposed = []
    for name in services.CORE:
        svc = services.get(name)
        listeners = _listeners(svc.pid())
        assert listeners, f"{name}: no listening socket found for pid {svc.pid()}"
        exposed += [(name, ip, port, title) for ip, port, title in listeners if ip not in loopback]
    # Airflow 3.3's task-log servers (`airflow serve-logs`, ports 8793/8794, started by the scheduler and
    # the triggerer) bind every interface: the host is hard-coded (airflow/utils/serve_logs/core.py,
    # host=""), with no setting to change it. They answer only requests signed with the generated JWT
    # secret; that much is checked here. Anything else listening beyond the loopback is a failure.
    log_servers = [e for e in exposed if e[0] == "airflow" and ("serve-logs" in e[3] or e[2] in (8793, 8794))]
    assert [e for e in exposed if e not in log_servers] == []
    for _, _, port, _ in log_servers:
        resp = requests.get(f"http://127.0.0.1:{port}/log/dag_id=x/run_id=y/task_id=z/attempt=1.log", timeout=5)
        assert resp.status_code == 403


def test_hostile_ids_cannot_escape_their_object_store_prefix(store, s3_prefix):
    from types import SimpleNamespace

    from aldebaran.model import Alert

    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")
    for hostile in HOSTILE_IDS:
        with pytest.raises(ValueError):
            safe_segment(hostile)
        with pytest.raises(ValueError):
            # An Alert built past its own validation: the ledger refuses the id too.
            ledger.attempt(SimpleNamespace(name="webhook", can_dedupe=True), Alert(hostile, "OVERFILL", "x"), "me")
        with pytest.raises(ValueError):
            ledger.key(hostile, "abc")  # a hostile channel name too
        with pytest.raises(ValueError):
            Archive(store, f"{s3_prefix}/archive", hostile)
        with pytest.raises(ValueError):
            heartbeat_key(AUDITOR, hostile)
        # Alert ids derive from hostile order ids by hashing: always one safe segment.
        assert safe_segment(alert_id("OVERFILL", hostile)) == alert_id("OVERFILL", hostile)
    assert list(store.list(f"{s3_prefix}/")) == []  # nothing was written anywhere under the prefix
    # Nothing at the bucket's top under the names the ids aim at ("escape", "b"); other top-level
    # prefixes that merely start with those letters (a benchmark's "bench/...") are not theirs.
    escaped = [o["Key"] for name in ("escape", "b") for o in store.list(name)
               if o["Key"] == name or o["Key"].startswith((f"{name}/", f"{name}."))]
    assert escaped == []


def test_no_well_known_default_passwords(services_up, monkeypatch):
    import boto3
    from botocore.exceptions import ClientError

    values = configured_secrets()
    for name, value in values.items():
        assert value.lower() not in WELL_KNOWN and len(value) >= 16, name
    # The running MinIO does not take its well-known root credentials.
    client = boto3.client("s3", endpoint_url="http://127.0.0.1:9000", region_name="us-east-1",
                          aws_access_key_id="minioadmin", aws_secret_access_key="minioadmin")
    with pytest.raises(ClientError) as exc:
        client.list_buckets()
    assert exc.value.response["Error"]["Code"] in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied")
    # The running Airflow does not take admin/admin or airflow/airflow.
    for user, password in (("admin", "admin"), ("airflow", "airflow"), ("admin", "")):
        resp = requests.post("http://127.0.0.1:8080/auth/token", json={"username": user, "password": password},
                             timeout=10)
        assert resp.status_code in (400, 401, 403, 422) and "access_token" not in resp.text, (user, resp.status_code)
    # And neither starts without generated credentials: no fallback to a default.
    from aldebaran_lab.services.airflow import Airflow
    from aldebaran_lab.services.minio import MinIO

    monkeypatch.delenv("ALDEBARAN_S3_SECRET_KEY")
    with pytest.raises(ConfigError, match="ALDEBARAN_S3_SECRET_KEY"):
        MinIO().environment()
    monkeypatch.delenv("ALDEBARAN_AIRFLOW_ADMIN_PASSWORD")
    with pytest.raises(ConfigError, match="ALDEBARAN_AIRFLOW_ADMIN_PASSWORD"):
        Airflow().environment()


def test_generated_env_file_is_private():
    env = paths.env_file()
    assert env.exists()
    assert env.stat().st_mode & 0o077 == 0  # readable by its owner only
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(env)], cwd=paths.ROOT,
                             capture_output=True, text=True)
    assert tracked.returncode != 0  # never committed
