"""Where an alert lies on the alerts topic, read by bounded offsets: what ``aldebaran explain`` and
``aldebaran deliveries show`` need to find a delivered alert's run (a run is keyed by offset).

Nothing maps an alert id to its offset (a per-alert index would cost a write per alert, which the
group-committed ledger exists to avoid), so the topic's keys are read — but newest first and bounded:

- the alert's own partition first: the auditor produces alerts keyed by alert id with librdkafka's
  default partitioner (``crc32(key) % partitions``, aldebaran.kafka.io), then the others (a topic whose
  partitions grew, or a tool that wrote to one partition);
- backwards from the end in windows of :data:`WINDOW` messages, at most `max_messages` in all: the
  operator's question is nearly always about a recent alert, and the cost no longer grows with the
  topic's history. After a hit, the windows before it are read too while they still hold a copy, so the
  alert's first message is the one returned (a repeat is a later copy), within the same budget.

``scan=True`` reads every partition from its beginning (the exhaustive look-up, slow on a long topic:
``--scan`` on the commands). Keys only: values are never decoded.
"""

from __future__ import annotations

import time
import zlib

# Messages a bounded look-up reads at most (all partitions together): what a not-found alert costs, about
# a second or two of a consumer loop; a recent alert is found in the first window.
MAX_MESSAGES = 100_000
WINDOW = 20_000  # messages read per step back from a partition's end


def locate(kafka, alert_id: str, timeout: float = 30.0, max_messages: int = MAX_MESSAGES,
           scan: bool = False) -> tuple[int, int] | None:
    """(partition, offset) of the alert's first message on the alerts topic; None when not found (older
    than the bounded look-up reaches, or gone with the topic's retention)."""
    from confluent_kafka import TopicPartition

    from aldebaran.kafka.io import consumer

    topic, key = kafka.alerts_topic, alert_id.encode()
    c = consumer(kafka, f"aldebaran-locate-{time.time_ns()}", **{"enable.auto.commit": False,
                                                                 "enable.partition.eof": True})
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return None
        n = len(meta.partitions)
        home = zlib.crc32(key) % n
        marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in meta.partitions}
        order = [home] + sorted(p for p in meta.partitions if p != home)
        deadline = time.monotonic() + timeout
        if scan:
            for p in order:
                lo, hi = marks[p]
                hits = _read(c, topic, p, lo, hi, key, deadline)
                if hits:
                    return p, hits[0]
            return None
        budget = max_messages
        for p in order:
            lo, hi = marks[p]
            found, upper = None, hi
            while upper > lo and budget > 0 and time.monotonic() < deadline:
                start = max(lo, upper - min(WINDOW, budget))
                budget -= upper - start
                hits = _read(c, topic, p, start, upper, key, deadline)
                if not hits and found is not None:
                    break  # the window before the first copy holds none: that copy is the first
                if hits:
                    found = hits[0]
                upper = start
            if found is not None:
                return p, found
        return None
    finally:
        c.close()


def _read(c, topic: str, partition: int, start: int, end: int, key: bytes, deadline: float) -> list[int]:
    """Offsets in [start, end) of `partition` whose key is `key`."""
    from confluent_kafka import KafkaError, TopicPartition

    if end <= start:
        return []
    c.assign([TopicPartition(topic, partition, start)])
    hits: list[int] = []
    while time.monotonic() < deadline:
        for msg in c.consume(num_messages=10_000, timeout=0.5):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return hits
                continue
            if msg.offset() < start:
                continue  # fetched for an earlier assignment (librdkafka drops those; cheap to be sure)
            if msg.offset() >= end:
                return hits
            if msg.key() == key:
                hits.append(msg.offset())
            if msg.offset() + 1 >= end:
                return hits
    return hits
