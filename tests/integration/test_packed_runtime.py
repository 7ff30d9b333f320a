"""The auditor on a standalone cluster whose worker cannot import aldebaran: `make dist`'s packed runtime
(ALDEBARAN_SPARK_RUNTIME_ARCHIVE) is shipped by Spark to the executors and their Python runs from it.

A master and one worker of our own (free ports, a private run dir); the worker's environment has no
PYTHONPATH, no venv on its PATH, and a Python that cannot import aldebaran (checked first, so that the
test proves the isolation rather than assumes it). The challenge's example on fresh topics gives the
OVERFILL of order 1. Marked `campaign` (`make chaos-short`): building the runtime takes minutes; the
archive's contract and the submit arguments built from the setting are unit tests
(tests/unit/aldebaran/runtime/test_spark_runtime_archive.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aldebaran.runtime import paths
from aldebaran.kafka import io as kio
from aldebaran_capacity import loadgen
from aldebaran_lab.chaos.common import AuditorProcess, topic_alerts
from aldebaran_lab.services.spark_cluster import SparkMaster, SparkWorker

# The build (a venv, pip, gzip) takes 5-15 minutes on a busy 2-core box: beyond the suite's 900 s per test.
pytestmark = [pytest.mark.integration, pytest.mark.campaign, pytest.mark.timeout(2400)]

# This venv's interpreter without the venv: the project is installed in the venv only.
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProjectlessWorker(SparkWorker):
    """A worker as a cluster host without the project would run it."""

    def environment(self) -> dict[str, str]:
        env = super().environment()
        for var in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_DRIVER_PYTHON"):
            env.pop(var, None)
        venv_bin = str(paths.venv_bin("python").parent)
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
        env["PYSPARK_PYTHON"] = BASE_PYTHON
        return env


@pytest.fixture(scope="module")
def runtime_archive(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(["nice", "-n", "10", "bash", str(paths.ROOT / "scripts" / "dist.sh"), str(out)],
                   check=True, timeout=1200)
    (archive,) = out.glob("aldebaran-runtime-py*.tar.gz")
    return archive


@pytest.fixture
def projectless_cluster(tmp_path):
    root = tmp_path / "cluster"
    master = SparkMaster(root=root, port=free_port(), ui_port=free_port())
    worker = ProjectlessWorker(1, cores=1, memory="1g", root=root, master=master.address, ui_port=free_port())
    started = []
    try:
        for svc in (master, worker):
            svc.start()
            started.append(svc)
        yield master, worker
    finally:
        for svc in reversed(started):
            svc.stop()


def test_the_auditor_runs_on_a_projectless_worker_from_the_packed_runtime(
        runtime_archive, projectless_cluster, kafka_topics, checkpoint, unique, tmp_path):
    master, worker = projectless_cluster
    probe = subprocess.run([worker.environment()["PYSPARK_PYTHON"], "-c", "import aldebaran"],
                           env=worker.environment(), capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'aldebaran'" in probe.stderr, probe

    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                         [(r.key, r.value) for r in loadgen.records(loadgen.CHALLENGE_EXAMPLE)])
    env = {**os.environ, "ALDEBARAN_SPARK_RUNTIME_ARCHIVE": str(runtime_archive)}
    args = ["--checkpoint", checkpoint, "--trigger", "available-now", "--rules", "overfill",
            "--ttl-seconds", "86400", "--query-name", f"packed-{unique}", "--archive-prefix",
            f"tests/{unique}/archive", "--master", master.address]
    auditor = AuditorProcess(env, args, tmp_path / "auditor.log")
    auditor.start()
    try:
        assert auditor.proc.wait(600) == 0, auditor.tail(60)
    finally:
        auditor.kill()

    # The executor ran the tasks from the unpacked archive (its work dir holds ./env), not the worker's Python.
    assert list((worker.home / "work").glob(f"app-*/*/{'env'}/bin/python")), sorted(
        str(p) for p in (worker.home / "work").glob("app-*/*/*"))
    overfills = [a for a in topic_alerts(kafka_topics) if a["kind"] == "OVERFILL"]
    assert [(a["order_id"], a["requested"], a["purchased"]) for a in overfills] == [("1", 100, 120)]
