"""
### capacity_test — load the running platform and measure it against its targets

**Triggered from the UI** (or `airflow dags trigger capacity_test --conf '{...}'`). One task runs the
load generator and the benchmark measurements (`aldebaran_capacity.bench.capacity.run`, the same code as
`make bench`) against the platform's Kafka and object store, with Spark `local[2]` inside the task:

- **drain**: a backlog of `drain_orders` orders, the auditor's catch-up rate (`Trigger.AvailableNow`) and,
  on the same topic, its ceilings (Spark batch job, Kafka's ConsumerPerformance, a hand-written
  Python consumer);
- **latency**: trade → alert p50/p95/p99/max at each of `rates` events/s for `duration_seconds`;
- **books**: throughput and memory with each of `books` open books;
- **churn**: books opened and closed per second;
- **dispatch**: deliveries/s into a local webhook receiver through the delivery ledger;
- **e2e**: trades → auditor → streaming dispatchers → webhook, Kafka bus and SMS recipients, ramped
  through `rates` (trades/s, `duration_seconds` each): the highest rate every alert reaches webhook and
  bus in time, per-channel deliveries/s and trade → recipient latency, each alert received once.

Every measurement runs on its own `bench-*` topics and checkpoint (never the live auditor's), and
is checked against the independent reference model: the task fails if any run's alerts differ.
The report (markdown + PNG plots) is stored under `reports/capacity/<run id>/` in the object store and
returned as the task's output (XCom: its location, the markdown, the per-section verdicts).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["aldebaran", "platform", "benchmark"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1), "owner": "aldebaran"},
    params={
        "rates": Param([5000, 20000, 50000], type="array", items={"type": "integer", "minimum": 1},
                       description="Latency and e2e: steady trade rates to offer, events/s, one after the other."),
        "duration_seconds": Param(20, type="number", exclusiveMinimum=0,
                                  description="Latency and e2e: how long each rate is sustained, seconds."),
        "books": Param([100000, 1000000], type="array", items={"type": "integer", "minimum": 1},
                       description="Books: numbers of concurrently open books to measure throughput and memory with."),
        "drain_orders": Param(100000, type="integer", minimum=1,
                              description="Drain: orders preloaded as a backlog (about 5 events each with the default mix)."),
        "churn_orders": Param(50000, type="integer", minimum=1,
                              description="Churn: orders whose books are opened and expired."),
        "dispatch_alerts": Param(1000, type="integer", minimum=1,
                                 description="Dispatch: alerts delivered to the local webhook receiver."),
        "mix": Param({"overfill_fraction": 0.5, "purchase_first": 0.05, "duplicate_fraction": 0.01,
                      "malformed_fraction": 0.001, "open_orders": 1000, "purchases_per_order": 4, "seed": 1},
                     type="object",
                     description="Trade mix of the drain and latency runs (aldebaran_capacity.loadgen.Mix): purchases_per_order, "
                                 "overfill_fraction, orphan_fraction, purchase_first, duplicate_fraction, "
                                 "malformed_fraction, open_orders, seed."),
        "sections": Param(["drain", "latency", "books", "churn", "dispatch", "e2e"], type="array",
                          items={"type": "string", "enum": ["drain", "latency", "books", "churn", "dispatch", "e2e"]},
                          description="Which measurements to run."),
    },
)
def capacity_test():
    @task(execution_timeout=timedelta(hours=2))
    def measure(params=None, run_id=None) -> dict:
        from aldebaran_capacity.bench.capacity import run

        return run(dict(params), run_id)

    measure()


capacity_test()
