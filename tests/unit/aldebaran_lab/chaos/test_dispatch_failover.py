"""The dispatch-failover campaign's pure parts (aldebaran_lab.chaos.failover_figures): who owns which partition,
and a kill's figures from the receipts. Hand-written receipts and owners, hand-written expected figures."""

from __future__ import annotations

from aldebaran_lab.chaos.failover_figures import (
    Owner, details, owned_by, rows, split_between, summary, takeover_figures,
)

A, B, C = "host:100", "host:200", "host:300"


def owners(**channels: str) -> dict:
    """owners(webhook="ABAB") → channel webhook, partition i owned by the i-th letter's owner (- = nobody)."""
    who = {"A": A, "B": B, "C": C}
    return {ch: {p: Owner(who[c], 1, 0.0) if c != "-" else None for p, c in enumerate(spec)}
            for ch, spec in channels.items()}


def test_split_between_needs_every_partition_owned_by_the_pair_and_each_owning_one():
    assert split_between(owners(webhook="ABAB", bus="AABB"), A, B)
    assert not split_between(owners(webhook="ABAB", bus="AAAA"), A, B)  # B owns nothing of the bus
    assert not split_between(owners(webhook="ABA-", bus="AABB"), A, B)  # partition 3 not taken yet
    assert not split_between(owners(webhook="ABAC", bus="AABB"), A, B)  # a third owner (an old epoch's)


def test_owned_by_lists_each_channels_partitions():
    assert owned_by(owners(webhook="ABAB", bus="AAB-"), A) == {"webhook": {0, 2}, "bus": {0, 1}}
    assert owned_by(owners(webhook="ABAB", bus="AAB-"), C) == {"webhook": set(), "bus": set()}


# Alerts a0..a5 on partitions: a0, a1 → 0 (the survivor's all along); a2, a3 → 2; a4, a5 → 3 (the dead one's).
PARTITION_OF = {"a0": 0, "a1": 0, "a2": 2, "a3": 2, "a4": 3, "a5": 3}
KILL = 1000.0


def test_a_kill_is_measured_from_the_take_and_the_first_receipts_of_the_dead_partitions():
    received = {"a0": 999.0,   # before the kill: not counted
                "a1": 1001.0,  # the survivor's own partition, still delivering
                "a2": 1006.5,  # partition 2's first after its take at 1006.0
                "a3": 1007.0,
                "a4": 1008.0,  # partition 3's first after its take at 1006.2
                "a5": 1008.5}
    f = takeover_figures(received, PARTITION_OF, {2, 3}, KILL, {2: 1006.0, 3: 1006.2})
    assert f == {"taken_s": 6.2, "first_s": 6.5, "all_s": 8.0, "gap_s": 5.5, "stragglers": 0}


def test_a_receipt_of_a_dead_partition_before_its_take_is_a_straggler_of_the_dead_one():
    received = {"a2": 1000.01,  # in flight when the dead one died
                "a3": 1007.0, "a4": 1008.0}
    f = takeover_figures(received, PARTITION_OF, {2, 3}, KILL, {2: 1006.0, 3: 1006.2})
    assert f["stragglers"] == 1 and f["first_s"] == 7.0 and f["all_s"] == 8.0
    assert f["gap_s"] == 6.99  # any receipt ends a pause at the recipient: 1000.01 → 1007.0 is the longest stretch


def test_a_dead_partition_that_never_delivers_again_leaves_all_s_open():
    received = {"a2": 1006.5}
    f = takeover_figures(received, PARTITION_OF, {2, 3}, KILL, {2: 1006.0})
    assert f["taken_s"] is None  # partition 3 was never taken
    assert f["first_s"] == 6.5 and f["all_s"] is None
    assert f["gap_s"] == 6.5  # up to the last receipt there was


def test_nothing_delivered_after_the_kill_gives_no_figures():
    f = takeover_figures({"a2": 990.0}, PARTITION_OF, {2, 3}, KILL, {2: 1006.0, 3: 1006.2})
    assert f == {"taken_s": 6.2, "first_s": None, "all_s": None, "gap_s": None, "stragglers": 0}


def test_summary_counts_what_never_happened():
    assert summary([6.5, 7.1, 9.0]) == "median 7.1 s, max 9.0 s (n=3)"
    assert summary([6.5, None]) == "median 6.5 s, max 6.5 s (n=1), 1 never"
    assert summary([]) == "–"


def test_details_and_rows_summarise_each_timeouts_kills_and_freezes():
    received = {"webhook": {"a1": 1001.0, "a2": 1006.5, "a4": 1008.0}, "bus": {"a1": 1001.0, "a2": 1007.0, "a4": 1007.5}}
    events = [
        {"kind": "stall", "timeout_ms": 6000, "stall_s": 8.0, "dispatcher": "d0", "taken_while_frozen": {"webhook": [0]},
         "false_failover": True, "frozen_at": 990.0, "resumed_at": 998.0, "split_again_s": 3.0},
        {"kind": "kill", "timeout_ms": 6000, "dispatcher": "d1", "killed_at": KILL, "dead": {"webhook": [2, 3], "bus": [2, 3]},
         "taken_at": {"webhook": {2: 1006.0, 3: 1006.2}, "bus": {2: 1006.0, 3: 1006.2}},
         "runs_stored": {"webhook": 10, "bus": 12}, "runs_stored_dead": {"webhook": 5, "bus": 6}},
    ]
    d = details(events, received, PARTITION_OF, 900.0, [6000, 10000], [8.0], ("webhook", "bus"))
    s = d["per_timeout_ms"]["6000"]
    assert s["kill → first receipt from them (webhook)"] == "median 6.5 s, max 6.5 s (n=1)"
    assert s["kill → all of them delivering (bus)"] == "median 7.5 s, max 7.5 s (n=1)"
    assert s["stalls"] == {"8 s": "false failover (expelled, rebalanced)"}
    assert s["kills"][0]["at_s"] == 100.0 and s["kills"][0]["runs_stored_dead"] == {"webhook": 5, "bus": 6}
    assert d["per_timeout_ms"]["10000"]["kills"] == []  # measured nothing at 10 s: "–", not an error
    d["settled_after_s"] = 2.0
    table = rows(d, {"webhook": 0, "bus": 0}, {"webhook": 0, "bus": 1}, 3, ("webhook", "bus"))
    assert [r["scenario"] for r in table] == [
        "session 6 s, SIGKILL without restart — webhook", "session 6 s, SIGKILL without restart — bus",
        "session 10 s, SIGKILL without restart — webhook", "session 10 s, SIGKILL without restart — bus",
        "webhook (idempotent), whole run", "Kafka bus (key = alert id), whole run"]
    assert (table[-1]["lost"], table[-1]["duplicated"], table[-1]["faults"]) == (0, 1, 2)
    table = rows(d, {"webhook": 0, "bus": 0}, {"webhook": 0, "bus": 0}, 3, ("webhook", "bus"), {"webhook": 4, "bus": 8})
    assert [r["resent_same_key"] for r in table] == ["(below)"] * 4 + [4, 8]  # whole run, per recipient
