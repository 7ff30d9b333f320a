"""The auditor on a real Spark standalone cluster (a master and two one-core workers from the pyspark
wheel, as `make up-cluster` starts them): the shard tasks run in executor JVMs and Python workers of
the workers, not in the driver. The original challenge's example gives exactly one OVERFILL for
order 1; a SIGKILL of the driver mid-stream and a restart on the same (s3a://) checkpoint lose and
duplicate nothing, delivered alerts included.

The kill on the cluster is a `campaign` (`make chaos-short`): the same kill-auditor campaign, on the local
master, stays in `make test` (test_auditor_recovery.py), and the example here runs on the cluster's
executors with its books on an s3a:// checkpoint, as the kill's restart reads them. The cluster is started for this module and stopped after it, unless it was already
running."""

from __future__ import annotations

import json
import logging
import urllib.request

import pytest

from aldebaran.audit import reference
from aldebaran.kafka import io as kio
from aldebaran_capacity import loadgen
from aldebaran_lab import services
from aldebaran_lab.chaos import kill_auditor
from aldebaran_lab.chaos.common import (
    AuditorProcess, Workspace, auditor_args, committed, compare_alerts, topic_alerts,
)
from aldebaran_lab.services.spark_cluster import SparkMaster

log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def cluster(services_up):
    started = [name for name in services.CLUSTER if not services.get(name).running()]
    services.up(tuple(started))
    yield SparkMaster().address
    services.down(tuple(started))


def test_challenge_example_on_the_standalone_cluster(cluster):
    ws = Workspace.create("cluster-example", s3a=True)  # the executors on the workers read and write the books in MinIO
    try:
        values = [r.value for r in loadgen.records(loadgen.CHALLENGE_EXAMPLE)]
        kio.produce_all(kio.producer(ws.kafka), ws.kafka.trades_topic,
                             [(r.key, r.value) for r in loadgen.records(loadgen.CHALLENGE_EXAMPLE)])
        auditor = AuditorProcess(ws.env(), auditor_args(ws, trigger="available-now",
                                                        extra=["--master", cluster]), ws.logs / "auditor.log")
        auditor.start()
        rc = auditor.proc.wait(600)
        assert rc == 0, auditor.tail(40)
        # It ran as an application of the cluster (the master's JSON status lists it), not in local mode.
        with urllib.request.urlopen(f"http://{SparkMaster.host}:{SparkMaster.ui_port}/json/", timeout=10) as resp:
            status = json.load(resp)
        apps = [a["name"] for a in status.get("completedapps", []) + status.get("activeapps", [])]
        assert f"aldebaran-{ws.name}" in apps, apps
        assert committed(ws)[0] >= 1  # the Spark commit log is in MinIO, beside the books
        alerts = topic_alerts(ws.kafka)
        overfills = [a for a in alerts if a["kind"] == "OVERFILL"]
        assert [(a["order_id"], a["requested"], a["purchased"]) for a in overfills] == [("1", 100, 120)], alerts
        assert compare_alerts(alerts, reference.expected_alerts(values, ttl_ms=86_400_000)).ok
    finally:
        ws.cleanup()


@pytest.mark.campaign
def test_sigkill_and_restart_on_the_standalone_cluster_loses_and_duplicates_nothing(cluster):
    result = kill_auditor.run(events=3_000, kills=1, seed=21, mode="short", master=cluster)
    log.info("kill-auditor on the cluster: %s", json.dumps(result.details, default=str))
    assert result.details["failures"] == []
    assert result.faults == 1 and result.runs == 2
    assert result.details["alerts_topic"]["missing"] == 0 and result.details["alerts_topic"]["extra"] == 0
    assert (result.lost, result.duplicated) == (0, 0)
    assert result.details["webhook"]["missing"] == 0
