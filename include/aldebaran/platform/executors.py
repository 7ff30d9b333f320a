"""Which Airflow executors can host the supervisors' long-running processes (docs/airflow.md "Executors").

The supervisors start the auditor (client mode), the streaming dispatchers and the lane's keeper
*detached* from the task, in a session of their own, so that they outlive it, and follow them by pid on
the host that started them (by heartbeat and lease from anywhere). That needs a worker host that lives
longer than the task: the LocalExecutor (the scheduler's host) or a CeleryExecutor worker. Under the
KubernetesExecutor each task runs in a pod of its own that is deleted when the task ends, taking every
process it started with it: the supervisor would restart the auditor every minute. :func:`check` refuses
that at launch, with the reason and the way out, instead.
"""

from __future__ import annotations

from aldebaran.exceptions import ConfigError

POD_PER_TASK = ("KubernetesExecutor",)
DOCS = "docs/airflow.md, section Executors"


def configured() -> list[str]:
    """The executors of the Airflow this task runs under (``[core] executor``: one, or a comma list whose
    first is the default), by class name; [] outside Airflow."""
    try:
        from airflow.configuration import conf
    except ImportError:  # outside Airflow: the CLI launches nothing through a supervisor
        return []
    raw = conf.get("core", "executor", fallback="") or ""
    # Entries are a class name, a module path, or "alias:module.Class".
    return [part.strip().rsplit(":", 1)[-1].rsplit(".", 1)[-1] for part in raw.split(",") if part.strip()]


def check(what: str, executors: list[str] | None = None) -> None:
    """Raise ConfigError if `what` (a process a supervisor is about to start detached) would die with the task."""
    names = configured() if executors is None else executors
    if names and names[0] in POD_PER_TASK:
        raise ConfigError(
            f"{what}: the {names[0]} runs each task in a pod that ends with the task, and this process must "
            f"outlive it. Run the supervisors on a LocalExecutor or CeleryExecutor worker (with several "
            f"executors configured, give these DAGs `executor=` one of those), or run the auditor in Spark's "
            f"cluster deploy mode and the dispatchers and the lane as Deployments ({DOCS})")
