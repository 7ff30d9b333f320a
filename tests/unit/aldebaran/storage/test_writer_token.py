"""A conditional write whose reply was lost is recognised by its writer token on read-back, never taken
for a lost race (aldebaran.storage.store), while a genuine race with another writer still is one.

S3Store runs against ``LostReplyFakeClient``, a failure-injection fake of boto3's S3 client: it keeps
objects in memory with S3's conditional-PUT semantics and, when told to, plays what botocore does when a
PUT lands and its reply is lost: the first attempt is stored, the connection "drops", botocore's retry
(the same request, the same metadata) meets the object and gets 412, reported with RetryAttempts=1.
LocalStore, which has no lost replies of its own, is held to the same contract through explicit tokens.
"""

from __future__ import annotations

import hashlib
import threading
from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError

from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.runs import RECORDED, Run
from aldebaran.exceptions import AlreadyExists, NotFound, PreconditionFailed
from aldebaran.storage.store import WRITER, LocalStore, S3Store, writer_token


class LostReplyFakeClient:
    """Failure injection: an in-memory S3 client whose next `lose` PUTs lose their connection and are retried
    once by "botocore" (that retry is what answers the caller). `lands`: the first attempt was stored before
    the connection dropped (else it never reached the store); `meanwhile`: another writer's turn between."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, str, dict]] = {}
        self.lose = 0
        self.lands = True
        self.meanwhile = None
        self.puts = 0
        self.heads = 0

    @staticmethod
    def _error(status: int, code: str, attempts: int) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": code},
                            "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": attempts}}, "PutObject")

    def _put_once(self, Key, Body, Metadata=None, IfNoneMatch=None, IfMatch=None, attempts=0, **_):
        self.puts += 1
        current = self.objects.get(Key)
        if IfNoneMatch == "*" and current is not None:
            raise self._error(412, "PreconditionFailed", attempts)
        if IfMatch is not None and (current is None or current[1] != IfMatch):
            raise self._error(412 if current is not None else 404, "PreconditionFailed", attempts)
        etag = '"' + hashlib.md5(Body + str(self.puts).encode()).hexdigest() + '"'
        self.objects[Key] = (Body, etag, dict(Metadata or {}))
        return {"ETag": etag, "ResponseMetadata": {"HTTPStatusCode": 200, "RetryAttempts": attempts}}

    def put_object(self, Bucket, **kwargs):
        if self.lose:
            self.lose -= 1
            if self.lands:
                self._put_once(**kwargs)  # lands; its reply never arrives
            if self.meanwhile is not None:
                self.meanwhile()
            return self._put_once(**kwargs, attempts=1)  # botocore's retry of the same request
        return self._put_once(**kwargs)

    def head_object(self, Bucket, Key):
        self.heads += 1
        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "404"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "HeadObject")
        _body, etag, meta = self.objects[Key]
        return {"ETag": etag, "Metadata": meta}

    def delete_object(self, Bucket, Key):
        self.objects.pop(Key, None)

    def get_object(self, Bucket, Key):
        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "GetObject")
        body, etag, _meta = self.objects[Key]
        return {"Body": SimpleNamespace(read=lambda: body), "ETag": etag}


@pytest.fixture
def fake():
    return LostReplyFakeClient()


@pytest.fixture
def s3(fake):
    store = S3Store(SimpleNamespace(bucket="test"), access=SimpleNamespace(endpoint_url="fake", source="test",
                                                                           describe=lambda: "test"))
    store._client = fake
    return store


def test_a_create_whose_reply_was_lost_is_ours(s3, fake):
    fake.lose = 1
    etag = s3.create("k.json", b"1")
    assert etag == fake.objects["k.json"][1] and s3.get("k.json").body == b"1" and fake.heads == 1


def test_a_replace_whose_reply_was_lost_is_ours(s3, fake):
    first = s3.create("k.json", b"1")
    fake.lose = 1
    etag = s3.replace("k.json", b"2", first)
    assert etag == fake.objects["k.json"][1] and s3.get("k.json").body == b"2"


def test_another_writer_still_wins_the_race(s3, fake):
    first = s3.create("k.json", b"theirs")
    with pytest.raises(AlreadyExists):
        s3.create("k.json", b"mine")
    s3.replace("k.json", b"theirs again", first)
    with pytest.raises(PreconditionFailed):
        s3.replace("k.json", b"mine", first)
    assert fake.heads == 0  # a request sent once that met 412 cannot have landed: no read-back


def test_a_lost_reply_after_another_writer_is_still_a_lost_race(s3, fake):
    """Our first attempt never reached the store, another writer created the object meanwhile, our retry
    got 412: the read-back finds their token, so it is their object (AlreadyExists)."""
    fake.lose, fake.lands = 1, False
    fake.meanwhile = lambda: S3Store.create(s3, "k.json", b"theirs")
    with pytest.raises(AlreadyExists):
        s3.create("k.json", b"mine")
    assert fake.heads == 1 and s3.get("k.json").body == b"theirs"


def test_every_conditional_write_carries_its_token(s3, fake):
    token = writer_token()
    s3.create("k.json", b"1", token=token)
    assert fake.objects["k.json"][2] == {WRITER: token}
    assert s3.create("k.json", b"1", token=token) == fake.objects["k.json"][1]  # the caller repeats its write


@pytest.fixture(params=["s3", "local"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    return request.getfixturevalue("s3")


def test_a_repeated_write_with_its_token_is_recognised_on_both_backends(store):
    """The caller's own retry (its first try raised an object-store error after landing): same token."""
    t1 = writer_token()
    e1 = store.create("a/k.json", b"1", token=t1)
    assert store.create("a/k.json", b"1", token=t1) == e1
    with pytest.raises(AlreadyExists):
        store.create("a/k.json", b"1", token=writer_token())
    with pytest.raises(AlreadyExists):
        store.create("a/k.json", b"1")
    t2 = writer_token()
    e2 = store.replace("a/k.json", b"2", e1, token=t2)
    assert store.replace("a/k.json", b"2", e1, token=t2) == e2
    with pytest.raises(PreconditionFailed):
        store.replace("a/k.json", b"3", e1, token=t1)  # an older write of ours is not the current version
    store.replace("a/k.json", b"4", e2)  # another writer, no token: ours is no longer there
    with pytest.raises(PreconditionFailed):
        store.replace("a/k.json", b"2", e1, token=t2)
    assert store.get("a/k.json").body == b"4"


def test_an_unconditional_put_or_a_delete_clears_the_token(store):
    t = writer_token()
    store.create("a/k.json", b"1", token=t)
    store.put("a/k.json", b"2")
    with pytest.raises(AlreadyExists):
        store.create("a/k.json", b"1", token=t)
    store.delete("a/k.json")
    with pytest.raises(NotFound):
        store.get("a/k.json")


def test_the_token_file_of_the_directory_backend_is_never_listed(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.create("a/k.json", b"1", token=writer_token())
    assert [o["Key"] for o in store.list("a/")] == ["a/k.json"]


def test_a_run_record_whose_reply_was_lost_is_not_fenced(s3, fake):
    """The ledger's record write lands, its reply is lost beyond botocore's retries (an object-store error),
    and the handle's next report meets its own write: recorded, not Fenced (no ad hoc read of the run)."""
    from aldebaran.delivery.channels.base import Outcome
    from aldebaran.model import Alert

    from aldebaran.exceptions import ObjectStoreError

    ledger = Ledger(s3, prefix="deliveries")
    channel = SimpleNamespace(name="webhook", can_dedupe=True)
    alert = Alert.from_dict({"alert_id": "a" * 32, "kind": "OVERFILL", "order_id": "1"})
    handle = ledger.open_run(channel, "alerts", 0, 1, "w", [(0, None, alert, None)], 16)
    real = fake.put_object
    calls = threading.local()

    def lands_then_fails(Bucket, **kwargs):
        if not getattr(calls, "done", False) and "IfMatch" in kwargs:
            calls.done = True
            fake._put_once(**kwargs)  # lands
            raise ClientError({"Error": {"Code": "RequestTimeout"},
                               "ResponseMetadata": {"HTTPStatusCode": 500, "RetryAttempts": 2}}, "PutObject")
        return real(Bucket, **kwargs)

    fake.put_object = lands_then_fails
    outcomes = {0: Outcome.delivered(alert.alert_id, {"ok": True})}
    with pytest.raises(ObjectStoreError):
        handle.report(outcomes)
    handle.report(outcomes)  # the same write again: its token is on the object
    run, _etag = ledger.get_run("webhook", "alerts", 0, 0)
    assert isinstance(run, Run) and run.state == RECORDED


class LandsThenFailsFake:
    """Failure injection: the real LocalStore, whose next conditional replace lands and then raises an
    object-store error (its reply lost beyond botocore's retries)."""

    def __init__(self, store) -> None:
        self.store, self.fail_next = store, False

    def __getattr__(self, name):
        return getattr(self.store, name)

    def replace(self, *args, **kwargs):
        from aldebaran.exceptions import ObjectStoreError

        etag = self.store.replace(*args, **kwargs)
        if self.fail_next:
            self.fail_next = False
            raise ObjectStoreError("injected: the reply was lost after the write landed")
        return etag


def test_a_lease_renewal_whose_reply_was_lost_is_not_a_lost_lease(tmp_path):
    from aldebaran.runtime import lease as leases
    from aldebaran.exceptions import LeaseLost, ObjectStoreError

    store = LandsThenFailsFake(LocalStore(tmp_path / "store"))
    held = leases.acquire(store, str(tmp_path / "checkpoint"), "q", ttl_seconds=30)
    store.fail_next = True
    with pytest.raises(ObjectStoreError):
        held.renew()
    held.renew()  # the landed renewal is recognised as ours, then the next one is written
    assert held.lost is None and leases.read(store, str(tmp_path / "checkpoint"))[1] == held.etag
    leases.end(store, str(tmp_path / "checkpoint"), leases.BROKEN, "a supervisor's genuine takeover")
    with pytest.raises(LeaseLost):
        held.renew()
