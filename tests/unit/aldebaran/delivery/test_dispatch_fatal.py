"""A channel's Kafka consumer that hits a fatal error (a static member fenced while the group's coordinator
moved) is replaced, not polled for ever (aldebaran.delivery.dispatcher.ChannelDispatcher.run). The failing
consumer is a failure-injection fake, named so; the rest is the real dispatcher on a local ledger."""

from __future__ import annotations

import threading

from aldebaran.delivery.channels.log import LogChannel
from aldebaran.delivery.decode import AlertDeadLetters
from aldebaran.delivery.dispatcher import ChannelDispatcher
from aldebaran.delivery.stats import DispatchStats
from aldebaran.delivery.exceptions import ConsumerFatal
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.delivery.settle import Partition
from aldebaran.settings import KafkaSettings, load
from aldebaran.storage.store import LocalStore


class FatalConsumerFake(ChannelDispatcher):
    """Failure injection: its first `fatal` consumers die of a fatal error while holding partition 0."""

    def __init__(self, *args, fatal: int, stop_on_fatal: threading.Event | None = None) -> None:
        super().__init__(*args)
        self.fatal, self.stop_on_fatal, self.consumers = fatal, stop_on_fatal, 0

    def _consume(self, stop, idle_timeout, max_alerts, heartbeat) -> None:
        self.consumers += 1
        self.partitions[0] = Partition(0, self.consumers)
        if self.consumers <= self.fatal:
            if self.stop_on_fatal is not None:
                self.stop_on_fatal.set()
            raise ConsumerFatal("Fatal error: Broker: Static consumer fenced by other consumer")


def dispatcher(tmp_path, **kw) -> FatalConsumerFake:
    ledger = Ledger(LocalStore(tmp_path / "ledger"))
    kafka = load(KafkaSettings)
    return FatalConsumerFake(LogChannel("log", tmp_path / "alerts.jsonl"), ledger, load(DeliverySettings),
                             kafka, "g", "me", DispatchStats(), AlertDeadLetters(kafka), **kw)


def test_a_fatal_consumer_is_replaced_and_its_partitions_are_given_up_first(tmp_path):
    d = dispatcher(tmp_path, fatal=2)
    d.run(threading.Event(), idle_timeout=0.1)
    assert d.consumers == 3  # two replaced, the third ran to its end
    assert list(d.partitions) == [0] and d.partitions[0].epoch == 3  # only the last consumer's assignment


def test_a_fatal_error_after_a_stop_ends_the_run(tmp_path):
    stop = threading.Event()
    d = dispatcher(tmp_path, fatal=5, stop_on_fatal=stop)
    d.run(stop, idle_timeout=None)
    assert d.consumers == 1
