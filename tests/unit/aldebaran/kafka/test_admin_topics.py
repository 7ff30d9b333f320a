"""ensure_topics returns only once the cluster's metadata lists what it created: a broker's metadata can lag
the controller's answer to CreateTopics, and a client that asked at once was told the topic did not exist (a
clean-clone run of `make test` on two workers). The admin client here is a stand-in for failure injection."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from aldebaran.exceptions import AldebaranError
from aldebaran.kafka import admin as kadmin
from aldebaran.settings import KafkaSettings


class LaggingMetadataFake:
    """Creates topics at once, but lists each new one only from its `lag`-th metadata request on."""

    def __init__(self, lag: int):
        self.lag, self.created, self.listings = lag, [], 0

    def list_topics(self, topic=None, timeout=None):
        self.listings += 1
        shown = self.created if self.listings > self.lag else []
        return SimpleNamespace(topics={t: SimpleNamespace(error=None, partitions={0: None}) for t in shown})

    def create_topics(self, new, **_):
        self.created += [t.topic for t in new]
        self.listings = 0
        done = Future()
        done.set_result(None)
        return {t.topic: done for t in new}


def test_created_topics_are_returned_once_the_metadata_lists_them():
    fake = LaggingMetadataFake(lag=3)
    assert kadmin.ensure_topics(KafkaSettings(), ["a", "b"], client=fake) == ["a", "b"]
    assert fake.listings == 4  # three that did not list them yet, then one that did


def test_a_topic_never_listed_fails_naming_it():
    fake = LaggingMetadataFake(lag=10**9)
    with pytest.raises(AldebaranError, match=r"topics a created on .* not listed in its metadata after 0s"):
        kadmin.ensure_topics(KafkaSettings(), ["a"], client=fake, listed_timeout=0.3)
