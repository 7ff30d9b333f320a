"""How `aldebaran chaos kill-triggerer` tells a run the alert watcher woke from a sweep
(aldebaran_lab.chaos.watcher; docs/reliability.md § Triggerer and the asset watcher)."""

from __future__ import annotations


def test_an_idle_kill_passes_only_when_runs_the_watcher_woke_delivered_its_wave():
    from aldebaran_lab.chaos.watcher import watcher_failures

    woken = [("asset_triggered__1", "asset_triggered"), ("asset_triggered__2", "asset_triggered")]
    assert watcher_failures(1, "idle", woken) == []
    assert watcher_failures(1, "idle", []) != []
    assert watcher_failures(1, "idle", [("scheduled__1", "scheduled")]) != []
    # a sweep beside the watcher's run: which of them delivered cannot be told, so it does not pass
    assert watcher_failures(1, "idle", [*woken, ("scheduled__1", "scheduled")]) != []
    # a busy kill's wave is delivered by the run in flight: no new run needed
    assert watcher_failures(2, "busy", []) == []
