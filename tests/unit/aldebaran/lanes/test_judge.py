"""Reconciliation of the fast lane against the exact lane (pure logic): confirmed either way round,
unconfirmed only once the exact topic has been read past the TTL, late confirmation, missed, repeats."""

from __future__ import annotations

import pytest

from aldebaran.lanes.judge import Reconciliation

TTL = 1_000


def test_fast_then_exact_is_confirmed_and_never_judged():
    r = Reconciliation(TTL)
    r.fast("a", 100)
    r.exact("a", "OVERFILL", 400)
    r.caught_up(fast_at=10_000, exact_at=10_000)
    v = r.judge()
    assert (v.unconfirmed, v.missed) == ([], [])
    assert (r.counts.confirmed, r.counts.unconfirmed, r.counts.missed) == (1, 0, 0)


def test_exact_first_then_fast_is_confirmed():
    r = Reconciliation(TTL)
    r.exact("a", "OVERFILL", 100)
    r.fast("a", 150)
    r.caught_up(fast_at=10_000, exact_at=10_000)
    assert r.judge().missed == []
    assert (r.counts.confirmed, r.counts.fast, r.counts.exact) == (1, 1, 1)


def test_unconfirmed_waits_for_the_exact_topic_to_be_read_past_the_ttl():
    r = Reconciliation(TTL)
    r.fast("a", 100)
    # Wall clock is far on, but the exact topic has been read only up to 900: its copy may still come.
    r.exact("other", "OVERFILL", 900)
    assert r.judge().unconfirmed == []
    r.exact("later", "ORPHAN", 1_099)  # any exact record moves its horizon, whatever its kind
    assert r.judge().unconfirmed == []
    r.caught_up(exact_at=1_100)
    assert r.judge().unconfirmed == ["a"]
    assert r.counts.unconfirmed == 1
    assert r.status()["unconfirmed_ids"] == ["a"]


def test_late_confirmation_takes_it_out_of_the_unconfirmed_set():
    r = Reconciliation(TTL)
    r.fast("a", 100)
    r.caught_up(exact_at=5_000)
    assert r.judge().unconfirmed == ["a"]
    v = r.exact("a", "OVERFILL", 6_000)
    assert v.confirmed_late == ["a"]
    assert (r.counts.unconfirmed, r.counts.confirmed, r.counts.confirmed_late) == (0, 1, 1)
    assert r.status()["unconfirmed_ids"] == []


def test_an_exact_overfill_without_a_fast_copy_is_missed_other_kinds_are_not():
    r = Reconciliation(TTL)
    r.exact("a", "OVERFILL", 100)
    r.exact("o", "ORPHAN", 100)  # the fast lane never raises ORPHAN
    r.exact("m", "MISMATCH", 100)
    r.caught_up(fast_at=1_099)
    assert r.judge().missed == []
    r.caught_up(fast_at=1_100)
    assert r.judge().missed == ["a"]
    assert (r.counts.missed, r.counts.exact) == (1, 1)


def test_repeats_on_either_topic_count_once():
    r = Reconciliation(TTL)
    r.fast("a", 100)
    r.fast("a", 120)  # the sinks are at-least-once
    r.exact("a", "OVERFILL", 200)
    r.exact("a", "OVERFILL", 220)
    r.fast("a", 240)
    assert (r.counts.fast, r.counts.exact, r.counts.confirmed, r.counts.repeats) == (1, 1, 1, 3)


def test_resume_point_is_the_oldest_pending_alert():
    r = Reconciliation(TTL)
    assert r.resume_ms() is None
    r.fast("a", 500)
    r.exact("b", "OVERFILL", 300)
    assert r.resume_ms() == 300
    r.exact("a", "OVERFILL", 600)
    r.fast("b", 700)
    assert r.resume_ms() == 600  # nothing pending: the lower of the two horizons


def test_old_settled_ids_are_forgotten_after_the_retention():
    r = Reconciliation(TTL, retain_ms=2_000)
    r.fast("a", 100)
    r.exact("a", "OVERFILL", 200)
    r.caught_up(fast_at=2_100, exact_at=2_100)
    r.judge()
    assert "a" in r.done
    r.caught_up(fast_at=2_300, exact_at=2_300)
    r.judge()
    assert "a" not in r.done


def test_ttl_must_be_positive():
    with pytest.raises(ValueError):
        Reconciliation(0)
