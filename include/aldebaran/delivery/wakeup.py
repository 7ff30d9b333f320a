"""The alert watcher's message filter (runs inside Airflow's triggerer).

The AssetWatcher on the alerts topic is a wake-up signal, not the data path: the dispatch DAG run it
triggers drains everything waiting through the dispatcher's own consumer groups. So one wake-up per
`ALDEBARAN_DISPATCH_WAKEUP_SECONDS` (default 5) is enough however many alerts arrive: a burst of
100k alerts means a handful of DAG runs, not 100k. What a skipped message would have woken is drained
by the run already under way, or by the DAG's periodic sweep.

While streaming dispatchers deliver (a fresh "running" heartbeat under ``heartbeats/dispatcher/``, and
none failed or gone stale; "stopped" ones were stopped on purpose), the watcher does not wake the DAG: its run would only find each channel
served and skip it, and on a loaded box the task processes of a run every few seconds cost a third of a
core (the deployed-path bench, docs/benchmarks.md). The heartbeats are read at most every
``COVER_CHECK_SECONDS``; a stopped, failed or stale dispatcher, or none, means wake-ups again, and the
DAG's 5-minute sweep runs either way.
"""

from __future__ import annotations

import threading
import time

_last = 0.0
_lock = threading.Lock()
_interval: float | None = None  # read once, on the first message (a bad value fails naming the setting)
COVER_CHECK_SECONDS = 15.0
_cover = (0.0, False)  # (monotonic time of the check, streaming dispatchers cover delivery)


def interval() -> float:
    global _interval
    if _interval is None:
        from aldebaran.delivery.settings import WatcherSettings
        from aldebaran.settings import load

        _interval = load(WatcherSettings).wakeup_seconds
    return _interval


def streaming_covers(beats: list[dict], now: float, fresh_seconds: float) -> bool:
    """True when at least one streaming dispatcher runs (a fresh "running" heartbeat) and none is broken (a
    "failed" one, or a "running" one gone stale). A "stopped" heartbeat is a dispatcher stopped on purpose
    (its channel unconfigured, the platform paused): it says nothing either way. A fast dispatcher's
    (``fast``) reads another topic: it covers nothing of the alerts topic this watcher wakes the DAG for."""
    beats = [b for b in beats if not b.get("fast")]
    live = [b for b in beats if b.get("status") == "running" and now - float(b.get("at") or 0) < fresh_seconds]
    broken = [b for b in beats if b.get("status") == "failed"
              or (b.get("status") == "running" and now - float(b.get("at") or 0) >= fresh_seconds)]
    return bool(live) and not broken


def _covered() -> bool:
    global _cover
    now = time.monotonic()
    if now - _cover[0] < COVER_CHECK_SECONDS:
        return _cover[1]
    from aldebaran.runtime import heartbeat
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.exceptions import ObjectStoreError
    from aldebaran.settings import load
    from aldebaran.storage.store import open_store

    settings = load(DeliverySettings)
    try:
        store = open_store(settings.store)
        beats = heartbeat.read_all(store, heartbeat.DISPATCHER)
        covered = streaming_covers(beats, time.time(), 3 * settings.heartbeat_seconds + 10)
    except ObjectStoreError:
        covered = False  # cannot tell: wake the DAG, whose tasks say why
    _cover = (now, covered)
    return covered


def wake_up(message) -> dict | None:
    """apply_function of the Kafka AwaitMessageTrigger: an event payload, at most once per interval, and
    none while streaming dispatchers deliver."""
    global _last
    every = interval()
    now = time.monotonic()
    with _lock:
        if now - _last < every:
            return None
        if _covered():
            return None
        _last = now
    return {"topic": message.topic(), "partition": message.partition(), "offset": message.offset()}
