"""Airflow for the DAG tests: its own AIRFLOW_HOME and SQLite metadata DB (never the running
standalone's), configured before airflow is first imported, migrated once per test session.

Shared by tests/dags (integrity, no services) and tests/integration/dags (DAGs run with dag.test()
against the real services): each conftest imports it first, so the environment is set before airflow
is imported, and re-exports its fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# One home per pytest-xdist worker (``make test`` runs two): SQLite takes one writer, and each worker migrates its own.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under xdist; unset otherwise
HOME = ROOT / ".run" / ("airflow-test-home" + (f"-{WORKER}" if WORKER else ""))
HOME.mkdir(parents=True, exist_ok=True)
os.environ["AIRFLOW_HOME"] = str(HOME)
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{HOME / 'airflow.db'}"
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"

from aldebaran.storage.connections import env_var  # noqa: E402
from aldebaran.settings import ObjectStoreSettings, load  # noqa: E402
from aldebaran_lab.services.airflow import connections_env  # noqa: E402  (after AIRFLOW_HOME is set)

# Not the object store's connection: set for the whole run, it would win over the ALDEBARAN_S3_* that tests
# point elsewhere (a private MinIO, wrong keys). tests/integration/test_s3_connection.py defines its own.
S3_CONN_VAR = env_var(load(ObjectStoreSettings).connection or "aldebaran_s3")
for key, value in connections_env().items():
    if key != S3_CONN_VAR:
        os.environ.setdefault(key, value)


@pytest.fixture(scope="session")
def airflow_db():
    """`airflow db migrate` on the test DB, once per run (~20 s cold)."""
    result = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                            capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-3000:]
    return HOME / "airflow.db"


@pytest.fixture(scope="session")
def dagbag():
    from airflow.models.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))
