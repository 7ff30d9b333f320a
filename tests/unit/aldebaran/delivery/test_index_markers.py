"""The ledger's attention index (retry, dead, in_doubt markers) under a sweep that reads between a writer's
mark and its write: the record must end up findable in its index.

CI of stop 47 (`chaos kill-dispatch`) left one `sms_lookup` delivery IN_DOUBT with no in_doubt marker, so the
provider's lookup never settled it: the other dispatcher's sweep had listed the fresh marker, read the record
before the adopting writer stored it, and removed the marker as stale. The interleavings below are forced
with a failure-injection store; the ledger, its records and the local-directory store are the real ones."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import CLAIMED, IN_DOUBT, RETRY, Record, RetryPolicy
from aldebaran.storage.store import LocalStore
from tests.unit.aldebaran.delivery.test_dispatch_runs import alert

SMS = SimpleNamespace(name="sms", can_dedupe=False, has_lookup=True)


class InterleavingStoreFake(LocalStore):
    """Failure injection: the local-directory store, which runs `before(key)` once just before the first
    write (an op named in `ops`: create, replace) of a key ending in `suffix` (another process's step landing
    between two of ours)."""

    def __init__(self, root, suffix: str) -> None:
        super().__init__(root)
        self.suffix, self.before, self.ops = suffix, None, ("create", "replace")

    def _maybe(self, op: str, key: str) -> None:
        if self.before is not None and op in self.ops and key.endswith(self.suffix):
            hook, self.before = self.before, None
            hook(key)

    def create(self, key, body, *args, **kwargs):
        self._maybe("create", key)
        return super().create(key, body, *args, **kwargs)

    def replace(self, key, body, *args, **kwargs):
        self._maybe("replace", key)
        return super().replace(key, body, *args, **kwargs)


@pytest.fixture
def store(tmp_path):
    return InterleavingStoreFake(tmp_path / "ledger", "/alerts/a-1.json")


def ledgers(store, now: float = 1000.0) -> tuple[Ledger, Ledger]:
    """Two dispatchers' ledgers on one store (a writer, a sweeper), on a clock that stands still."""
    return tuple(Ledger(store, lease_seconds=5, policy=RetryPolicy(3, 1, 1), clock=lambda: now) for _ in range(2))


def doubted_record(now: float = 1000.0) -> Record:
    record = Record.claimed("sms", alert(1), "w1", now, None, run="run-key")
    record.doubted(now, "outcome unknown")
    return record


def test_a_sweep_between_the_mark_and_the_records_creation_leaves_it_indexed(store):
    writer, sweeper = ledgers(store)
    seen = []
    store.before = lambda _key: seen.append(sweeper.doubted(SMS, "a-1"))  # the record does not exist yet
    assert writer.create(doubted_record()) is not None
    assert seen == [None]  # the sweep found nothing to settle and removed the marker
    assert writer.indexed("in_doubt", "sms") == ["a-1"]
    assert sweeper.doubted(SMS, "a-1").record.state == IN_DOUBT  # the next sweep settles it


def test_a_sweep_between_the_mark_and_an_expired_claims_doubt_leaves_it_indexed(store):
    writer, sweeper = ledgers(store)
    claimed = writer.attempt(SMS, alert(1), "w1")  # a single delivery's lease, the owner then died
    assert claimed.record.state == CLAIMED
    later, _ = ledgers(store, now=1000.0 + 60)
    store.ops = ("replace",)  # CLAIMED → IN_DOUBT: the sweep reads the record still CLAIMED
    store.before = lambda _key: sweeper.doubted(SMS, "a-1")
    taken = later.attempt(SMS, alert(1), "w2")
    assert taken.record.state == IN_DOUBT
    assert later.indexed("in_doubt", "sms") == ["a-1"]


def test_a_stalled_sweep_removing_the_marker_after_the_write_puts_it_back(store):
    writer, sweeper = ledgers(store)
    writer.create(doubted_record())
    # The sweep read the record before it existed, stalled, and removes the marker only now.
    sweeper.unmark("in_doubt", "sms", "a-1")
    assert writer.indexed("in_doubt", "sms") == ["a-1"]


def test_a_marker_the_record_has_left_is_removed(store):
    writer, sweeper = ledgers(store)
    writer.create(doubted_record())
    writer.doubted(SMS, "a-1").report_lookup({"id": "provider-1"})  # the provider has it: DELIVERED
    assert writer.indexed("in_doubt", "sms") == []
    store.put(writer.index_key("in_doubt", "sms", "a-1"), b"")  # a marker a crash left behind
    assert sweeper.doubted(SMS, "a-1") is None
    assert writer.indexed("in_doubt", "sms") == []


def test_a_retry_marker_stays_while_the_retried_delivery_is_claimed(store):
    writer, sweeper = ledgers(store)
    record = Record.claimed("sms", alert(1), "w1", 1000.0, None, run="run-key")
    record.failed(1000.0, "HTTP 503", False, RetryPolicy(3, 0.001, 0.001))
    writer.create(record)
    assert record.state == RETRY and writer.indexed("retry", "sms") == ["a-1"]
    later, _ = ledgers(store, now=1000.0 + 60)
    taken = later.retry(SMS, "a-1", "w2")
    assert taken.record.state == CLAIMED
    sweeper.unmark("retry", "sms", "a-1")  # a stalled sweep that had read the record before the retry
    assert later.indexed("retry", "sms") == ["a-1"]  # still findable if this attempt dies mid-send
