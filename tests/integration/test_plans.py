"""The auditor's plans on real Kafka, Spark and MinIO (aldebaran.audit.sparkjob.plans, copart, events.Parser):

- a topic keyed by order id (the producer contract) runs co-partitioned, parsed in Python, books in one
  host process per shard, and gives the reference model's alerts;
- an unkeyed topic runs the shuffle plan, with the same alerts;
- an event in the wrong partition is never audited there: it is counted, produced to its owner
  partition, and audited in a later batch; the alerts equal the reference's;
- a checkpoint keeps the plan it was written with.
"""

from __future__ import annotations

import json
import os

import pytest

from aldebaran.audit import reference
from aldebaran.audit.partitioning import owner
from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob import job, shardwire
from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.exceptions import ConfigError
from aldebaran.kafka import io as kio
from aldebaran.settings import load
from aldebaran_capacity import loadgen


def _run(spark, checkpoint, name, **extra):
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="available-now", query_name=name,
                    archive_prefix="tests/archive", **extra)
    figures = []
    job.run(settings, spark=spark, on_batch=figures.append)
    return figures


def _alerts(kafka_topics) -> list[dict]:
    return [json.loads(m.value()) for m in kio.read_topic(kafka_topics, kafka_topics.alerts_topic)]


def _keys(alerts) -> list:
    return sorted(reference.key(a) for a in alerts)


def _ids(alerts) -> list:
    return sorted((a["alert_id"], a["kind"], a["order_id"]) for a in alerts)


def _mix(orders: int = 300, seed: int = 5):
    return list(loadgen.records(loadgen.original_mix(orders, seed)))


def test_keyed_topic_runs_copartitioned_and_matches_the_reference(spark, kafka_topics, checkpoint, unique):
    recs = _mix()
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in recs])
    figures = _run(spark, checkpoint, f"plan-{unique}", max_offsets_per_trigger=300)
    assert {(f["plan"], f["parser"]) for f in figures} == {("copartitioned", "python")}
    assert sum(f["misrouted"] for f in figures) == 0
    assert sum(f["applied"] for f in figures) == len(recs)
    assert sum(f["parsed_fast"] for f in figures) == len(recs)
    # Several batches: every shard stays in its host process (loaded cold once, never replayed from
    # deltas another process wrote).
    loads = [k for f in figures for k, n in f["shard_loads"].items() for _ in range(n)]
    assert len(figures) >= 4
    assert set(loads) == {"cold", "cache"} and loads.count("cold") == 2, loads
    # The hosts end with the query (the stop job finds them by the executor's pid), not only when idle.
    jvm = spark._jvm.java.lang.ProcessHandle.current().pid()
    books = Checkpoint(checkpoint).books
    assert [os.path.exists(shardwire.socket_path(books, s, jvm)) for s in range(2)] == [False, False]
    expected = reference.expected_alerts([r.value for r in recs])
    assert expected and _keys(_alerts(kafka_topics)) == _keys(expected)


def test_shard_hosts_are_anchored_on_the_executor_jvm_whichever_daemon_runs_the_task(spark):
    """A batch's mapInArrow tasks and the RDD jobs (idle shards, stopping the hosts) run in Python workers of
    different PySpark daemons under one executor: the hosts' anchor, the executor JVM, is the same from
    both, or the stop job would miss the hosts and an idle shard would get a second host."""
    import pyarrow as pa

    from aldebaran.audit.sparkjob.shardwire import executor_pid

    def arrow_pids(batches):
        for b in batches:
            yield pa.RecordBatch.from_pydict({"pid": [executor_pid()] * b.num_rows,
                                              "parent": [os.getppid()] * b.num_rows})

    sql = spark.range(4, numPartitions=2).mapInArrow(arrow_pids, "pid long, parent long").collect()
    rdd = spark.sparkContext.parallelize(range(2), 2).map(lambda _: executor_pid()).collect()
    jvm = spark._jvm.java.lang.ProcessHandle.current().pid()
    assert {r.pid for r in sql} == set(rdd) == {jvm}
    assert jvm not in {r.parent for r in sql}  # the worker's parent is a daemon, not the JVM


def test_unkeyed_topic_runs_the_shuffle_plan(spark, kafka_topics, checkpoint, unique):
    recs = _mix(seed=6)
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                         [(f"k{i}".encode(), r.value) for i, r in enumerate(recs)])
    figures = _run(spark, checkpoint, f"plan-{unique}")
    assert {(f["plan"], f["parser"]) for f in figures} == {("shuffle", "jvm")}
    # One order's events are spread over partitions, whose relative order is arbitrary: the same alerts,
    # though the event that tipped a book over may differ from the reference's single order.
    assert _ids(_alerts(kafka_topics)) == _ids(reference.expected_alerts([r.value for r in recs]))


def test_a_misrouted_event_is_routed_to_its_owner_never_audited_in_the_wrong_book(
        spark, kafka_topics, checkpoint, unique):
    recs = _mix(orders=200, seed=7)
    partitions = 2
    wrong = {i for i in range(len(recs)) if i % 10 == 3}  # every 10th event in the other partition
    p = kio.producer(kafka_topics)
    for i, r in enumerate(recs):
        home = owner(r.key.decode(), partitions)
        p.produce(kafka_topics.trades_topic, key=r.key, value=r.value,
                  partition=(1 - home) if i in wrong else home)
    assert p.flush(30) == 0
    name = f"plan-{unique}"
    first = _run(spark, checkpoint, name, plan="copartitioned")
    assert sum(f["misrouted"] for f in first) == len(wrong)
    # The rerouted copies were appended to their owner partitions: the next run audits them.
    second = _run(spark, checkpoint, name)
    assert sum(f["misrouted"] for f in second) == 0
    assert sum(f["applied"] for f in first + second) == len(recs)
    rerouted = [m for m in kio.read_topic(kafka_topics, kafka_topics.trades_topic)
                if dict(m.headers() or []).get("aldebaran.rerouted.from")]
    assert len(rerouted) == len(wrong)
    assert all(m.partition() == owner(m.key().decode(), partitions) for m in rerouted)
    # Each event applied once, in its owner's book; a rerouted event arrives after its partition mates, so
    # the event that tipped a book over may differ from the reference's, the alerts may not.
    assert _ids(_alerts(kafka_topics)) == _ids(reference.expected_alerts([r.value for r in recs]))


def test_a_checkpoint_keeps_its_plan(spark, kafka_topics, checkpoint, unique):
    recs = _mix(orders=20, seed=8)
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in recs])
    _run(spark, checkpoint, f"plan-{unique}", plan="copartitioned")
    with pytest.raises(ConfigError, match="ALDEBARAN_AUDIT_PLAN"):
        _run(spark, checkpoint, f"plan-{unique}", plan="shuffle")
