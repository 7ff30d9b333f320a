"""What the platform DAGs' tasks call when the answer must be an Airflow outcome (fail without retry,
or read the run's context); the logic stays in supervisor / health / replay."""

from __future__ import annotations


def health_verdict(record: dict) -> None:
    """Fail the health run naming every problem. AirflowFailException: a retry a minute later would
    only repeat the verdict; the next scheduled run checks again."""
    from airflow.sdk.exceptions import AirflowFailException

    from aldebaran.exceptions import PlatformUnhealthy
    from aldebaran.platform.health import raise_if_unhealthy

    try:
        raise_if_unhealthy(record)
    except PlatformUnhealthy as exc:
        raise AirflowFailException(str(exc)) from exc
