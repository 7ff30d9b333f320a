"""``aldebaran loadgen --watch``: while trades are produced to a running platform, one line every
`period` seconds — trades/s in, alerts/s out, deliveries/s per channel, and the current trade → alert
and trade → delivery p99 — so a user sees the platform keep up (or a backlog grow) as it happens:

    watch: trades in 5,003/s · alerts 1,668/s · delivered/s log 1,661, webhook 1,668 · trade→alert p99 812 ms · trade→log p99 1,204 ms

- trades/s: the trades topic's end offsets, summed over its partitions;
- alerts/s and trade → alert: a tap on the alerts topic (aldebaran_capacity.taps), from its end;
- deliveries/s per channel: the committed offsets of that channel's dispatcher group (what is settled);
- trade → delivery: the ``log`` channel's file, when ``log`` is a configured channel.
The p99s are over the alerts seen in the last ``WINDOW_S`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time

from aldebaran_capacity.taps import LogTap, TopicTap, percentile

log = logging.getLogger(__name__)

WINDOW_S = 5.0


def _end_offsets(consumer, topic: str) -> int:
    from confluent_kafka import TopicPartition

    parts = consumer.list_topics(topic, timeout=5).topics[topic].partitions
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in parts)


def _committed(consumer, topic: str) -> int:
    from confluent_kafka import TopicPartition

    parts = consumer.list_topics(topic, timeout=5).topics[topic].partitions
    got = consumer.committed([TopicPartition(topic, p) for p in parts], timeout=5)
    return sum(tp.offset for tp in got if tp.offset >= 0)


def _recent_p99(seen: dict, now_ms: float) -> float | None:
    lat = [s.at_ms - s.trigger_ms for s in list(seen.values())
           if s.trigger_ms is not None and now_ms - s.at_ms <= WINDOW_S * 1000]
    return percentile(lat, 99)


class LiveWatch(threading.Thread):
    def __init__(self, kafka, channels: list[str], group: str, log_path=None, period: float = 2.0) -> None:
        from aldebaran.kafka.io import consumer

        super().__init__(daemon=True, name="loadgen-watch")
        self.kafka, self.channels, self.period = kafka, channels, period
        self._offsets = consumer(kafka, "aldebaran-watch-offsets")  # never subscribes: metadata + offsets
        self._groups = {c: consumer(kafka, f"{group}-{c}") for c in channels}  # read committed offsets only
        self.alerts = TopicTap(kafka, kafka.alerts_topic)
        self.log_tap = LogTap(log_path) if log_path is not None and "log" in channels else None
        self._done = threading.Event()
        self.lines: list[str] = []

    def _read(self) -> tuple[int, int, dict[str, int]]:
        return (_end_offsets(self._offsets, self.kafka.trades_topic), self.alerts.count,
                {c: _committed(g, self.kafka.alerts_topic) for c, g in self._groups.items()})

    def run(self) -> None:
        from confluent_kafka import KafkaException

        self.alerts.start()
        if self.log_tap is not None:
            self.log_tap.start()
        last, t_last = self._read(), time.monotonic()
        while not self._done.wait(self.period):
            try:
                now = self._read()
            except KafkaException as exc:
                log.warning("watch: %s", exc)
                continue
            span = max(1e-3, time.monotonic() - t_last)
            self.report(last, now, span)
            last, t_last = now, time.monotonic()

    def report(self, last, now, span: float) -> None:
        now_ms = time.time() * 1000
        delivered = ", ".join(f"{c} {(now[2][c] - last[2][c]) / span:,.0f}" for c in self.channels)
        line = (f"watch: trades in {(now[0] - last[0]) / span:,.0f}/s · alerts {(now[1] - last[1]) / span:,.0f}/s · "
                f"delivered/s {delivered}")
        p99 = _recent_p99(self.alerts.seen, now_ms)
        if p99 is not None:
            line += f" · trade→alert p99 {p99:,.0f} ms"
        if self.log_tap is not None:
            p99 = _recent_p99(self.log_tap.seen, now_ms)
            if p99 is not None:
                line += f" · trade→log p99 {p99:,.0f} ms"
        self.lines.append(line)
        log.info("%s", line)

    def stop(self, linger: float = 0.0) -> None:
        """Stop after `linger` more seconds of lines (the deliveries that follow the last trades)."""
        if linger:
            self._done.wait(linger)
        self._done.set()
        self.join(10)
        self.alerts.stop()
        if self.log_tap is not None:
            self.log_tap.stop()
        for c in (self._offsets, *self._groups.values()):
            c.close()
