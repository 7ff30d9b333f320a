"""The supervisors' long-running processes need a worker that outlives the task (aldebaran.platform.executors)."""

from __future__ import annotations

import pytest

from aldebaran.exceptions import ConfigError
from aldebaran.platform import executors


@pytest.mark.parametrize("names", [["LocalExecutor"], ["CeleryExecutor"], ["LocalExecutor", "KubernetesExecutor"], []])
def test_executors_with_a_long_lived_worker_may_launch(names):
    executors.check("dispatcher log", names)


@pytest.mark.parametrize("names", [["KubernetesExecutor"], ["KubernetesExecutor", "CeleryExecutor"]])
def test_a_pod_per_task_default_executor_is_refused_with_the_way_out(names):
    with pytest.raises(ConfigError, match=r"^dispatcher log: the KubernetesExecutor runs each task in a pod .*"
                                          r"\(docs/airflow.md, section Executors\)$"):
        executors.check("dispatcher log", names)


def test_the_configured_executors_are_read_by_class_name(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR",
                       "LocalExecutor,k8s:airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor")
    assert executors.configured() == ["LocalExecutor", "KubernetesExecutor"]
