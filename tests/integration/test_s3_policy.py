"""The platform's least-privilege S3 policy (aldebaran.storage.s3access.platform_policy, template docs/s3-policy.json)
on the real MinIO: credentials from MinIO's STS whose session policy is that policy (the effective rights are
the policy's alone) carry every kind of write the platform makes — conditional creates and replaces, the ledger's
runs, the checkpoint lease, heartbeats, the quarantine's copies, listings, and Spark's s3a checkpoint files
through the platform's checkpoint file manager — and are refused what the platform never needs: another
bucket, creating or deleting a bucket."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from aldebaran.runtime import heartbeat
from aldebaran.storage import quarantine
from aldebaran.runtime import lease as leases
from aldebaran.runtime import paths
from aldebaran.runtime import spark as sparkmod
from aldebaran.delivery import handles
from aldebaran.delivery.channels.base import Outcome
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.runs import RECORDED
from aldebaran.model import Alert
from aldebaran.storage.s3access import platform_policy
from aldebaran.settings import ObjectStoreSettings, load

CONN_VAR = "AIRFLOW_CONN_ALDEBARAN_S3"
ROLE = "arn:aws:iam::123456789012:role/aldebaran-platform"
TEMPLATE = Path(__file__).parents[2] / "docs" / "s3-policy.json"
APP = Path(__file__).with_name("checkpoint_manager_app.py")


def _sts_credentials(real: ObjectStoreSettings, policy: dict) -> dict:
    import boto3

    sts = boto3.client("sts", endpoint_url=real.endpoint(), region_name=real.region,
                       aws_access_key_id=real.access_key.get_secret_value(),
                       aws_secret_access_key=real.secret_key.get_secret_value())
    return sts.assume_role(RoleArn=ROLE, RoleSessionName="aldebaran-policy-test", Policy=json.dumps(policy),
                           DurationSeconds=900)["Credentials"]


@pytest.fixture
def restricted(services_up, monkeypatch):
    """The platform's connection, as a deployment would give it: the policy's rights only."""
    real = load(ObjectStoreSettings)
    creds = _sts_credentials(real, platform_policy(real.bucket))
    conn = {"conn_type": "aws", "login": creds["AccessKeyId"], "password": creds["SecretAccessKey"],
            "extra": {"endpoint_url": real.endpoint(), "region_name": real.region,
                      "aws_session_token": creds["SessionToken"]}}
    monkeypatch.setenv(CONN_VAR, json.dumps(conn))
    return SimpleNamespace(real=real, conn=conn)


def test_the_template_is_the_policy_the_code_states():
    assert json.loads(TEMPLATE.read_text()) == platform_policy("YOUR-BUCKET")


def test_the_platform_works_within_the_policy_and_is_refused_outside_it(restricted, unique):
    from botocore.exceptions import ClientError

    from aldebaran.storage.store import S3Store

    store = S3Store()
    assert store.access.credentials == "session"
    base = f"tests/{unique}/policy"
    try:
        assert store.ensure_bucket() is False  # it exists: looked at (ListBucket), not created
        # Conditional writes: a create (If-None-Match) and a replace (If-Match).
        etag = store.create(f"{base}/obj.json", b'{"v": 1}')
        store.replace(f"{base}/obj.json", b'{"v": 2}', etag)
        assert json.loads(store.get(f"{base}/obj.json").body) == {"v": 2}
        assert [o["Key"] for o in store.list(f"{base}/")] == [f"{base}/obj.json"]
        # The ledger's group-committed run: claimed, then recorded.
        ledger = Ledger(store, prefix=f"{base}/deliveries", lease_seconds=30)
        alert = Alert.from_dict({"alert_id": "a" * 32, "kind": "OVERFILL", "order_id": "1"})
        channel = SimpleNamespace(name="webhook", can_dedupe=True)
        handle = ledger.open_run(channel, "alerts", 0, 1, "owner", [(0, None, alert, None)], 16)
        assert handle.status == handles.NEW
        handle.report({0: Outcome.delivered(alert.alert_id, {})})
        assert ledger.get_run("webhook", "alerts", 0, 0)[0].state == RECORDED
        # The checkpoint lease, a heartbeat, a quarantined copy.
        lease = leases.acquire(store, f"s3a://{restricted.real.bucket}/{base}/ck", "policy", ttl_seconds=30)
        lease.renew()
        lease.release()
        assert heartbeat.publish(store, heartbeat.DISPATCHER, f"policy-{unique}", {"status": "running"})
        assert quarantine.quarantine(store, f"{base}/obj.json", "test", "test_s3_policy",
                                     prefix=f"{base}/quarantine/")
        # Outside the policy: another bucket, and the buckets themselves.
        other = f"{restricted.real.bucket}-not-ours"
        for call in (lambda: store.client.put_object(Bucket=other, Key="x", Body=b"x"),
                     lambda: store.client.create_bucket(Bucket=other),
                     lambda: store.client.delete_bucket(Bucket=restricted.real.bucket)):
            with pytest.raises(ClientError) as refused:
                call()
            assert refused.value.response["Error"]["Code"] == "AccessDenied"
    finally:
        store.delete_prefix(f"{base}/")
        store.delete(heartbeat.key(heartbeat.DISPATCHER, f"policy-{unique}"))
        store.delete(leases.lease_key(f"s3a://{restricted.real.bucket}/{base}/ck"))


def test_spark_checkpoint_files_are_written_within_the_policy(restricted, unique, tmp_path):
    """s3a under the policy: the platform's checkpoint file manager's probes, conditional creates and a
    cancelled (aborted) write, as the auditor makes them every batch."""
    env = {**sparkmod.spark_env(), CONN_VAR: json.dumps(restricted.conn),
           "PYTHONPATH": str(paths.ROOT / "include")}
    out = tmp_path / "seen.json"
    base = f"s3a://{restricted.real.bucket}/tests/{unique}/policy-ck"
    done = subprocess.run([sys.executable, str(APP), base, str(out)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["second_write"] == "org.apache.hadoop.fs.FileAlreadyExistsException"
    assert (seen["content_after_overwrite"], seen["cancelled_exists"]) == ("v3", False)
