"""aldebaran.audit.partitioning holds the standard partitioners exactly: murmur2 against the JVM's
org.apache.kafka.common.utils.Utils (kafka-clients, on the Spark session's classpath with the Kafka
connector), on fixed and random keys of every length remainder; crc32 and fnv1a against published
vectors. What librdkafka itself does on a real topic: tests/integration/test_partitioners.py."""

from __future__ import annotations

import random

import pytest

from aldebaran.audit.partitioning import PARTITIONERS, fnv1a, murmur2, owner, partition_of, placements


def test_known_values_from_kafkas_own_test():
    # Kafka's UtilsTest.testMurmur2 vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_fnv1a_published_vectors():
    # FNV-1a 32-bit test vectors (Fowler/Noll/Vo reference suite).
    assert fnv1a(b"") == 0x811C9DC5
    assert fnv1a(b"a") == 0xE40C292C
    assert fnv1a(b"foobar") == 0xBF9CF968


def test_crc32_is_the_standard_crc():
    assert partition_of(b"123456789", 2**32, "crc32") == 0xCBF43926  # the CRC-32 check value


def test_agrees_with_the_jvm_on_random_keys(spark):
    utils = spark._jvm.org.apache.kafka.common.utils.Utils
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(n)) for n in range(0, 40) for _ in range(5)]
    keys += [str(rng.randrange(10**12)).encode() for _ in range(200)]
    keys += ["ordre-é-注文-🙂".encode()]
    for key in keys:
        assert murmur2(key) == utils.murmur2(bytearray(key)), key
        for n in (1, 2, 3, 8, 12, 64):
            assert partition_of(key, n) == utils.toPositive(utils.murmur2(bytearray(key))) % n, (key, n)


def test_owner_is_the_partition_of_the_order_id_as_utf8():
    for name in PARTITIONERS:
        assert owner("42", 8, name) == partition_of(b"42", 8, name)
        assert {owner(f"o{i}", 2, name) for i in range(100)} == {0, 1}


def test_the_partitioners_disagree_on_about_half_the_keys_at_two_partitions():
    # Why detecting the producers' partitioner matters: the wrong guess misroutes ~1/2 of the orders.
    keys = [f"order-{i}".encode() for i in range(2000)]
    agree = sum(len(set(placements(k, 2).values())) == 1 for k in keys)
    assert 0.15 < agree / len(keys) < 0.40  # all three agree on ~1/4 of the keys


def test_an_unknown_partitioner_is_an_error_naming_the_choices():
    with pytest.raises(ValueError, match="crc32, murmur2, fnv1a"):
        partition_of(b"k", 2, "random")
