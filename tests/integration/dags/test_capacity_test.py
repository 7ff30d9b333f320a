"""capacity_test run for real with dag.test() on the running services, in a tiny configuration: the
load generator, every measurement and the report stored in the object store. Asserts correctness
and that the report exists — never a figure (figures belong to `make bench`)."""

from __future__ import annotations

from aldebaran.storage.store import Store

TINY = {
    "rates": [300],
    "duration_seconds": 2,
    "books": [300],
    "drain_orders": 300,
    "churn_orders": 300,
    "dispatch_alerts": 20,
    # Under 2 minutes on a busy 2-core box: the streaming auditor (latency), a bounded one (books) and
    # dispatch; drain and churn run the same harness code in `make bench-quick`.
    "sections": ["latency", "books", "dispatch"],
    "mix": {"overfill_fraction": 0.5, "duplicate_fraction": 0.05, "malformed_fraction": 0.02, "open_orders": 20,
            "purchase_first": 0.2, "seed": 3},
}


def _xcom(run, task_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id,
                                                 key="return_value")).first()
        return XComModel.deserialize_value(row)


def test_capacity_test_dag_measures_and_stores_a_correct_report(airflow_db, dagbag, spark, store: Store):
    dag = dagbag.dags["capacity_test"]
    run = dag.test(run_conf=TINY)
    assert run.state == "success", run.state
    out = _xcom(run, "measure")
    try:
        assert out["correct"] is True
        assert set(out["sections"]) == {"latency", "books", "dispatch"}
        assert all(s["correct"] for s in out["sections"].values()), out["sections"]
        assert "## Capacity" in out["markdown"] and "Correct" in out["markdown"]
        keys = {o["Key"] for o in store.list("reports/capacity/")}
        for name in ("markdown", "latency", "books"):
            key = out["objects"][name].split(f"{store.bucket}/", 1)[1]
            assert key in keys, f"{name} not stored at {key}"
        png = store.get(out["objects"]["latency"].split(f"{store.bucket}/", 1)[1]).body
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        prefix = out["report_uri"].split(f"{store.bucket}/", 1)[1].rsplit("/", 1)[0]
        store.delete_prefix(prefix + "/")
