"""One contract, two ledger backends: S3 (real MinIO) and a local directory."""

from __future__ import annotations

import threading

import pytest

from aldebaran.delivery.backends import LocalBackend, S3Backend
from aldebaran.delivery.ledger import CLAIMED, DEAD, DELIVERED, IN_DOUBT, RETRY, Ledger
from aldebaran.exceptions import AlreadyExists, NotFound, PreconditionFailed

ALERT = {"alert_id": "a" * 32, "kind": "OVERFILL", "order_id": "1"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class LedgerContract:
    """Subclasses provide `backend`."""

    @pytest.fixture
    def backend(self):
        raise NotImplementedError

    @pytest.fixture
    def clock(self):
        return Clock()

    @pytest.fixture
    def ledger(self, backend, clock, unique):
        return Ledger(backend, prefix=f"tests/{unique}/deliveries", lease_seconds=30, max_attempts=3, clock=clock)

    def test_create_is_exclusive(self, backend, unique):
        key = f"tests/{unique}/x.json"
        etag = backend.create(key, b"1")
        with pytest.raises(AlreadyExists):
            backend.create(key, b"2")
        assert backend.get(key) == (b"1", etag)

    def test_replace_is_compare_and_swap(self, backend, unique):
        key = f"tests/{unique}/y.json"
        e1 = backend.create(key, b"1")
        e2 = backend.replace(key, b"2", e1)
        with pytest.raises(PreconditionFailed):
            backend.replace(key, b"3", e1)
        assert backend.get(key) == (b"2", e2)

    def test_get_missing_raises_not_found(self, backend, unique):
        with pytest.raises(NotFound):
            backend.get(f"tests/{unique}/missing.json")

    def test_claim_once_then_deliver(self, ledger):
        claim = ledger.claim("webhook", ALERT, "w1")
        assert claim.record.state == CLAIMED and claim.record.attempt == 1
        assert ledger.claim("webhook", ALERT, "w2") is None  # a lost race is not an error
        ledger.delivered(claim, {"status": 200})
        record, _ = ledger.get("webhook", ALERT["alert_id"])
        assert record.state == DELIVERED and record.receipt == {"status": 200}
        assert ledger.stats("webhook")["delivered"] == 1

    def test_concurrent_claims_have_exactly_one_winner(self, ledger):
        wins = []

        def worker(i):
            if ledger.claim("email", ALERT, f"w{i}") is not None:
                wins.append(i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1

    def test_retry_backoff_then_dead_after_max_attempts(self, ledger, clock):
        claim = ledger.claim("webhook", ALERT, "w1")
        rec = ledger.failed(claim, "HTTP 503")
        assert rec.state == RETRY and rec.next_at > clock.now
        assert ledger.reclaim("webhook", ALERT["alert_id"], "w2", can_dedupe=True) is None  # not due yet
        clock.now = rec.next_at
        claim = ledger.reclaim("webhook", ALERT["alert_id"], "w2", can_dedupe=True)
        assert claim.record.attempt == 2
        clock.now = ledger.failed(claim, "HTTP 503").next_at
        claim = ledger.reclaim("webhook", ALERT["alert_id"], "w3", can_dedupe=True)
        assert ledger.failed(claim, "HTTP 503").state == DEAD  # attempt 3 of 3

    def test_expired_lease_is_rescued_only_where_the_channel_dedupes(self, ledger, clock):
        ledger.claim("webhook", ALERT, "w1")
        ledger.claim("sms", ALERT, "w1")
        clock.now += 31
        rescued = ledger.reclaim("webhook", ALERT["alert_id"], "w2", can_dedupe=True)
        assert rescued.record.attempt == 2 and rescued.record.owner == "w2"
        assert ledger.reclaim("sms", ALERT["alert_id"], "w2", can_dedupe=False) is None
        record, _ = ledger.get("sms", ALERT["alert_id"])
        assert record.state == IN_DOUBT

    def test_hostile_ids_cannot_escape_the_prefix(self, ledger):
        for bad in ("../../etc/passwd", "a/b", "x\x00y", "", ".."):
            with pytest.raises(ValueError):
                ledger.claim("webhook", {**ALERT, "alert_id": bad}, "w1")


@pytest.mark.usefixtures("services_up")
class TestS3Ledger(LedgerContract):
    """The hot path through aldebaran.s3lite (static credentials, as configured here)."""

    @pytest.fixture
    def backend(self, store, s3_prefix):
        backend = S3Backend(store)
        assert backend.fast is not None
        return backend


@pytest.mark.usefixtures("services_up")
class TestS3LedgerBoto3(LedgerContract):
    """The same contract through boto3 (the path used with the AWS default credential chain)."""

    @pytest.fixture
    def backend(self, store, s3_prefix):
        backend = S3Backend(store)
        backend.fast = None
        return backend


class TestLocalLedger(LedgerContract):
    @pytest.fixture
    def backend(self, tmp_path):
        return LocalBackend(tmp_path / "ledger")


@pytest.mark.usefixtures("services_up")
def test_operator_resolves_an_in_doubt_delivery_with_a_reason(store, s3_prefix):
    clock = Clock()
    ledger = Ledger(S3Backend(store), prefix=f"{s3_prefix}/deliveries", lease_seconds=5, clock=clock)
    ledger.claim("sms", ALERT, "w1")
    clock.now += 6
    assert ledger.reclaim("sms", ALERT["alert_id"], "w2", can_dedupe=False) is None
    assert ledger.indexed("in_doubt", "sms") == [ALERT["alert_id"]]
    with pytest.raises(ValueError):
        ledger.resolve("sms", ALERT["alert_id"], DELIVERED, "   ", "ops")  # a reason is required
    record = ledger.resolve("sms", ALERT["alert_id"], DELIVERED, "provider log shows SM123", "ops")
    assert record.state == DELIVERED and "provider log shows SM123" in record.history[-1]["note"]
    assert ledger.indexed("in_doubt", "sms") == []
    with pytest.raises(ValueError):
        ledger.resolve("sms", ALERT["alert_id"], DEAD, "again", "ops")  # only IN_DOUBT/DEAD can be resolved
