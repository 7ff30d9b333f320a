"""aldebaran.audit.partitioning holds Kafka's default partitioner exactly: murmur2 against the JVM's
org.apache.kafka.common.utils.Utils (kafka-clients, on the Spark session's classpath with the Kafka
connector), on fixed and random keys of every length remainder."""

from __future__ import annotations

import random

from aldebaran.audit.partitioning import murmur2, owner, partition_of


def test_known_values_from_kafkas_own_test():
    # Kafka's UtilsTest.testMurmur2 vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


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
    assert owner("42", 8) == partition_of(b"42", 8)
    assert {owner(f"o{i}", 2) for i in range(100)} == {0, 1}
