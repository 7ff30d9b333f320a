"""The checkpoint lease against real MinIO: one holder at a time, renewals fenced by If-Match,
takeover only when free, a revoked or broken lease stops its holder."""

from __future__ import annotations

import threading
import time

import pytest

from aldebaran.exceptions import LeaseHeld, LeaseLost
from aldebaran.runtime import lease as leases


@pytest.fixture
def cp(s3_prefix):
    return f"s3a://aldebaran/{s3_prefix}/checkpoint"


@pytest.fixture
def cleanup(store, cp):
    yield
    store.delete(leases.lease_key(cp))


def test_second_auditor_is_refused_while_the_first_holds_the_lease(store, cp, cleanup):
    first = leases.acquire(store, cp, "q1", ttl_seconds=30)
    with pytest.raises(LeaseHeld, match="in use: lease gen 1 held by .* \\(query q1\\)"):
        leases.acquire(store, cp, "q2", ttl_seconds=30)
    first.renew()
    first.check()
    first.release()
    second = leases.acquire(store, cp, "q2", ttl_seconds=30)  # released: free at once
    assert second.record["generation"] == 2 and second.record["query"] == "q2"
    second.release()


def test_expired_lease_is_taken_over_and_the_old_holder_cannot_renew(store, cp, cleanup):
    old = leases.acquire(store, cp, "old", ttl_seconds=1)
    time.sleep(1.2)
    with pytest.raises(LeaseLost, match="expired"):
        old.check()  # not renewed for a whole ttl: no more batches
    new = leases.acquire(store, cp, "new", ttl_seconds=30)
    assert new.record["generation"] == 2
    old.lost = None  # even if it thought it still held it, its next renewal is fenced by If-Match
    with pytest.raises(LeaseLost, match="lost: now lease gen 2 held"):
        old.renew()
    new.release()


def test_acquire_waits_for_a_lease_to_end(store, cp, cleanup):
    holder = leases.acquire(store, cp, "a", ttl_seconds=30)
    threading.Timer(1.0, holder.release).start()
    t0 = time.monotonic()
    waiter = leases.acquire(store, cp, "b", ttl_seconds=30, wait_seconds=20, poll=0.2)
    assert 0.8 < time.monotonic() - t0 < 20
    assert waiter.record["query"] == "b"
    waiter.release()


def test_racing_acquirers_exactly_one_wins(store, cp, cleanup):
    results: list = []

    def contender(i: int) -> None:
        try:
            results.append(leases.acquire(store, cp, f"c{i}", ttl_seconds=30))
        except LeaseHeld as exc:
            results.append(exc)

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if isinstance(r, leases.Lease)]
    assert len(winners) == 1 and len(results) == 6
    winners[0].release()


def test_revoked_lease_stops_the_keeper_and_is_free_after_its_grace(store, cp, cleanup):
    holder = leases.acquire(store, cp, "hung", ttl_seconds=3)
    lost = threading.Event()
    keeper = holder.keep(alive=lambda: True, on_lost=lambda why: lost.set(), interval=0.2)
    # A renewal between end()'s read and its conditional write wins (If-Match) and end() returns None; the
    # keeper renews at once when it starts and then every 0.2 s, so try again, as the supervisor's next run would.
    ended, deadline = None, time.monotonic() + 10
    while ended is None and time.monotonic() < deadline:
        ended = leases.end(store, cp, leases.REVOKED, "test revokes it", grace_seconds=1.0)
    assert ended is not None and ended["state"] == leases.REVOKED
    assert lost.wait(5), "the holder did not notice the revocation"
    keeper.stop()
    with pytest.raises(LeaseLost):
        holder.check()
    with pytest.raises(LeaseHeld):
        leases.acquire(store, cp, "next", ttl_seconds=30)  # still within the grace
    time.sleep(1.1)
    nxt = leases.acquire(store, cp, "next", ttl_seconds=30)
    assert nxt.record["generation"] == 2
    nxt.release()


def test_the_keeper_renews_at_once_when_it_starts(store, cp, cleanup):
    """The auditor acquires its lease before building the query and starts the keeper after: a slow start
    (most of a ttl) must not leave the first batch with an expired lease until the keeper's first interval."""
    holder = leases.acquire(store, cp, "slow-start", ttl_seconds=3)
    time.sleep(2.5)  # the query takes its time to start
    keeper = holder.keep(alive=lambda: True, on_lost=lambda why: None, interval=2.0)
    try:
        time.sleep(1.0)  # 3.5 s after the acquire, before the keeper's first interval has passed
        holder.check()  # renewed when the keeper started: still ours
        assert float(holder.record["expires_at"]) > time.time()
    finally:
        keeper.stop()
        holder.release()


def test_broken_lease_is_free_at_once(store, cp, cleanup):
    leases.acquire(store, cp, "dead", ttl_seconds=300)
    leases.end(store, cp, leases.BROKEN, "holder pid gone")
    assert leases.acquire(store, cp, "next", ttl_seconds=30).record["generation"] == 2


def test_a_killed_local_holder_is_taken_over_at_once(store, cp, cleanup):
    """An auditor SIGKILLed and restarted at once (chaos kill-auditor does this) need not wait for
    its old lease to expire: the holder ran here and its pid is gone."""
    import signal
    import subprocess
    import sys

    code = ("import sys, time; from aldebaran.storage.store import open_store; from aldebaran.runtime import lease; "
            "lease.acquire(open_store(), sys.argv[1], 'victim', ttl_seconds=300); print('held', flush=True); "
            "time.sleep(300)")
    victim = subprocess.Popen([sys.executable, "-c", code, cp], stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline().strip() == "held"
        with pytest.raises(LeaseHeld):
            leases.acquire(store, cp, "next", ttl_seconds=30)  # alive: refused
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
    taken = leases.acquire(store, cp, "next", ttl_seconds=30)
    assert taken.record["generation"] == 2 and taken.record["query"] == "next"
    taken.release()
