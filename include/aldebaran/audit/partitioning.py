"""The producer keying contract (BRIEF §2) as the auditor checks it.

Producers key each trade by its order id (the request's ``id``, the purchase's ``initial_order_id``,
as UTF-8 text: an integer id 42 is the key ``b"42"``) and let their client's partitioner place it, so
that one order's events share a partition. Any standard partitioner keeps that contract; they differ
only in *which* partition an order lands in:

============  ===========================================================  ================================
name          who uses it                                                  partition of a non-null key
============  ===========================================================  ================================
``crc32``     librdkafka / confluent-kafka's default (``consistent_random``,   ``crc32(key) % n``
              also ``consistent``)
``murmur2``   the Java client's default; librdkafka ``murmur2_random``     ``(murmur2(key) & 0x7fffffff) % n``
              (also ``murmur2``)
``fnv1a``     librdkafka ``fnv1a_random`` / ``fnv1a`` (Sarama's default)   ``abs(int32(fnv1a_32(key))) % n``
============  ===========================================================  ================================

The co-partitioned plan (aldebaran.audit.sparkjob.copartitioned) audits partition p's events in shard p
without a shuffle. Which of these functions the topic's producers use is detected from the topic
(aldebaran.audit.sparkjob.plans: at start from a sample, or from the first events when the topic was
empty) and recorded with the books, since it decides which shard owns an order. The auditor does not
trust the contract: before an event opens a new book in shard p, :func:`owner` is asked whether the
order maps to p (once per book, not per event). An event that does not is "misrouted": it is not applied
there and is produced again to its owner partition (correct, one batch later).

murmur2 is Kafka's ``Utils.murmur2`` (seed 0x9747b28c); no maintained Python package exposes Kafka's
variant without pulling in a second Kafka client, and the unit test holds this one to the JVM's
``org.apache.kafka.common.utils.Utils.murmur2`` on random keys. crc32 is zlib's (the same CRC-32 as
librdkafka's ``rd_crc32``); fnv1a is 32-bit FNV-1a as librdkafka computes it. The integration test
``tests/integration/test_partitioners.py`` holds all three to what librdkafka itself does on a real topic.
"""

from __future__ import annotations

import zlib

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF

PARTITIONERS = ("crc32", "murmur2", "fnv1a")
# librdkafka's `partitioner` setting → the function above (the *_random variants differ only for null keys).
LIBRDKAFKA = {"consistent_random": "crc32", "consistent": "crc32", "murmur2_random": "murmur2",
              "murmur2": "murmur2", "fnv1a_random": "fnv1a", "fnv1a": "fnv1a"}


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


def fnv1a(data: bytes) -> int:
    """32-bit FNV-1a (offset basis 0x811C9DC5, prime 0x01000193), unsigned, as librdkafka's rd_fnv1a."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & _MASK
    return h


def partition_of(key: bytes, partitions: int, partitioner: str = "murmur2") -> int:
    """The partition `partitioner` gives a non-null key on a topic of `partitions` partitions."""
    if partitioner == "murmur2":
        return (murmur2(key) & 0x7FFFFFFF) % partitions
    if partitioner == "crc32":
        return zlib.crc32(key) % partitions
    if partitioner == "fnv1a":
        # librdkafka (to match Sarama's hash partitioner) takes the absolute value of the hash as a
        # signed 32-bit integer before the modulo.
        h = fnv1a(key)
        return abs(h - (1 << 32) if h & 0x80000000 else h) % partitions
    raise ValueError(f"unknown partitioner {partitioner!r} (one of {', '.join(PARTITIONERS)})")


def owner(order_id: str, partitions: int, partitioner: str = "murmur2") -> int:
    """The partition (= shard, in the co-partitioned plan) that owns an order."""
    return partition_of(order_id.encode(), partitions, partitioner)


def placements(key: bytes, partitions: int) -> dict[str, int]:
    """Where each standard partitioner puts `key` (for detecting the one a topic's producers use)."""
    return {name: partition_of(key, partitions, name) for name in PARTITIONERS}
