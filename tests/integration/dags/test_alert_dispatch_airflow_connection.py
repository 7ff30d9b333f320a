"""alert_dispatch takes its channels from Airflow, not only from the environment: a connection and the
`aldebaran_channels` Variable created through Airflow's REST API (POST /api/v2/connections and
/api/v2/variables, served in-process on the DAG tests' metadata DB) are what dag.test() dispatches to,
while the environment names a channel that has no connection at all. A bad connection created the same
way fails the run at its start, naming the connection and the field. A streaming dispatcher, which runs
outside Airflow, gets the same connection from dispatch_supervisor.

Real Kafka alerts; alert_dispatch's ledger in a local directory, the streaming dispatcher's in MinIO."""

from __future__ import annotations

import json

import pytest

from aldebaran.audit.findings import alert_id
from aldebaran.delivery.ledger import Ledger
from aldebaran.runtime import heartbeat
from aldebaran.kafka import io as kio
from aldebaran.storage.store import LocalStore
from tests.conftest import assert_eventually
from tests.integration.dags.test_dispatch_supervisor import dispatcher_env  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

CHANNEL = "api_log"


@pytest.fixture(scope="module")
def airflow_api(airflow_db):
    """Airflow's public REST API on the DAG tests' metadata DB. Every request is an admin's
    (simple auth manager, all admins): this test is about what dispatch does with what the API stores."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    with TestClient(create_app("core")) as client:
        yield client
    mp.undo()


@pytest.fixture
def api_objects(airflow_api):
    """Create connections / variables through the API; delete them afterwards (the DB is shared by the
    DAG tests, and a leftover `aldebaran_channels` would redirect their dispatch)."""
    made: list[str] = []

    def create(kind: str, body: dict) -> None:
        key = body.get("connection_id") or body["key"]
        airflow_api.delete(f"/api/v2/{kind}/{key}")  # a leftover of an interrupted run
        response = airflow_api.post(f"/api/v2/{kind}", json=body)
        assert response.status_code == 201, response.text
        made.append(f"/api/v2/{kind}/{key}")

    yield create
    for path in made:
        assert airflow_api.delete(path).status_code in (204, 404)


def _alert(order_id: str) -> dict:
    return {"alert_id": alert_id("OVERFILL", order_id), "kind": "OVERFILL", "order_id": order_id,
            "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2,
            "trigger_event_id": "3", "trigger_event_ts": 0, "detected_at": 0, "message": "dag test"}


@pytest.fixture
def dispatch_env(monkeypatch, tmp_path):
    """The environment names a channel with no connection: were it read, the run would fail."""
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "env_only")
    for name in ("AIRFLOW_CONN_ALDEBARAN_ENV_ONLY", f"AIRFLOW_CONN_ALDEBARAN_{CHANNEL.upper()}",
                 "AIRFLOW_VAR_ALDEBARAN_CHANNELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALDEBARAN_DELIVERY_STORE", (tmp_path / "ledger").as_uri())
    monkeypatch.setenv("ALDEBARAN_DELIVERY_IDLE_SECONDS", "2")
    return tmp_path


def test_dispatch_uses_a_connection_and_channel_list_created_through_the_api(
        airflow_db, dagbag, kafka_topics, api_objects, dispatch_env):
    alerts = [_alert(f"api-{i}") for i in range(4)]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(a["alert_id"], json.dumps(a)) for a in alerts])
    log_file = dispatch_env / "api-channel.jsonl"
    api_objects("connections", {"connection_id": f"aldebaran_{CHANNEL}", "conn_type": "log",
                                "extra": json.dumps({"path": str(log_file)})})
    api_objects("variables", {"key": "aldebaran_channels", "value": CHANNEL})

    run = dagbag.dags["alert_dispatch"].test()

    assert run.state == "success", run.state
    delivered = [json.loads(line)["alert"]["alert_id"] for line in log_file.read_text().splitlines()]
    assert sorted(delivered) == sorted(a["alert_id"] for a in alerts)
    states = Ledger(LocalStore(dispatch_env / "ledger"), prefix="deliveries").states(CHANNEL)
    assert states == {a["alert_id"]: "DELIVERED" for a in alerts}


def test_a_bad_connection_created_through_the_api_fails_the_run_naming_it(
        airflow_db, dagbag, kafka_topics, api_objects, dispatch_env, capfd, without_retries):
    # A webhook connection without its host: the channel list task fails before anything is sent.
    api_objects("connections", {"connection_id": "aldebaran_api_hook", "conn_type": "http", "password": "x" * 24})
    api_objects("variables", {"key": "aldebaran_channels", "value": "api_hook"})

    run = without_retries(dagbag.dags["alert_dispatch"]).test()

    assert run.state == "failed", run.state
    output = "".join(capfd.readouterr())  # the task log: Airflow writes it to the process's stdout
    assert "Airflow connection aldebaran_api_hook: field host is required" in output
    assert "x" * 24 not in output


def test_a_streaming_dispatcher_gets_the_connection_created_through_the_api(
        airflow_db, dagbag, dispatcher_env, kafka_topics, api_objects, monkeypatch, store):
    """dispatch_supervisor starts `aldebaran dispatch --follow` outside Airflow, where only the
    environment counts: it hands the dispatcher the connection Airflow resolved."""
    name, _ = dispatcher_env
    log_file = dispatcher_env[1].parent / "api-streaming.jsonl"
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "env_only")
    monkeypatch.setenv("ALDEBARAN_DISPATCH_SUPERVISOR_GROUPS", json.dumps({name: [CHANNEL]}))
    monkeypatch.delenv(f"AIRFLOW_CONN_ALDEBARAN_{CHANNEL.upper()}", raising=False)
    api_objects("connections", {"connection_id": f"aldebaran_{CHANNEL}", "conn_type": "log",
                                "extra": json.dumps({"path": str(log_file)})})
    api_objects("variables", {"key": "aldebaran_channels", "value": CHANNEL})
    alerts = [_alert(f"api-stream-{i}") for i in range(3)]
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(a["alert_id"], json.dumps(a)) for a in alerts])

    run = dagbag.dags["dispatch_supervisor"].test()

    assert run.state == "success", run.state
    assert heartbeat.read(store, heartbeat.DISPATCHER, name)["channels"] == [CHANNEL]
    assert_eventually(lambda: sorted(json.loads(line)["alert"]["alert_id"] for line in log_file.read_text().splitlines())
                      == sorted(a["alert_id"] for a in alerts) if log_file.exists() else False,
                      timeout=60, message="the streaming dispatcher delivers through the API's connection")
