"""DAG integrity tests: no services (`make test-unit`). Airflow's test home: tests/airflow_home.py."""

from tests.airflow_home import airflow_db, dagbag  # noqa: F401  (fixtures; sets AIRFLOW_HOME before airflow loads)
