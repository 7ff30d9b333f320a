"""The cross-lane claim log (aldebaran.delivery.claimlog) without services: the pure merge, and two lanes'
logs over the local store racing with stale views (the If-Match write is what decides)."""

from __future__ import annotations

import pytest

from aldebaran.delivery.claimlog import ClaimLog, merge
from aldebaran.delivery.ledger import Ledger
from aldebaran.exceptions import LedgerCorrupt
from aldebaran.storage.store import LocalStore

FAST, EXACT = "p/hook/runs/alerts.fast/00000/00000000000000000000.json", "p/hook/runs/alerts/00000/00000000000000000007.json"


def test_merge_appends_what_nobody_holds_and_names_the_holders_of_the_rest():
    runs, held = merge([[FAST, ["a", "b"]]], ["b", "c", "c", "d"], EXACT, window=100)
    assert runs == [[FAST, ["a", "b"]], [EXACT, ["c", "d"]]]
    assert held == {"b": FAST}


def test_merge_writes_nothing_when_every_id_is_held():
    assert merge([[FAST, ["a", "b"]]], ["a", "b"], EXACT, window=100) == (None, {"a": FAST, "b": FAST})


def test_a_run_claiming_again_after_adoption_finds_its_own_ids_not_held():
    assert merge([[FAST, ["a", "b"]]], ["a", "b"], FAST, window=100) == (None, {})
    runs, held = merge([[FAST, ["a"]]], ["a", "b"], FAST, window=100)
    assert runs == [[FAST, ["a", "b"]]] and held == {}


def test_the_window_drops_whole_runs_oldest_first_never_the_claiming_one():
    runs = [["r1", ["a", "b"]], ["r2", ["c", "d"]]]
    assert merge(runs, ["e", "f"], "r3", window=4)[0] == [["r2", ["c", "d"]], ["r3", ["e", "f"]]]
    assert merge(runs, ["e", "f", "g", "h", "i"], "r3", window=4)[0] == [["r3", ["e", "f", "g", "h", "i"]]]


@pytest.fixture
def ledger(tmp_path):
    return Ledger(LocalStore(tmp_path), prefix="deliveries")


def test_two_lanes_with_stale_views_send_each_id_once(ledger):
    fast, exact = ClaimLog(ledger, "hook", 0, 1000), ClaimLog(ledger, "hook", 0, 1000)
    assert exact.claim(["x"], EXACT) == {}  # both views read now: exact's is current, fast's goes stale
    assert fast.claim(["a", "b"], FAST) == {} and fast.conflicts == 0  # fast read the log at its first claim
    # exact's view is stale (it has not seen fast's write): its If-Match fails, it re-reads and finds a, b held.
    assert exact.claim(["a", "b", "c"], EXACT) == {"a": FAST, "b": FAST}
    assert exact.conflicts == 1
    assert fast.claim(["c", "d"], FAST) == {"c": EXACT}
    writes = ledger.writes
    assert fast.claim(["c"], FAST) == {"c": EXACT} and ledger.writes == writes  # nothing new: no write


def test_the_first_writes_of_both_lanes_race_on_the_create(ledger):
    fast, exact = ClaimLog(ledger, "hook", 1, 1000), ClaimLog(ledger, "hook", 1, 1000)
    fast._reload(), exact._reload()  # both saw no log
    assert fast.claim(["a"], FAST) == {}
    assert exact.claim(["a"], EXACT) == {"a": FAST}  # If-None-Match lost: re-read, held
    assert exact.conflicts == 1


def test_a_corrupt_log_is_refused_with_its_key(ledger):
    log = ClaimLog(ledger, "hook", 2, 1000)
    ledger.store.put(log.key, b'{"runs": [[1, 2]]}')
    with pytest.raises(LedgerCorrupt) as info:
        log.claim(["a"], FAST)
    assert info.value.key == log.key


def test_explain_finds_the_holder_in_whichever_partition_s_log_and_skips_a_corrupt_one(ledger):
    from aldebaran.delivery.claimlog import holder_of

    ClaimLog(ledger, "hook", 0, 1000).claim(["a"], EXACT)
    ClaimLog(ledger, "hook", 1, 1000).claim(["b"], FAST)
    ledger.store.put(ClaimLog(ledger, "hook", 2, 1000).key, b"not json")
    assert (holder_of(ledger, "hook", "b"), holder_of(ledger, "hook", "a")) == (FAST, EXACT)
    assert holder_of(ledger, "hook", "zz") is None and holder_of(ledger, "log", "a") is None
