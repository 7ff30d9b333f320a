"""The active auditor's hand-over to a warm standby when its executors are gone
(aldebaran.audit.sparkjob.handover): the decision, the watch thread, the standby's record."""

from __future__ import annotations

import threading
import time

from aldebaran.audit.sparkjob import handover
from aldebaran.storage.store import LocalStore

CHECKPOINT = "s3a://aldebaran/checkpoints/auditor"


def test_it_hands_over_only_after_having_had_an_executor_and_losing_it_for_the_grace_while_a_standby_waits():
    assert handover.should_yield(True, 1.0, True)
    assert not handover.should_yield(False, 60.0, True)  # starting up: no executor registered yet
    assert not handover.should_yield(True, None, True)  # executors present
    assert not handover.should_yield(True, 0.9, True)  # a blip shorter than the grace
    assert not handover.should_yield(True, 30.0, False)  # nobody to hand over to: wait for a new executor


def test_the_standby_record_is_fresh_for_a_few_prefetch_periods_and_withdrawn_on_takeover(tmp_path):
    store = LocalStore(tmp_path)
    assert not handover.standby_waiting(store, CHECKPOINT)
    handover.announce(store, CHECKPOINT, period_s=2.0)
    now = time.time()
    assert handover.standby_waiting(store, CHECKPOINT, now)
    assert not handover.standby_waiting(store, CHECKPOINT, now + 2.0 * handover.ANNOUNCE_PERIODS + 1)
    handover.withdraw(store, CHECKPOINT)
    assert not handover.standby_waiting(store, CHECKPOINT)
    handover.withdraw(store, CHECKPOINT)  # twice is fine
    assert handover.standby_key(CHECKPOINT).endswith(".standby.json")


def run_watch(counts, standby: bool) -> handover.ExecutorWatch:
    seq = iter(counts)
    last = [counts[-1]]
    yielded = threading.Event()

    def count() -> int:
        last[0] = next(seq, last[0])
        return last[0]

    watch = handover.ExecutorWatch(count, lambda: standby, yielded.set, grace_s=0.05, poll_s=0.01)
    watch.start()
    yielded.wait(1.0)
    watch.stop()
    watch.join(2.0)
    return watch


def test_the_watch_yields_once_its_executors_are_gone_and_a_standby_waits():
    assert run_watch([0, 0, 1, 1, 0], standby=True).yielded
    assert not run_watch([0, 0, 1, 1, 0], standby=False).yielded
    assert not run_watch([0, 0, 0, 0], standby=True).yielded  # never had one: still starting
    assert not run_watch([1, 1, 1], standby=True).yielded
