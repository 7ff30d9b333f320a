"""The producer keying contract (BRIEF §2) as the auditor checks it.

Producers key each trade by its order id (the request's ``id``, the purchase's ``initial_order_id``,
as UTF-8 text: an integer id 42 is the key ``b"42"``) and let Kafka's default partitioner place it:
murmur2 of the key bytes, made positive, modulo the topic's partition count. That is what Java clients
do by default, and librdkafka (confluent-kafka) with ``partitioner=murmur2_random`` (its own default,
``consistent_random``, is CRC32-based and places keys elsewhere; aldebaran's load generator sets
murmur2_random).

With that contract, one order's events share a partition, and the co-partitioned plan
(aldebaran.audit.sparkjob.batch) audits partition p's events in shard p without a shuffle. The auditor does not
trust the contract: before an event opens a new book in shard p, :func:`owner` is asked whether the order
maps to p (once per book, not per event). An event that does not is "misrouted": it is not applied there
and is produced again to its owner partition.

murmur2 is Kafka's ``Utils.murmur2`` (seed 0x9747b28c); no maintained Python package exposes Kafka's
variant without pulling in a second Kafka client, and the unit test holds this one to the JVM's
``org.apache.kafka.common.utils.Utils.murmur2`` on random keys.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data` as a signed 32-bit integer (what the Java client computes)."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - (length & 3)
    for i in range(0, end, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of(key: bytes, partitions: int) -> int:
    """Kafka's default partition for a non-null key: ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def owner(order_id: str, partitions: int) -> int:
    """The partition (= shard, in the co-partitioned plan) that owns an order."""
    return partition_of(order_id.encode(), partitions)
