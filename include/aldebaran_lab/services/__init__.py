"""Local services: `aldebaran services up|down|status` (and make up / make down)."""

from __future__ import annotations

import logging

from aldebaran_lab.services.base import Service, Status, Stopped

log = logging.getLogger(__name__)

CORE = ("minio", "kafka", "airflow")
CLUSTER = ("spark-master", "spark-worker-1", "spark-worker-2")
OPTIONAL = ("alertmanager",)  # started by `up` only when a configured channel needs it (optional())


def get(name: str) -> Service:
    from aldebaran_lab.services.airflow import Airflow
    from aldebaran_lab.services.alertmanager import Alertmanager
    from aldebaran_lab.services.kafka import Kafka
    from aldebaran_lab.services.minio import MinIO
    from aldebaran_lab.services.spark_cluster import SparkMaster, SparkWorker

    factories = {
        "minio": MinIO,
        "kafka": Kafka,
        "airflow": Airflow,
        "alertmanager": Alertmanager,
        "spark-master": SparkMaster,
        "spark-worker-1": lambda: SparkWorker(1),
        "spark-worker-2": lambda: SparkWorker(2),
    }
    if name not in factories:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(factories)}")
    return factories[name]()


def optional() -> tuple[str, ...]:
    """The optional services the configured channels need (an ``alertmanager`` channel on 127.0.0.1)."""
    from aldebaran_lab.services import alertmanager

    return ("alertmanager",) if alertmanager.wanted() else ()


def up(names: tuple[str, ...] = CORE) -> None:
    for name in names:
        get(name).start()


def down(names: tuple[str, ...] = CORE + CLUSTER + OPTIONAL) -> list[Stopped]:
    """Stop them, consumers of a service before it (reverse order); how each one stopped (logged as well)."""
    return [r for name in reversed(names) if (r := get(name).stop()) is not None]


def status(names: tuple[str, ...] = CORE + CLUSTER) -> list[Status]:
    return [get(n).status() for n in names]


__all__ = ["CORE", "CLUSTER", "OPTIONAL", "optional", "Service", "Status", "Stopped", "get", "up", "down", "status"]
