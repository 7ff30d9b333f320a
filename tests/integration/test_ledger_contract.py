"""One contract, two backends: the storage layer and the group-commit delivery ledger on S3 (real MinIO)
and on a local directory (eventsourcing's shape: one abstract case, one subclass per backend)."""

from __future__ import annotations

import threading

import pytest

from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import CLAIMED, DEAD, DELIVERED, IN_DOUBT, RETRY, RetryPolicy
from aldebaran.delivery.runs import MALFORMED, PENDING, RECORDED, REPEAT, RETRYING, Run
from aldebaran.exceptions import AlreadyExists, Fenced, LedgerCorrupt, NotFound, PreconditionFailed
from aldebaran.storage import LocalStore

ALERT = {"alert_id": "a" * 32, "kind": "OVERFILL", "order_id": "1"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Outcome:
    """The shape channels report (aldebaran.delivery.channels.Outcome), built here for the ledger alone."""

    def __init__(self, status, receipt=None, error=None):
        self.status, self.receipt, self.error = status, receipt, error


def alert(i: int) -> dict:
    return {"alert_id": f"{i:032x}", "kind": "OVERFILL", "order_id": str(i)}


def entries(offsets, status=PENDING):
    return [[o, f"{o:032x}", status, None] for o in offsets]


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
        run = Run.claim("webhook", "alerts", 0, entries(range(100, 105)), epoch, "w1", ledger.clock())
        before = ledger.writes
        etag = ledger.claim_run(run)
        assert etag
        outcomes = {o: Outcome("delivered", {"status": 201}) for o in range(100, 105)}
        ledger.record_run(run, etag, outcomes, {o: alert(o) for o in range(100, 105)})
        assert ledger.writes - before == 2  # claim + record, whatever the run's size
        rival = Run.claim("webhook", "alerts", 0, entries(range(100, 103)), epoch, "w2", ledger.clock())
        assert ledger.claim_run(rival) is None  # the key comes from the first offset: one owner per range
        stored, _ = ledger.get_run("webhook", "alerts", 0, 100)
        assert stored.state == RECORDED and stored.end == 104 and stored.counts() == {"D": 5}

    def test_failures_keep_their_own_record(self, ledger):
        run = Run.claim("webhook", "alerts", 1, entries([7, 8, 9]), 1, "w1", ledger.clock())
        run.entries[2][2] = MALFORMED
        etag = ledger.claim_run(run)
        outcomes = {7: Outcome("retry", error="HTTP 503"), 8: Outcome("permanent", error="HTTP 400")}
        ledger.record_run(run, etag, outcomes, {7: alert(7), 8: alert(8)})
        assert ledger.get("webhook", f"{7:032x}")[0].state == RETRY
        assert ledger.get("webhook", f"{8:032x}")[0].state == DEAD
        assert ledger.indexed("retry", "webhook") == [f"{7:032x}"]
        assert ledger.indexed("dead", "webhook") == [f"{8:032x}"]
        stored, _ = ledger.get_run("webhook", "alerts", 1, 7)
        assert [e[2] for e in stored.entries] == [RETRYING, "X", MALFORMED]

    def test_a_newer_owner_adopts_an_unrecorded_run_and_fences_the_old_one(self, ledger):
        e1 = ledger.take_partition("bus", "alerts", 0, "old")
        run = Run.claim("bus", "alerts", 0, entries([0, 1, 2]), e1, "old", ledger.clock())
        old_etag = ledger.claim_run(run)
        e2 = ledger.take_partition("bus", "alerts", 0, "new")
        assert e2 == e1 + 1
        found, etag = ledger.get_run("bus", "alerts", 0, 0)
        found.adopt(ledger.clock(), "new", e2)
        new_etag = ledger.save_run(found, etag)
        # The stale owner's record write cannot land past the new owner.
        with pytest.raises(Fenced):
            ledger.record_run(run, old_etag, {o: Outcome("delivered", {}) for o in (0, 1, 2)},
                              {o: alert(o) for o in (0, 1, 2)})
        ledger.record_run(found, new_etag, {o: Outcome("delivered", {}) for o in (0, 1, 2)},
                          {o: alert(o) for o in (0, 1, 2)})
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
            run = Run.claim("webhook", "alerts", 2, entries(range(start, start + 10)), 1, "w", ledger.clock())
            ledger.claim_run(run)
        assert [r.start for r in ledger.runs("webhook", "alerts", 2, from_offset=20)] == [20, 30]
        assert ledger.run_covering("webhook", "alerts", 2, 25, max_run=10).start == 20
        assert ledger.run_covering("webhook", "alerts", 2, 99, max_run=10) is None

    def test_an_unreadable_run_names_its_key(self, ledger, store):
        key = ledger.run_key("webhook", "alerts", 0, 5)
        store.create(key, b"{not json")
        with pytest.raises(LedgerCorrupt, match="00000000000000000005"):
            ledger.get_run("webhook", "alerts", 0, 5)

    def test_a_run_on_a_channel_that_cannot_deduplicate_keeps_unknown_outcomes_in_doubt(self, ledger):
        run = Run.claim("sms", "alerts", 0, entries([3, 4, 5]), 1, "w1", ledger.clock())
        etag = ledger.claim_run(run)
        outcomes = {3: Outcome("delivered", {"sid": "SM3"}), 4: Outcome("unknown", error="read timeout"),
                    5: Outcome("retry", error="HTTP 503")}
        ledger.record_run(run, etag, outcomes, {o: alert(o) for o in (3, 4, 5)}, can_dedupe=False)
        stored, _ = ledger.get_run("sms", "alerts", 0, 3)
        assert [e[2] for e in stored.entries] == ["D", "U", RETRYING] and stored.state == RECORDED
        doubted, _ = ledger.get("sms", f"{4:032x}")
        assert doubted.state == IN_DOUBT and doubted.run == ledger.run_key("sms", "alerts", 0, 3)
        assert ledger.indexed("in_doubt", "sms") == [f"{4:032x}"] and ledger.indexed("retry", "sms") == [f"{5:032x}"]

    def test_a_sent_marker_is_taken_once_and_names_its_run(self, ledger):
        first, later = ledger.run_key("sms", "alerts", 0, 0), ledger.run_key("sms", "alerts", 0, 900_000)
        assert ledger.mark_sent("sms", ALERT["alert_id"], first)
        assert ledger.mark_sent("sms", ALERT["alert_id"], first)  # the same run again (after an adoption): its own
        assert not ledger.mark_sent("sms", ALERT["alert_id"], later)  # any later run: a repeat, however old
        wins = []

        def worker(i):
            if ledger.mark_sent("sms", "b" * 32, ledger.run_key("sms", "alerts", 0, i)):
                wins.append(i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1

    # --- per-alert records --------------------------------------------------------------------
    def test_claim_once_then_deliver(self, ledger):
        record, etag = ledger.claim("sms", ALERT, "w1")
        assert record.state == CLAIMED and record.attempt == 1
        assert ledger.claim("sms", ALERT, "w2") is None  # a lost race is not an error
        ledger.settle(record, etag, Outcome("delivered", {"sid": "SM1"}), can_dedupe=False)
        stored, _ = ledger.get("sms", ALERT["alert_id"])
        assert stored.state == DELIVERED and stored.receipt == {"sid": "SM1"}

    def test_concurrent_claims_have_exactly_one_winner(self, ledger):
        wins = []

        def worker(i):
            if ledger.claim("sms", ALERT, f"w{i}") is not None:
                wins.append(i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1

    def test_retry_backoff_then_dead_after_max_attempts(self, ledger, clock):
        record, etag = ledger.claim("webhook", ALERT, "w1")
        rec = ledger.settle(record, etag, Outcome("retry", error="HTTP 503"), can_dedupe=True)
        assert rec.state == RETRY and rec.next_at > clock.now
        assert ledger.indexed("retry", "webhook") == [ALERT["alert_id"]]
        clock.now = rec.next_at
        record, etag = ledger.take_over(*ledger.get("webhook", ALERT["alert_id"]), "w2", can_dedupe=True)
        assert record.attempt == 2 and ledger.indexed("retry", "webhook")  # findable while in flight
        clock.now = ledger.settle(record, etag, Outcome("unknown", error="timeout"), can_dedupe=True).next_at
        record, etag = ledger.take_over(*ledger.get("webhook", ALERT["alert_id"]), "w3", can_dedupe=True)
        assert ledger.settle(record, etag, Outcome("retry", error="HTTP 503"), can_dedupe=True).state == DEAD
        assert ledger.indexed("retry", "webhook") == [] and ledger.indexed("dead", "webhook") == [ALERT["alert_id"]]

    def test_expired_lease_is_rescued_only_where_the_channel_dedupes(self, ledger, clock):
        ledger.claim("webhook", ALERT, "w1")
        ledger.claim("sms", ALERT, "w1")
        clock.now += 31
        rescued, _ = ledger.take_over(*ledger.get("webhook", ALERT["alert_id"]), "w2", can_dedupe=True)
        assert rescued.attempt == 2 and rescued.owner == "w2"
        assert ledger.take_over(*ledger.get("sms", ALERT["alert_id"]), "w2", can_dedupe=False) is None
        assert ledger.get("sms", ALERT["alert_id"])[0].state == IN_DOUBT
        assert ledger.indexed("in_doubt", "sms") == [ALERT["alert_id"]]

    def test_in_doubt_settled_by_lookup(self, ledger, clock):
        for channel in ("sms", "sms2"):
            record, etag = ledger.claim(channel, ALERT, "w1")
            ledger.settle(record, etag, Outcome("unknown", error="read timeout"), can_dedupe=False)
        found = ledger.settle_by_lookup(*ledger.get("sms", ALERT["alert_id"]), {"sid": "SM9"})
        assert found.state == DELIVERED and found.receipt == {"sid": "SM9"}
        missing = ledger.settle_by_lookup(*ledger.get("sms2", ALERT["alert_id"]), None)
        assert missing.state == RETRY and missing.next_at == clock.now
        assert ledger.indexed("in_doubt", "sms") == [] and ledger.indexed("retry", "sms2") == [ALERT["alert_id"]]

    def test_operator_resolves_an_in_doubt_delivery_with_a_reason(self, ledger, clock):
        ledger.claim("sms", ALERT, "w1")
        clock.now += 31
        assert ledger.take_over(*ledger.get("sms", ALERT["alert_id"]), "w2", can_dedupe=False) is None
        with pytest.raises(ValueError):
            ledger.resolve("sms", ALERT["alert_id"], DELIVERED, "   ", "ops")  # a reason is required
        record = ledger.resolve("sms", ALERT["alert_id"], DELIVERED, "provider log shows SM123", "ops")
        assert record.state == DELIVERED and "provider log shows SM123" in record.history[-1]["note"]
        assert ledger.indexed("in_doubt", "sms") == []
        with pytest.raises(ValueError):
            ledger.resolve("sms", ALERT["alert_id"], DEAD, "again", "ops")  # only IN_DOUBT/DEAD by hand

    def test_hostile_ids_cannot_escape_the_prefix(self, ledger):
        for bad in ("../../etc/passwd", "a/b", "x\x00y", "", ".."):
            with pytest.raises(ValueError):
                ledger.claim("webhook", {**ALERT, "alert_id": bad}, "w1")

    def test_repeat_entries_are_kept_but_not_sent(self, ledger):
        run = Run.claim("webhook", "alerts", 0, entries([1, 2]), 1, "w", ledger.clock())
        run.entries[1][2] = REPEAT
        etag = ledger.claim_run(run)
        ledger.record_run(run, etag, {1: Outcome("delivered", {})}, {1: alert(1)})
        stored, _ = ledger.get_run("webhook", "alerts", 0, 1)
        assert [e[2] for e in stored.entries] == ["D", REPEAT] and stored.alert_ids() == [f"{1:032x}", f"{2:032x}"]


@pytest.mark.usefixtures("services_up")
class TestOnMinio(StoreAndLedgerContract):
    @pytest.fixture
    def store(self, services_up):
        from aldebaran.storage import S3Store

        return S3Store()

    @pytest.fixture
    def root(self, s3_prefix):
        return s3_prefix


class TestOnLocalDirectory(StoreAndLedgerContract):
    @pytest.fixture
    def store(self, tmp_path):
        return LocalStore(tmp_path / "store")

    @pytest.fixture
    def root(self):
        return "tests/local"
