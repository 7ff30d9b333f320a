"""A 412 after a landed write, for each conditional writer, against real MinIO: runs, records, the checkpoint
lease and the partition owner.

Each write goes through botocore's real HTTP session with a failure injection (tests/integration/fault_s3.py):
the first PUT lands and its reply is dropped, botocore retries the same request and MinIO answers 412 (its
condition no longer holds: the object is the write's own). Every assertion pins both halves: the injection
really met a landed write (`lost == [200]`) and the retry really got 412 (`retried == [412]`), and the writer
took the object for its own write (its writer token, read back): not Fenced, LeaseLost, LeaseHeld, BUSY or a
lost race. The storage layer's own case is tests/integration/test_ledger_contract.py (TestOnMinio); the same
writers against an in-memory fake of the client are in tests/unit/aldebaran/storage/test_writer_token.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from aldebaran.runtime import lease as leases
from aldebaran.delivery import handles
from aldebaran.delivery.channels.base import Outcome
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import CLAIMED, DELIVERED
from aldebaran.delivery.runs import RECORDED
from aldebaran.model import Alert
from tests.integration.fault_s3 import LostReplyFaultInjection, key_is

# What the ledger reads of a channel: its name and whether it deduplicates.
WEBHOOK = SimpleNamespace(name="webhook", can_dedupe=True)
SMS = SimpleNamespace(name="sms", can_dedupe=False)
TOPIC = "alerts"


def alert(i: int) -> Alert:
    return Alert.from_dict({"alert_id": f"{i:032x}", "kind": "OVERFILL", "order_id": str(i)})


@pytest.fixture
def s3(store):
    from aldebaran.storage.store import S3Store

    assert isinstance(store, S3Store), "these tests inject below botocore: they need the S3 backend"
    return store


@pytest.fixture
def ledger(s3, s3_prefix):
    return Ledger(s3, prefix=f"{s3_prefix}/deliveries", lease_seconds=30)


def assert_landed_then_412(fault: LostReplyFaultInjection) -> None:
    assert fault.lost == [200], f"the injected PUT did not land: {fault.lost}"
    assert fault.retried == [412], f"botocore's retry did not meet the landed write: {fault.retried}"


def test_runs_a_claim_an_adoption_and_a_record_whose_replies_were_lost_are_ours(s3, ledger):
    polled = [(o, None, alert(o), None) for o in range(3)]
    key = ledger.run_key(SMS.name, TOPIC, 0, 0)
    with LostReplyFaultInjection(s3, key_is(key)) as fault:
        # The claim (If-None-Match: *): NEW, not CONTESTED (another worker's run).
        first = ledger.open_run(SMS, TOPIC, 0, 1, "first", polled, 16)
        assert_landed_then_412(fault)
        assert first.status == handles.NEW
        # An adoption by a newer owner (If-Match): ADOPTED, not Fenced.
        fault.arm()
        second = ledger.open_run(SMS, TOPIC, 0, 2, "second", polled, 16)
        assert_landed_then_412(fault)
        assert second.status == handles.ADOPTED and second.run.owner == "second"
        # The record (If-Match, the handle's writer token): recorded, not Fenced.
        fault.arm()
        second.report({o: Outcome.delivered(alert(o).alert_id, {"n": o}) for o in range(3)})
        assert_landed_then_412(fault)
    run, etag = ledger.get_run(SMS.name, TOPIC, 0, 0)
    assert run.state == RECORDED and run.owner == "second" and etag == second.etag


def test_records_a_claim_and_a_report_whose_replies_were_lost_are_ours(s3, ledger):
    a = alert(7)
    key = ledger.key(WEBHOOK.name, a.alert_id)
    with LostReplyFaultInjection(s3, key_is(key)) as fault:
        # The claim (If-None-Match: *): SEND, not BUSY (another worker's live claim) or ALREADY.
        attempt = ledger.attempt(WEBHOOK, a, "w")
        assert_landed_then_412(fault)
        assert attempt.status == handles.SEND and attempt.record.state == CLAIMED
        # The outcome (If-Match): "sent", not BUSY (the record moved under this worker).
        fault.arm()
        assert attempt.report(Outcome.delivered(a.alert_id, {"status": 201})) == "sent"
        assert_landed_then_412(fault)
    record, etag = ledger.get(WEBHOOK.name, a.alert_id)
    assert record.state == DELIVERED and record.attempt == 1 and etag == attempt.etag


def test_the_lease_an_acquire_and_a_renewal_whose_replies_were_lost_are_ours(s3, s3_prefix):
    cp = f"s3a://{s3.bucket}/{s3_prefix}/checkpoint"
    key = leases.lease_key(cp)
    try:
        with LostReplyFaultInjection(s3, key_is(key)) as fault:
            # The create: held by us, generation 1, not LeaseHeld (by "another" auditor: our own write).
            held = leases.acquire(s3, cp, "q", ttl_seconds=30)
            assert_landed_then_412(fault)
            assert held.record["generation"] == 1
            # A renewal (If-Match): not LeaseLost.
            fault.arm()
            held.renew()
            assert_landed_then_412(fault)
            assert held.lost is None and held.unsure is None
        record, etag = leases.read(s3, cp)
        assert etag == held.etag and record["owner"] == held.record["owner"] and record["state"] == leases.HELD
        held.check()
        held.renew()  # the next renewal follows from the landed one's ETag
        held.release()
        assert leases.read(s3, cp)[0]["state"] == leases.RELEASED
    finally:
        s3.delete(key)  # the lease lives beside the checkpoint's key space, not under the test's prefix


def test_the_partition_owner_a_first_take_and_a_takeover_whose_replies_were_lost_are_ours(s3, ledger):
    key = ledger.owner_key(WEBHOOK.name, TOPIC, 0)
    with LostReplyFaultInjection(s3, key_is(key)) as fault:
        # The create: epoch 1. Taken for a race, the taker would read its own object and write epoch 2.
        assert ledger.take_partition(WEBHOOK.name, TOPIC, 0, "first") == 1
        assert_landed_then_412(fault)
        # The takeover (If-Match): epoch 2, not a third write on top of its own (epoch 3).
        fault.arm()
        assert ledger.take_partition(WEBHOOK.name, TOPIC, 0, "second") == 2
        assert_landed_then_412(fault)
    owner = json.loads(s3.get(key).body)
    assert owner["epoch"] == 2 and owner["owner"] == "second"
