"""Hostile stored objects found by `aldebaran chaos fuzz` (issue 37 item 6), each at its reader's boundary.

- a delivery record, run or partition owner nested deeper than the JSON parser recurses raised
  RecursionError through the dispatcher (now LedgerCorrupt: quarantined like any corrupt object);
- an odd index key of 250 characters fits the store, its quarantine copy's ``.why.json`` did not: the
  sweep failed on it at every turn (now the copy goes by the key's digest);
- a heartbeat that is not JSON, or not an object, or has an ill-typed field, crashed every supervisor
  reading it (now: read as no heartbeat, logged);
- a corrupt checkpoint lease crashed the auditor's start and the supervisors (now: read as ``corrupt``,
  quarantined and revoked by the next taker, free after its ttl);
- a corrupt plan.json raised KeyError/TypeError at the auditor's start (now AuditorError with the reason).
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from aldebaran.runtime import heartbeat, lease
from aldebaran.storage import quarantine
from aldebaran.audit.sparkjob.plans import Plan, read_recorded, write_recorded
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import Record, RetryPolicy
from aldebaran.delivery.runs import Run
from aldebaran.exceptions import AuditorError, LeaseHeld, LedgerCorrupt, ObjectStoreError
from aldebaran.storage.store import LocalStore

DEEP = [b"[" * 100_000, b'{"a":' * 20_000 + b"1" + b"}" * 20_000]


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "store")


@pytest.mark.parametrize("body", DEEP, ids=["arrays", "objects"])
def test_a_record_or_run_nested_too_deep_is_corrupt_not_a_recursion_error(body):
    with pytest.raises(LedgerCorrupt):
        Record.from_bytes(body, "k")
    with pytest.raises(LedgerCorrupt):
        Run.from_bytes(body, "k")


def test_an_owner_nested_too_deep_is_quarantined_and_replaced(store):
    ledger = Ledger(store, prefix="d", policy=RetryPolicy(5, 1.0, 1.0))
    key = ledger.owner_key("log", "alerts", 0)
    store.put(key, DEEP[0])
    assert ledger.take_partition("log", "alerts", 0, "me") > 1_000_000_000_000  # a fresh epoch
    assert [w["key"] for w in quarantine.listed(store, ledger.quarantine_prefix())] == [key]


class NameLimitStoreFake:
    """A store that refuses a key with a segment over 255 bytes, as MinIO does (its disk layout's file names)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, body: bytes, content_type: str = "application/json") -> str:
        if any(len(part.encode()) > 255 for part in key.split("/")):
            raise ObjectStoreError(f"s3://fake/{key[:40]}...: XMinioInvalidObjectName")
        self.objects[key] = body
        return '"etag"'

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def uri(self, key: str) -> str:
        return f"s3://fake/{key}"


def test_an_odd_index_key_near_the_name_limit_is_quarantined_by_digest():
    store = NameLimitStoreFake()
    odd = "d-index/retry/log/" + "x" * 248 + ".."  # odd (".."); 250 bytes fit, its copy's .why.json would not
    store.put(odd, b"")
    # The store's refusal (an ObjectStoreError, as in an outage) failed the sweep at every turn.
    where = quarantine.quarantine(store, odd, "odd index key", "me", b"", prefix="d-quarantine/")
    assert where.startswith("d-quarantine/odd/") and json.loads(store.objects[where + quarantine.WHY])["key"] == odd
    assert odd not in store.objects
    assert quarantine.copy_key(odd, "d-quarantine/") == where and quarantine.copy_key("a/b") == "quarantine/a/b"


@pytest.mark.parametrize("body, reason", [
    (b"{not json", "not JSON"), (b"\xff", "not JSON"), (DEEP[0], "not JSON"), (b"null", "not an object"),
    (b"[]", "not an object"), (b'{"at": "soon"}', "field 'at'"), (b'{"at": 1e999}', "field 'at'"),
    (b'{"pid": 9223372036854775808}', "field 'pid'"), (b'{"pid": true}', "field 'pid'"),
    (b'{"channels": [1]}', "channels"), (b'{"progress": {"w": {"progress_at": "x"}}}', "progress"),
    # ints beyond a float's range: every reader's arithmetic would raise OverflowError
    (b'{"at": 1' + b"0" * 400 + b"}", "field 'at'"),
    (b'{"progress": {"w": {"progress_at": 1' + b"0" * 400 + b"}}}", "progress"),
])
def test_a_corrupt_heartbeat_reads_as_none_and_is_logged(store, caplog, body, reason):
    store.put(heartbeat.key(heartbeat.DISPATCHER, "w1"), body)
    with caplog.at_level(logging.WARNING, "aldebaran.runtime.heartbeat"):
        assert heartbeat.read(store, heartbeat.DISPATCHER, "w1") is None
        assert heartbeat.read_all(store, heartbeat.DISPATCHER) == [{}]
    assert reason in caplog.text and "w1.json" in caplog.text


def test_a_good_heartbeat_reads_as_written(store):
    body = {"host": "h", "pid": 42, "at": 1.5, "channels": ["log"], "progress": {"log": {"progress_at": 1.0}}}
    heartbeat.publish(store, heartbeat.DISPATCHER, "w1", body)
    assert heartbeat.read(store, heartbeat.DISPATCHER, "w1") == body


@pytest.mark.parametrize("body", [b"{oops", b"[]", DEEP[0], b'{"state": "held", "expires_at": Infinity}',
                                  b'{"state": "held", "expires_at": 1, "generation": "x"}', b'{"state": 7}',
                                  # an int beyond a float's range (found by `chaos fuzz`: OverflowError)
                                  b'{"state": "held", "expires_at": 1' + b"0" * 400 + b"}",
                                  b'{"state": "held", "expires_at": 1, "renewed_at": 1' + b"0" * 400 + b"}"])
def test_a_corrupt_lease_is_quarantined_and_revoked_for_one_ttl(store, body):
    checkpoint = "s3a://b/cp"
    key = lease.lease_key(checkpoint)
    store.put(key, body)
    record, _ = lease.read(store, checkpoint)
    assert record["state"] == lease.CORRUPT and "cannot be read" in lease.describe(record) + record["note"]
    assert not lease.is_free(record, time.time())
    with pytest.raises(LeaseHeld, match="revoked"):  # a holder may still run: not taken at once
        lease.acquire(store, checkpoint, "q", ttl_seconds=30.0)
    [why] = quarantine.listed(store)
    assert why["key"] == key and store.get(why["copy"]).body == body
    store.put(key, body)  # corrupt again; a short ttl: the taker waits it out, then holds the lease
    got = lease.acquire(store, checkpoint, "q", ttl_seconds=0.05, wait_seconds=2.0, poll=0.02)
    assert got.record["state"] == lease.HELD and got.record["generation"] == 1


def test_a_supervisor_ending_a_corrupt_lease_sets_it_aside(store):
    store.put(lease.lease_key("s3a://b/cp"), b"\x00")
    assert lease.end(store, "s3a://b/cp", lease.BROKEN, "holder dead") is None
    record, _ = lease.read(store, "s3a://b/cp")
    assert record["state"] == lease.REVOKED and lease.is_free(record, time.time() + 0.01)


@pytest.mark.parametrize("doc", [b"{", b"[]", b"{}", b'{"plan": "copartitioned"}',
                                 b'{"plan": "shuffle", "shards": "4"}',
                                 b'{"plan": "shuffle", "shards": 1e999}', b'{"plan": "x", "shards": 2}',
                                 b'{"plan": "copartitioned", "shards": 2, "partitioner": []}', DEEP[1]])
def test_a_corrupt_plan_stops_the_auditor_with_the_reason(tmp_path, doc):
    root = tmp_path / "books"
    root.mkdir()
    (root / "plan.json").write_bytes(doc)
    with pytest.raises(AuditorError, match="plan.json .* cannot be read"):
        read_recorded(str(root))


def test_a_recorded_plan_reads_back(tmp_path):
    root = tmp_path / "books"
    root.mkdir()
    write_recorded(str(root), Plan("copartitioned", 6, partitioner="crc32"))
    assert read_recorded(str(root)) == Plan("copartitioned", 6, partitioner="crc32")
    (root / "plan.json").write_text(json.dumps({"plan": "shuffle", "shards": 3, "partitioner": "spark-hash"}))
    assert read_recorded(str(root)) == Plan("shuffle", 3, partitioner=None)
