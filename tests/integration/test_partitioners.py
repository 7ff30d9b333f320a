"""Any standard producer partitioner is first-class (BRIEF §2, the producer keying contract), on real
Kafka and Spark:

- librdkafka places keys exactly where aldebaran.audit.partitioning says, for each of its partitioners;
- a plain confluent-kafka ``Producer`` with default settings (librdkafka's CRC32 partitioner) gets the
  co-partitioned plan with nothing misrouted, also when the auditor started on an empty topic (the
  partitioner is learnt from the first events and recorded with the books);
- when producers do not use the checkpoint's partitioner, the misrouted events are routed to their
  owner and audited there: the alerts equal the reference model's.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from aldebaran.audit import reference
from aldebaran.audit.partitioning import LIBRDKAFKA, partition_of
from aldebaran.audit.sparkjob import plans
from aldebaran.runtime.checkpoint import Checkpoint
from aldebaran.exceptions import ConfigError
from aldebaran.kafka import admin as kadmin, io as kio
from aldebaran_capacity import loadgen
from tests.integration.test_plans import _run  # the auditor run to the end of its input, its batch figures


def _plain_producer(kafka, **conf) -> Producer:
    """What a user writes: confluent-kafka with its defaults (plus whatever `conf` says)."""
    return Producer({"bootstrap.servers": kafka.bootstrap_servers, **conf})


def _produce(p: Producer, topic: str, records) -> None:
    for key, value in records:
        p.produce(topic, key=key, value=value)
    assert p.flush(30) == 0


def _ids(kafka) -> list:
    return sorted((a["alert_id"], a["kind"], a["order_id"]) for a in
                  (json.loads(m.value()) for m in kio.read_topic(kafka, kafka.alerts_topic)))


@pytest.mark.parametrize("setting", sorted(LIBRDKAFKA))
def test_librdkafka_places_keys_where_the_auditor_expects(kafka_topics, unique, setting):
    topic = f"t-{unique}-six"
    kadmin.ensure_topics(kafka_topics, [topic], partitions=6)
    try:
        keys = [f"order-{i}".encode() for i in range(300)] + [str(10**9 + i).encode() for i in range(100)]
        _produce(_plain_producer(kafka_topics, partitioner=setting), topic, [(k, b"{}") for k in keys])
        placed = {m.key(): m.partition() for m in kio.read_topic(kafka_topics, topic)}
        assert len(placed) == len(keys)
        assert {k: partition_of(k, 6, LIBRDKAFKA[setting]) for k in keys} == placed
    finally:
        kadmin.delete_topics(kafka_topics, [topic])


def test_a_default_confluent_producer_gets_the_fast_path_from_an_empty_topic(spark, kafka_topics, checkpoint,
                                                                             unique):
    name = f"part-{unique}"
    first = _run(spark, checkpoint, name)  # an empty topic: the plan, partitioner not known yet
    assert sum(f["applied"] for f in first) == 0
    assert plans.read_recorded(Checkpoint(checkpoint).books).partitioner is None
    recs = list(loadgen.records(loadgen.original_mix(300, 11)))
    _produce(_plain_producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in recs])
    figures = _run(spark, checkpoint, name, max_offsets_per_trigger=400)
    assert {f["plan"] for f in figures} == {"copartitioned"}
    assert plans.read_recorded(Checkpoint(checkpoint).books).partitioner == "crc32"
    assert sum(f["misrouted"] for f in figures) == 0
    assert sum(f["applied"] for f in figures) == len(recs)
    assert _ids(kafka_topics) == sorted((a["alert_id"], a["kind"], a["order_id"])
                                        for a in reference.expected_alerts([r.value for r in recs]))
    # The recorded partitioner stays; asking for another is refused, naming the setting.
    with pytest.raises(ConfigError, match="ALDEBARAN_AUDIT_PARTITIONER"):
        _run(spark, checkpoint, name, partitioner="murmur2")


def test_producers_off_the_checkpoints_partitioner_are_misrouted_never_misaudited(spark, kafka_topics, checkpoint,
                                                                                  unique):
    recs = list(loadgen.records(loadgen.original_mix(200, 12)))
    _produce(_plain_producer(kafka_topics), kafka_topics.trades_topic, [(r.key, r.value) for r in recs])
    name = f"part-{unique}"
    first = _run(spark, checkpoint, name, plan="copartitioned", partitioner="murmur2")  # pinned; the producer: crc32
    misrouted = sum(f["misrouted"] for f in first)
    assert 0.2 * len(recs) < misrouted < 0.8 * len(recs)  # ~half the orders live in the other partition
    second = _run(spark, checkpoint, name)  # the rerouted copies, in their owner partitions now
    assert sum(f["misrouted"] for f in second) == 0
    assert sum(f["applied"] for f in first + second) == len(recs)
    assert _ids(kafka_topics) == sorted((a["alert_id"], a["kind"], a["order_id"])
                                        for a in reference.expected_alerts([r.value for r in recs]))
