"""Taps on a running platform, for the deployed-path bench and ``aldebaran loadgen --watch``: where each
alert is seen, and when, without touching the platform's own consumers.

- :class:`TopicTap` reads a topic (the alerts topic, or a Kafka bus channel's topic) from its end, in
  its own consumer group, and keeps per alert id the first time this process saw it (epoch ms) and the
  alert's own times (``trigger_event_ts``: the trade that tipped the book over, ``detected_at``: the
  book step), plus the record's Kafka timestamp (when the auditor produced it).
- :class:`LogTap` follows the ``log`` channel's file from its end and keeps per alert id the line's
  ``sent_at`` (the dispatcher's write: the log channel's delivery).

Times are this host's wall clock, as the producer's Kafka timestamps are: the bench runs on the box it
measures. Each tap runs in a daemon thread; :meth:`stop` ends it.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True)
class Seen:
    at_ms: float  # when this tap saw it
    trigger_ms: float | None  # the alert's trigger_event_ts
    detected_ms: float | None  # the alert's detected_at
    produced_ms: float | None = None  # its Kafka timestamp (topic taps)
    order_id: str | None = None


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


class TopicTap(threading.Thread):
    """The alerts of `topic` as they arrive, from the topic's end at start (own consumer group)."""

    def __init__(self, kafka, topic: str, keep=None) -> None:
        from confluent_kafka import OFFSET_END, TopicPartition

        from aldebaran.kafka.io import consumer

        super().__init__(daemon=True, name=f"tap-{topic}")
        self.topic = topic
        self.keep = keep  # order id → bool: which alerts to keep (None: all)
        self._c = consumer(kafka, f"aldebaran-tap-{uuid.uuid4().hex[:8]}")
        parts = self._c.list_topics(topic, timeout=10).topics[topic].partitions
        self._c.assign([TopicPartition(topic, p, OFFSET_END) for p in parts])
        self._done = threading.Event()
        self.seen: dict[str, Seen] = {}
        self.count = 0  # every record read, kept or not

    def run(self) -> None:
        # poll(), not consume(n, timeout): consume waits out its timeout to fill a batch, which would add up
        # to that timeout to every figure.
        while not self._done.is_set():
            m = self._c.poll(0.05)
            if m is None or m.error() is not None:
                continue
            now = time.time() * 1000
            self.count += 1
            try:
                alert = json.loads(m.value() or b"")
            except (ValueError, RecursionError):  # any bytes can be on an alerts topic (BRIEF §2)
                continue
            if not isinstance(alert, dict):
                continue
            order = alert.get("order_id")
            if self.keep is not None and not self.keep(order):
                continue
            alert_id = alert.get("alert_id")
            if alert_id is not None and alert_id not in self.seen:
                self.seen[alert_id] = Seen(now, _number(alert.get("trigger_event_ts")),
                                           _number(alert.get("detected_at")), float(m.timestamp()[1]), order)

    def stop(self) -> None:
        self._done.set()
        self.join(10)
        self._c.close()


class LogTap(threading.Thread):
    """The ``log`` channel's deliveries as they are written, from the file's end at start."""

    def __init__(self, path: str | Path, keep=None) -> None:
        super().__init__(daemon=True, name="tap-log")
        self.path = Path(path)
        self.keep = keep
        self._offset = self.path.stat().st_size if self.path.exists() else 0
        self._done = threading.Event()
        self.seen: dict[str, Seen] = {}
        self.count = 0

    def run(self) -> None:
        partial = b""
        while not self._done.wait(0.05):
            if not self.path.exists():
                continue
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
            if not chunk:
                continue
            self._offset += len(chunk)
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()  # an unfinished last line waits for its end
            now = time.time() * 1000
            for line in lines:
                self._take(line, now)

    def _take(self, line: bytes, now: float) -> None:
        try:
            doc = json.loads(line)
        except ValueError:
            return
        alert = doc.get("alert") or {}
        order = alert.get("order_id")
        self.count += 1
        if self.keep is not None and not self.keep(order):
            return
        alert_id = alert.get("alert_id")
        if alert_id is not None and alert_id not in self.seen:
            sent = _number(doc.get("sent_at"))
            self.seen[alert_id] = Seen(sent * 1000 if sent else now, _number(alert.get("trigger_event_ts")),
                                       _number(alert.get("detected_at")), None, order)

    def stop(self) -> None:
        self._done.set()
        self.join(10)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]
