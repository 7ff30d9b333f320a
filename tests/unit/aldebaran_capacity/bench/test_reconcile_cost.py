"""The reconciliation's time-ordered judge decides exactly what the scanning one it replaced decided
(`aldebaran_capacity.bench.reconcile_cost.Scanning`, kept for the A/B), on any arrival order; and the bench
mode runs and reports."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aldebaran.lanes.judge import Reconciliation
from aldebaran_capacity.bench import reconcile_cost
from aldebaran_capacity.bench.reconcile_cost import Scanning

TTL = 100

# An op: an arrival (topic, alert id, ts, kind) or time passing (both topics read up to a wall-clock time).
arrival = st.tuples(st.sampled_from(["fast", "exact"]), st.integers(0, 12), st.integers(0, 600),
                    st.sampled_from(["OVERFILL", "OVERFILL", "ORPHAN"]))
tick = st.tuples(st.just("judge"), st.integers(0, 900), st.integers(0, 900), st.just(""))


def _play(cls, ops):
    r = cls(TTL, retain_ms=3 * TTL)
    decided = []
    for op, a, b, kind in ops:
        if op == "fast":
            v = r.fast(f"a{a}", b)
        elif op == "exact":
            v = r.exact(f"a{a}", kind, b)
        else:
            r.caught_up(fast_at=a, exact_at=b)
            v = r.judge()
        decided.append((sorted(v.unconfirmed), sorted(v.confirmed_late), sorted(v.missed)))
        decided.append((r.resume_ms(), r.status()["oldest_pending_fast_ms"]))
    return r, decided


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(arrival, tick), max_size=60))
def test_time_ordered_judge_decides_what_the_scan_decided(ops):
    new, new_decided = _play(Reconciliation, ops)
    old, old_decided = _play(Scanning, ops)
    assert new_decided == old_decided
    assert vars(new.counts) == vars(old.counts)
    assert (new.pending_fast, new.pending_exact, new.unconfirmed, new.done) == \
           (old.pending_fast, old.pending_exact, old.unconfirmed, old.done)


def test_a_long_run_forgets_and_judges_without_rescanning():
    r = Reconciliation(TTL, retain_ms=2 * TTL)
    for t in range(0, 10_000, 10):
        r.fast(f"x{t}", t)
        r.exact(f"x{t - 20}", "OVERFILL", t)  # each confirmed 20 ms later
        r.caught_up(fast_at=t, exact_at=t)
        r.judge()
    assert r.counts.unconfirmed == 0 and r.counts.confirmed == 998
    assert len(r.done) <= 2 * TTL // 10 + 2  # only the retention window is remembered
    assert len(r._done_order) <= len(r.done) + 2  # and its time order holds no more than that


def test_the_bench_mode_runs_small_and_reports():
    result = reconcile_cost.run(rates=(200,), repeats=1, seconds=1.0, ttl_seconds=5.0)
    seg = result["segments"][0]
    assert seg["rate"] == 200 and set(seg) >= {"time-ordered", "scanning", "ratio"}
    assert seg["time-ordered"]["remembered_ids"] > 0
    text = reconcile_cost.render({"reconcile_cost": result, "command": "aldebaran bench reconcile-cost",
                                  "machine": {"date": "today"}})
    assert text.startswith(reconcile_cost.BEGIN) and text.endswith(reconcile_cost.END)
    assert "| 200 |" in text


def test_the_simulated_stream_is_all_confirmed_for_both_designs():
    for cls in (Reconciliation, Scanning):
        m = reconcile_cost.measure(cls, 500, 3.0, 5_000)
        assert m["unconfirmed"] == 0 and m["messages"] == 2 * 100 * 15
