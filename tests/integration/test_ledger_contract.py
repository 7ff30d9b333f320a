"""One contract, two backends: the storage layer and the group-commit delivery ledger on S3 (real MinIO)
and on a local directory (eventsourcing's shape: one abstract case, one subclass per backend)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from aldebaran.delivery.handles import ADOPTED, ALREADY, BUSY, CONTESTED, DOUBT, NEW, RECORDED_RUN, SEND, WAIT
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import CLAIMED, DEAD, DELIVERED, IN_DOUBT, RETRY, RetryPolicy
from aldebaran.delivery.runs import MALFORMED, PENDING, RECORDED, REPEAT, RETRYING
from aldebaran.exceptions import AlreadyExists, Fenced, LedgerCorrupt, NotFound, PreconditionFailed
from aldebaran.model import Alert
from aldebaran.storage.store import LocalStore

ALERT = Alert.from_dict({"alert_id": "a" * 32, "kind": "OVERFILL", "order_id": "1"})
# What the ledger reads of a channel: its name and whether it deduplicates.
WEBHOOK, BUS = (SimpleNamespace(name=n, can_dedupe=True) for n in ("webhook", "bus"))
SMS, SMS2 = (SimpleNamespace(name=n, can_dedupe=False) for n in ("sms", "sms2"))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Outcome:
    """The shape channels report (aldebaran.delivery.channels.Outcome), built here for the ledger alone."""

    def __init__(self, status, receipt=None, error=None):
        self.status, self.receipt, self.error = status, receipt, error


def alert(i: int) -> Alert:
    return Alert.from_dict({"alert_id": f"{i:032x}", "kind": "OVERFILL", "order_id": str(i)})


def polled(offsets, malformed=()) -> list:
    """What a dispatcher polled: (offset, raw, Alert | None, why it is malformed)."""
    return [(o, None, None, "not JSON") if o in malformed else (o, None, alert(o), None) for o in offsets]


class StoreAndLedgerContract:
    """Subclasses provide `store` and `root` (a key prefix private to the test)."""

    @pytest.fixture
    def clock(self):
        return Clock()

    @pytest.fixture
    def ledger(self, store, root, clock):
        return Ledger(store, prefix=f"{root}/deliveries", lease_seconds=30, policy=RetryPolicy(3, 2.0, 300.0),
                      clock=clock)

    # --- the storage layer --------------------------------------------------------------------
    def test_create_is_exclusive(self, store, root):
        key = f"{root}/x.json"
        etag = store.create(key, b"1")
        with pytest.raises(AlreadyExists):
            store.create(key, b"2")
        got = store.get(key)
        assert (got.body, got.etag) == (b"1", etag)

    def test_replace_is_compare_and_swap(self, store, root):
        key = f"{root}/y.json"
        e1 = store.create(key, b"1")
        e2 = store.replace(key, b"2", e1)
        with pytest.raises(PreconditionFailed):
            store.replace(key, b"3", e1)
        assert store.get(key).body == b"2" and store.get(key).etag == e2

    def test_a_conditional_write_repeated_with_its_token_is_recognised_as_landed(self, store, root):
        """A write whose reply was lost, repeated with the same writer token, is ours; another's is a race."""
        from aldebaran.storage.store import writer_token

        key, t1, t2 = f"{root}/token.json", writer_token(), writer_token()
        e1 = store.create(key, b"1", token=t1)
        assert store.create(key, b"1", token=t1) == e1
        with pytest.raises(AlreadyExists):
            store.create(key, b"1", token=writer_token())
        e2 = store.replace(key, b"2", e1, token=t2)
        assert store.replace(key, b"2", e1, token=t2) == e2
        store.replace(key, b"3", e2)
        with pytest.raises(PreconditionFailed):
            store.replace(key, b"2", e1, token=t2)  # ours landed, then another writer moved on
        assert store.get(key).body == b"3"

    def test_get_missing_raises_not_found(self, store, root):
        with pytest.raises(NotFound):
            store.get(f"{root}/missing.json")

    def test_list_is_ordered_and_starts_after(self, store, root):
        for i in (3, 1, 2, 10):
            store.put(f"{root}/l/{i:05d}", b"")
        keys = [o["Key"] for o in store.list(f"{root}/l/")]
        assert keys == [f"{root}/l/{i:05d}" for i in (1, 2, 3, 10)]
        assert [o["Key"] for o in store.list(f"{root}/l/", start_after=f"{root}/l/00002")] == \
            [f"{root}/l/00003", f"{root}/l/00010"]

    # --- runs: the group commit ---------------------------------------------------------------
    def test_a_run_is_claimed_once_and_recorded_in_one_write(self, ledger):
        epoch = ledger.take_partition("webhook", "alerts", 0, "w1")
        before = ledger.writes
        run = ledger.open_run(WEBHOOK, "alerts", 0, epoch, "w1", polled(range(100, 105)), 100)
        assert run.status == NEW and run.run.alerts[101] == alert(101)
        run.report({o: Outcome("delivered", {"status": 201}) for o in range(100, 105)})
        assert ledger.writes - before == 2  # claim + record, whatever the run's size
        rival = ledger.open_run(WEBHOOK, "alerts", 0, epoch, "w2", polled(range(100, 103)), 100, look=False)
        assert rival.status == CONTESTED  # the key comes from the first offset: one owner per range
        again = ledger.open_run(WEBHOOK, "alerts", 0, epoch, "w2", polled(range(100, 103)), 100)
        assert again.status == RECORDED_RUN and again.run.end == 104  # a replay skips the whole range
        stored, _ = ledger.get_run("webhook", "alerts", 0, 100)
        assert stored.state == RECORDED and stored.end == 104 and stored.counts() == {"D": 5}

    def test_failures_keep_their_own_record(self, ledger):
        run = ledger.open_run(WEBHOOK, "alerts", 1, 1, "w1", polled([7, 8, 9], malformed={9}), 100)
        assert [e[2] for e in run.run.entries] == [PENDING, PENDING, MALFORMED]
        run.report({7: Outcome("retry", error="HTTP 503"), 8: Outcome("permanent", error="HTTP 400")})
        assert ledger.get("webhook", f"{7:032x}")[0].state == RETRY
        assert ledger.get("webhook", f"{8:032x}")[0].state == DEAD
        assert ledger.get("webhook", f"{8:032x}")[0].alert == alert(8)
        assert ledger.indexed("retry", "webhook") == [f"{7:032x}"]
        assert ledger.indexed("dead", "webhook") == [f"{8:032x}"]
        stored, _ = ledger.get_run("webhook", "alerts", 1, 7)
        assert [e[2] for e in stored.entries] == [RETRYING, "X", MALFORMED]

    def test_a_newer_owner_adopts_an_unrecorded_run_and_fences_the_old_one(self, ledger):
        e1 = ledger.take_partition("bus", "alerts", 0, "old")
        old = ledger.open_run(BUS, "alerts", 0, e1, "old", polled([0, 1, 2]), 100)
        e2 = ledger.take_partition("bus", "alerts", 0, "new")
        assert e2 == e1 + 1
        assert ledger.open_run(BUS, "alerts", 0, e2, "new", polled([0, 1]), 100).status == WAIT  # not all polled
        new = ledger.open_run(BUS, "alerts", 0, e2, "new", polled([0, 1, 2]), 100)
        assert new.status == ADOPTED and new.previous == f"old (epoch {e1})"
        # The stale owner's record write cannot land past the new owner.
        with pytest.raises(Fenced):
            old.report({o: Outcome("delivered", {}) for o in (0, 1, 2)})
        new.report({o: Outcome("delivered", {}) for o in (0, 1, 2)})
        stored, _ = ledger.get_run("bus", "alerts", 0, 0)
        assert stored.state == RECORDED and stored.owner == "new" and stored.epoch == e2
        # ... and a stale owner meeting a newer epoch's run learns it is stale.
        newer, _ = ledger.get_run("bus", "alerts", 0, 0)
        newer.state = "CLAIMED"
        with pytest.raises(Fenced):
            newer.adopt(ledger.clock(), "old", e1)

    def test_concurrent_takes_of_a_partition_give_distinct_epochs(self, ledger):
        epochs = []

        def take(i):
            epochs.append(ledger.take_partition("email", "alerts", 3, f"w{i}"))

        threads = [threading.Thread(target=take, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(epochs) == [1, 2, 3, 4, 5, 6]

    def test_runs_are_found_by_offset_without_listing_everything(self, ledger):
        for start in (0, 10, 20, 30):
            assert ledger.open_run(WEBHOOK, "alerts", 2, 1, "w", polled(range(start, start + 10)), 10).status == NEW
        assert [r.start for r in ledger.runs("webhook", "alerts", 2, from_offset=20)] == [20, 30]
        assert ledger.run_covering("webhook", "alerts", 2, 25, max_run=10).start == 20
        assert ledger.run_covering("webhook", "alerts", 2, 99, max_run=10) is None

    def test_an_unreadable_run_names_its_key(self, ledger, store):
        key = ledger.run_key("webhook", "alerts", 0, 5)
        store.create(key, b"{not json")
        with pytest.raises(LedgerCorrupt, match="00000000000000000005"):
            ledger.get_run("webhook", "alerts", 0, 5)

    def test_a_run_on_a_channel_that_cannot_deduplicate_keeps_unknown_outcomes_in_doubt(self, ledger):
        run = ledger.open_run(SMS, "alerts", 0, 1, "w1", polled([3, 4, 5]), 100)
        run.report({3: Outcome("delivered", {"sid": "SM3"}), 4: Outcome("unknown", error="read timeout"),
                    5: Outcome("retry", error="HTTP 503")})
        stored, _ = ledger.get_run("sms", "alerts", 0, 3)
        assert [e[2] for e in stored.entries] == ["D", "U", RETRYING] and stored.state == RECORDED
        doubted, _ = ledger.get("sms", f"{4:032x}")
        assert doubted.state == IN_DOUBT and doubted.run == ledger.run_key("sms", "alerts", 0, 3)
        assert ledger.indexed("in_doubt", "sms") == [f"{4:032x}"] and ledger.indexed("retry", "sms") == [f"{5:032x}"]

    def test_a_sent_marker_is_taken_once_and_names_its_run(self, ledger):
        first, later = ledger.run_key("sms", "alerts", 0, 0), ledger.run_key("sms", "alerts", 0, 900_000)
        assert ledger.claim_sent("sms", ALERT.alert_id, first) is None
        assert ledger.claim_sent("sms", ALERT.alert_id, first) is None  # the same run again (after an adoption)
        assert ledger.claim_sent("sms", ALERT.alert_id, later) == first  # any later run: a repeat, however old
        wins = []

        def worker(i):
            if ledger.claim_sent("sms", "b" * 32, ledger.run_key("sms", "alerts", 0, i)) is None:
                wins.append(i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1

    # --- per-alert records --------------------------------------------------------------------
    def test_claim_once_then_deliver(self, ledger):
        first = ledger.attempt(SMS, ALERT, "w1")
        assert first.status == SEND and first.record.state == CLAIMED and first.record.attempt == 1
        assert ledger.attempt(SMS, ALERT, "w2").status == BUSY  # a live lease: a lost race is not an error
        assert first.report(Outcome("delivered", {"sid": "SM1"})) == "sent"
        stored, _ = ledger.get("sms", ALERT.alert_id)
        assert stored.state == DELIVERED and stored.receipt == {"sid": "SM1"} and stored.alert == ALERT
        assert ledger.attempt(SMS, ALERT, "w2").status == ALREADY

    def test_concurrent_claims_have_exactly_one_winner(self, ledger):
        wins = []

        def worker(i):
            if ledger.attempt(SMS, ALERT, f"w{i}").status == SEND:
                wins.append(i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1

    def test_retry_backoff_then_dead_after_max_attempts(self, ledger, clock):
        first = ledger.attempt(WEBHOOK, ALERT, "w1")
        assert first.report(Outcome("retry", error="HTTP 503")) == "failed"
        assert first.record.state == RETRY and first.record.next_at > clock.now
        assert ledger.indexed("retry", "webhook") == [ALERT.alert_id]
        assert ledger.retry(WEBHOOK, ALERT.alert_id, "w2").status == ALREADY  # not due yet
        clock.now = first.record.next_at
        second = ledger.retry(WEBHOOK, ALERT.alert_id, "w2")
        assert second.status == SEND and second.record.attempt == 2
        assert ledger.indexed("retry", "webhook")  # findable while in flight
        second.report(Outcome("unknown", error="timeout"))
        clock.now = second.record.next_at
        third = ledger.retry(WEBHOOK, ALERT.alert_id, "w3")
        assert third.report(Outcome("retry", error="HTTP 503")) == "failed" and third.record.state == DEAD
        assert ledger.indexed("retry", "webhook") == [] and ledger.indexed("dead", "webhook") == [ALERT.alert_id]

    def test_expired_lease_is_rescued_only_where_the_channel_dedupes(self, ledger, clock):
        ledger.attempt(WEBHOOK, ALERT, "w1")
        ledger.attempt(SMS, ALERT, "w1")
        clock.now += 31
        rescued = ledger.attempt(WEBHOOK, ALERT, "w2")
        assert rescued.status == SEND and rescued.record.attempt == 2 and rescued.record.owner == "w2"
        assert ledger.attempt(SMS, ALERT, "w2").status == DOUBT
        assert ledger.get("sms", ALERT.alert_id)[0].state == IN_DOUBT
        assert ledger.indexed("in_doubt", "sms") == [ALERT.alert_id]

    def test_in_doubt_settled_by_lookup(self, ledger, clock):
        for channel in (SMS, SMS2):
            assert ledger.attempt(channel, ALERT, "w1").report(Outcome("unknown", error="read timeout")) == "in_doubt"
        found = ledger.doubted(SMS, ALERT.alert_id)
        assert found.report_lookup({"sid": "SM9"})
        assert found.record.state == DELIVERED and found.record.receipt == {"sid": "SM9"}
        missing = ledger.doubted(SMS2, ALERT.alert_id)
        assert missing.report_lookup(None) and missing.record.state == RETRY and missing.record.next_at == clock.now
        assert ledger.indexed("in_doubt", "sms") == [] and ledger.indexed("retry", "sms2") == [ALERT.alert_id]
        assert ledger.doubted(SMS, ALERT.alert_id) is None  # it left IN_DOUBT

    def test_operator_resolves_an_in_doubt_delivery_with_a_reason(self, ledger, clock):
        ledger.attempt(SMS, ALERT, "w1")
        clock.now += 31
        assert ledger.attempt(SMS, ALERT, "w2").status == DOUBT
        with pytest.raises(ValueError):
            ledger.resolve("sms", ALERT.alert_id, DELIVERED, "   ", "ops")  # a reason is required
        record = ledger.resolve("sms", ALERT.alert_id, DELIVERED, "provider log shows SM123", "ops")
        assert record.state == DELIVERED and "provider log shows SM123" in record.history[-1]["note"]
        assert ledger.indexed("in_doubt", "sms") == []
        with pytest.raises(ValueError):
            ledger.resolve("sms", ALERT.alert_id, DEAD, "again", "ops")  # only IN_DOUBT/DEAD by hand

    def test_hostile_ids_cannot_escape_the_prefix(self, ledger):
        for bad in ("../../etc/passwd", "a/b", "x\x00y", "", ".."):
            with pytest.raises(ValueError):  # built without Alert's own validation: the ledger checks too
                ledger.attempt(WEBHOOK, Alert(bad, "OVERFILL", "x"), "w1")

    def test_repeat_entries_are_kept_but_not_sent(self, ledger):
        run = ledger.open_run(WEBHOOK, "alerts", 0, 1, "w", polled([1, 2]), 100, seen={alert(2).alert_id})
        assert [a.alert_id for a in (run.run.alerts[e[0]] for e in run.run.pending())] == [f"{1:032x}"]
        run.report({1: Outcome("delivered", {})})
        stored, _ = ledger.get_run("webhook", "alerts", 0, 1)
        assert [e[2] for e in stored.entries] == ["D", REPEAT] and stored.alert_ids() == [f"{1:032x}", f"{2:032x}"]


@pytest.mark.usefixtures("services_up")
class TestOnMinio(StoreAndLedgerContract):
    @pytest.fixture
    def store(self, services_up):
        from aldebaran.storage.store import S3Store

        return S3Store()

    @pytest.fixture
    def root(self, s3_prefix):
        return s3_prefix

    def test_botocore_retry_of_a_landed_put_is_recognised_as_ours(self, store, root):
        """The real path on MinIO: a conditional PUT lands, its reply is lost (failure injection below the
        client: the HTTP session raises after sending), botocore retries the same request and gets 412;
        the storage layer reads the object back, finds its token, and returns its ETag."""
        from tests.integration.fault_s3 import LostReplyFaultInjection

        with LostReplyFaultInjection(store) as fault:
            key = f"{root}/lost-reply.json"
            etag = store.create(key, b"1")
            assert fault.lost == [200] and fault.retried == [412] and store.get(key).etag == etag
            fault.arm()
            etag2 = store.replace(key, b"2", etag)
            assert fault.lost == [200] and store.get(key).etag == etag2 and store.get(key).body == b"2"
            fault.arm()
            with pytest.raises(PreconditionFailed):  # a lost reply to a write that failed is still a race
                store.replace(key, b"3", etag)
            assert fault.lost == [412]


class TestOnLocalDirectory(StoreAndLedgerContract):
    @pytest.fixture
    def store(self, tmp_path):
        return LocalStore(tmp_path / "store")

    @pytest.fixture
    def root(self):
        return "tests/local"
