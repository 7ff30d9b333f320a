"""The low-latency benchmark's paced producer on the JVM (aldebaran_capacity.bench.paced) against real Kafka:
every record arrives once, keyed as given, in order per order id, placed by the Java client's default
partitioner (murmur2, one of the standard partitioners the auditor detects), stamped with the time it was
sent, at about the rate asked."""

from __future__ import annotations

from collections import defaultdict

from aldebaran.audit.partitioning import partition_of
from aldebaran.kafka import io as kio
from aldebaran_capacity import loadgen
from aldebaran_capacity.bench import paced


def test_paced_producer_sends_every_record_once_in_order_with_its_stamp(kafka_topics):
    recs = list(loadgen.records(loadgen.original_mix(60, seed=5)))
    sent = paced.send(recs, kafka_topics.trades_topic, rate=1_000, bootstrap_servers=kafka_topics.bootstrap_servers)
    assert sent.count == len(recs) == len(sent.timestamps)
    assert sent.timestamps == sorted(sent.timestamps)
    # Paced, not a burst: 300 records at 1,000/s take about 0.3 s (not asserted tighter: a shared machine).
    assert sent.seconds >= 0.25

    got = kio.read_topic(kafka_topics, kafka_topics.trades_topic, idle=1.0)
    assert sorted((m.key(), m.value()) for m in got) == sorted((r.key, r.value) for r in recs)
    assert sorted(m.timestamp()[1] for m in got) == sorted(sent.timestamps)
    by_key = defaultdict(list)
    for m in sorted(got, key=lambda m: (m.partition(), m.offset())):
        by_key[m.key()].append(m.value())
    for key, values in by_key.items():
        assert values == [r.value for r in recs if r.key == key]
    # The Java client's default partitioner: murmur2 of the key (aldebaran.audit.partitioning), the same partition
    # as librdkafka's murmur2_random puts it in.
    partitions = {m.key(): m.partition() for m in got}
    assert partitions == {k: partition_of(k, kafka_topics.partitions, "murmur2") for k in partitions}
    probe = kio.producer(kafka_topics, partitioner="murmur2_random")
    kio.produce_all(probe, kafka_topics.alerts_topic, [(k, b"x") for k in partitions])
    again = {m.key(): m.partition() for m in kio.read_topic(kafka_topics, kafka_topics.alerts_topic, idle=1.0)}
    assert again == partitions
