"""The object store through the Airflow AWS connection ``aldebaran_s3`` (aldebaran.storage.s3access), on the real
MinIO and a real Airflow (the DAG tests' metadata DB, connections created through its REST API):

- inside a task (dispatch_supervisor with ``dag.test()``) the storage layer reads and writes MinIO through
  the connection Airflow resolves, while ALDEBARAN_S3_* point at nothing; the task hands the connection
  to the streaming dispatcher it starts, which reads only its environment and writes its heartbeat there;
- a wrong secret fails the task with an error naming the connection, never the secret;
- outside Airflow, ``AIRFLOW_CONN_ALDEBARAN_S3`` with a session token (boto3, and Spark's s3a under a
  real session) and with a role assumed through MinIO's STS (boto3).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow_home import airflow_db, dagbag  # noqa: F401  (fixtures; AIRFLOW_HOME before airflow loads)
from tests.conftest import assert_eventually
from tests.integration.dags.test_alert_dispatch_airflow_connection import airflow_api, api_objects  # noqa: F401
from tests.integration.dags.test_dispatch_supervisor import dispatcher_env  # noqa: F401  (fixture)

from aldebaran.runtime import paths  # noqa: E402
from aldebaran.runtime import spark as sparkmod  # noqa: E402
from aldebaran.runtime import heartbeat  # noqa: E402
from aldebaran.exceptions import ObjectStoreError  # noqa: E402
from aldebaran.platform import dispatch_supervisor as ds  # noqa: E402
from aldebaran.platform import processes  # noqa: E402
from aldebaran.settings import ObjectStoreSettings, load  # noqa: E402
from aldebaran.storage.store import S3Store  # noqa: E402

pytestmark = pytest.mark.integration

CONN_ID = "aldebaran_s3"
CONN_VAR = "AIRFLOW_CONN_ALDEBARAN_S3"
ROLE = "arn:aws:iam::123456789012:role/aldebaran-test"


@pytest.fixture
def minio(services_up, store, monkeypatch):
    """MinIO's real settings; then ALDEBARAN_S3_* are pointed at nothing, so only a connection reaches it
    (the `store` fixture, made first, keeps the real settings for the checks and the teardowns)."""
    real = load(ObjectStoreSettings)
    monkeypatch.delenv(CONN_VAR, raising=False)
    monkeypatch.delenv("ALDEBARAN_S3_CONNECTION", raising=False)
    monkeypatch.setenv("ALDEBARAN_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ALDEBARAN_S3_SECRET_KEY", "not-the-secret-" + "z" * 20)
    return real


def aws_connection(real: ObjectStoreSettings, password: str | None = None, **extra) -> dict:
    return {"conn_type": "aws", "login": real.access_key.get_secret_value(),
            "password": password or real.secret_key.get_secret_value(),
            "extra": {"endpoint_url": real.endpoint(), "region_name": real.region, **extra}}


def create_through_the_api(api_objects, conn: dict) -> None:
    api_objects("connections", {"connection_id": CONN_ID, **conn, "extra": json.dumps(conn["extra"])})


def test_a_task_reaches_minio_through_the_connection_and_hands_it_to_the_dispatcher(
        airflow_db, dagbag, dispatcher_env, api_objects, minio, store):
    """dispatch_supervisor's task keeps its state in MinIO through the connection Airflow resolves, and the
    streaming dispatcher it starts outside Airflow writes its heartbeat there with the connection handed on:
    ALDEBARAN_S3_* reach nothing, in the task and in the dispatcher alike."""
    name, _ = dispatcher_env
    create_through_the_api(api_objects, aws_connection(minio))

    run = dagbag.dags["dispatch_supervisor"].test()

    assert run.state == "success", run.state
    cfg = ds.settings()
    state, _ = processes.load_state(store, processes.state_key(cfg, name))
    assert state["last_assessment"]["action"] == "restart" and state.get("launch"), state
    assert_eventually(lambda: heartbeat.read(store, heartbeat.DISPATCHER, name) is not None, timeout=60,
                      message="the dispatcher writes its heartbeat through the connection it was handed")


def test_a_wrong_secret_fails_the_task_naming_the_connection(airflow_db, dagbag, dispatcher_env, api_objects,
                                                             minio, unique, capfd, without_retries):
    wrong = "wrong-secret-" + unique * 3
    create_through_the_api(api_objects, aws_connection(minio, password=wrong))

    run = without_retries(dagbag.dags["dispatch_supervisor"]).test()

    assert run.state == "failed", run.state
    output = "".join(capfd.readouterr())  # the task log: Airflow writes it to the process's stdout
    assert "SignatureDoesNotMatch: credentials refused; they came from Airflow connection aldebaran_s3" in output
    assert wrong not in output


# --- outside Airflow: AIRFLOW_CONN_ALDEBARAN_S3 ----------------------------------------------------------
def _env_access(real: ObjectStoreSettings):
    from aldebaran.storage.s3access import from_settings

    return from_settings(real)


def _temporary_credentials(real: ObjectStoreSettings) -> dict:
    import boto3

    sts = boto3.client("sts", endpoint_url=real.endpoint(), region_name=real.region,
                       aws_access_key_id=real.access_key.get_secret_value(),
                       aws_secret_access_key=real.secret_key.get_secret_value())
    return sts.assume_role(RoleArn=ROLE, RoleSessionName="aldebaran-test-token")["Credentials"]


def test_outside_airflow_a_session_token_connection_reaches_minio(minio, monkeypatch, unique):
    creds = _temporary_credentials(minio)
    monkeypatch.setenv(CONN_VAR, json.dumps({
        "conn_type": "aws", "login": creds["AccessKeyId"], "password": creds["SecretAccessKey"],
        "extra": {"endpoint_url": minio.endpoint(), "aws_session_token": creds["SessionToken"]}}))
    store = S3Store()
    assert (store.access.source, store.access.credentials) == (CONN_VAR, "session")
    key = f"tests/{unique}/s3-connection/token.txt"
    try:
        store.put(key, b"with a session token")
        assert store.get(key).body == b"with a session token"
    finally:
        store.delete(key)


def test_outside_airflow_a_role_is_assumed_through_sts(minio, monkeypatch, unique):
    monkeypatch.setenv(CONN_VAR, json.dumps(aws_connection(
        minio, role_arn=ROLE, assume_role_kwargs={"RoleSessionName": "aldebaran-role-test"},
        service_config={"sts": {"endpoint_url": minio.endpoint()}})))
    store = S3Store()
    assert store.access.credentials == "role"
    key = f"tests/{unique}/s3-connection/role.txt"
    try:
        store.put(key, b"as the role")
        assert store.get(key).body == b"as the role"
        used = store.client._request_signer._credentials
        assert used.method == "assume-role" and used.access_key != minio.access_key.get_secret_value()
    finally:
        store.delete(key)


def test_outside_airflow_a_wrong_secret_names_the_env_var(minio, monkeypatch, unique):
    wrong = "wrong-secret-" + unique * 3
    monkeypatch.setenv(CONN_VAR, json.dumps(aws_connection(minio, password=wrong)))
    with pytest.raises(ObjectStoreError) as err:
        S3Store().put(f"tests/{unique}/never.txt", b"x")
    assert f"credentials refused; they came from {CONN_VAR} ({minio.endpoint()}, keys credentials)" in str(err.value)
    assert wrong not in str(err.value)


SPARK_APP = """
import sys
from aldebaran.runtime import spark as sparkmod
spark = sparkmod.session("s3a-connection-test", master="local[1]", s3a=True)
try:
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    print("provider", conf.get("fs.s3a.aws.credentials.provider"))
    spark.range(5).write.mode("overwrite").parquet(sys.argv[1])
    print("count", spark.read.parquet(sys.argv[1]).count())
finally:
    spark.stop()
"""


def test_spark_s3a_uses_the_connections_session_token(minio, unique):
    """Spark's s3a settings come from the same connection as boto3's: under a real session (the driver
    outside Airflow, ALDEBARAN_S3_* reaching nothing), temporary credentials from MinIO's STS go through
    TemporaryAWSCredentialsProvider to write and read a path. (A role through s3a needs an https STS on
    port 443, which the local MinIO is not: tests/unit/aldebaran/storage/test_s3access.py checks that it fails, named.)"""
    creds = _temporary_credentials(minio)
    conn = {"conn_type": "aws", "login": creds["AccessKeyId"], "password": creds["SecretAccessKey"],
            "extra": {"endpoint_url": minio.endpoint(), "aws_session_token": creds["SessionToken"]}}
    env = {**sparkmod.spark_env(), CONN_VAR: json.dumps(conn), "PYTHONPATH": str(paths.ROOT / "include")}
    path = f"s3a://{minio.bucket}/tests/{unique}/s3a-token"
    try:
        proc = subprocess.run([sys.executable, "-c", SPARK_APP, path], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        assert "provider org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider" in proc.stdout
        assert "count 5" in proc.stdout
    finally:
        S3Store(minio, access=_env_access(minio)).delete_prefix(f"tests/{unique}/")
