"""The alert watcher's message filter (runs inside Airflow's triggerer).

The AssetWatcher on the alerts topic is a wake-up signal, not the data path: the dispatch DAG run it
triggers drains everything waiting through the dispatcher's own consumer groups. So one wake-up per
`ALDEBARAN_DISPATCH_WAKEUP_SECONDS` (default 5) is enough however many alerts arrive: a burst of
100k alerts means a handful of DAG runs, not 100k. What a skipped message would have woken is drained
by the run already under way, or by the DAG's periodic sweep.
"""

from __future__ import annotations

import threading
import time

_last = 0.0
_lock = threading.Lock()
_interval: float | None = None  # read once, on the first message (a bad value fails naming the setting)


def interval() -> float:
    global _interval
    if _interval is None:
        from aldebaran.delivery.settings import WatcherSettings
        from aldebaran.settings import load

        _interval = load(WatcherSettings).wakeup_seconds
    return _interval


def wake_up(message) -> dict | None:
    """apply_function of the Kafka AwaitMessageTrigger: an event payload, at most once per interval."""
    global _last
    every = interval()
    now = time.monotonic()
    with _lock:
        if now - _last < every:
            return None
        _last = now
    return {"topic": message.topic(), "partition": message.partition(), "offset": message.offset()}
