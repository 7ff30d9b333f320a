"""A lane whose checkpoint points at trades that are gone: the gap, where the lane starts again, and the old
checkpoint moved aside.

The trades a lane's checkpoint would resume from can be gone: the topic was deleted and recreated (a demo's
reset; its offsets start at 0 again), or retention deleted trades a stopped lane had not read. Spark's
``failOnDataLoss=false`` does not save a real-time query from either: in real-time mode the Kafka source's
executors read through ``KafkaDataConsumer.getIterator``, which takes no ``failOnDataLoss`` and rethrows
``OffsetOutOfRangeException`` (it only waits out offset 0 of a topic not written yet); the micro-batch
reader's ``get(..., failOnDataLoss)`` is the one that skips. Checked in the 4.2.0 connector the 4.3 runtime
loads (``KafkaDataConsumer$$anon$1.nextWithTimeout``). So the query dies, and a keeper that resumed the same
checkpoint again would die the same way, for ever.

The keeper (:mod:`aldebaran.lanes.keeper`) therefore checks before it resumes a generation, and again when
the lane fails: :func:`checkpoint_offsets` (the last offsets Spark's checkpoint logged, through the storage
layer) against :func:`watermarks` (the topic's low/high, confluent-kafka), decided by :func:`decide` (pure).
A partition below its low watermark lost trades to retention; a checkpoint offset above the high watermark
(or a partition the topic no longer has) means the topic was recreated, and then the whole topic counts as
new. On a gap the keeper moves the generation's checkpoint under ``<root>/abandoned/<UTC time>-<generation>``
(:func:`abandon`; kept for an operator, never deleted here) and starts a fresh generation at
:attr:`Gap.starting_offsets`: every partition that is fine where the checkpoint left it, a gap partition at
``ALDEBARAN_LANES_GAP_STARTING_OFFSETS`` (``earliest``: the first trade still there; ``latest``). The lane's
books start empty, as at a rotation: orders open across the gap are the exact lane's.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1  # Spark's startingOffsets JSON for "earliest" / "latest" of one partition
ABANDONED = "abandoned"


@dataclass(frozen=True)
class PartitionGap:
    """One partition the checkpoint cannot resume: its checkpoint offset, the topic's low/high now (None: the
    topic has no such partition any more), and the trades the lane will never read (None: unknown, the
    recreated topic's old trades)."""

    partition: int
    checkpoint: int
    low: int | None
    high: int | None
    skipped: int | None

    def describe(self) -> str:
        if self.low is None or self.high is None:
            return f"partition {self.partition}: checkpoint at {self.checkpoint}, the topic has no such partition now"
        if self.checkpoint < self.low:
            return (f"partition {self.partition}: checkpoint at {self.checkpoint}, earliest trade still there "
                    f"{self.low}: {self.skipped} trade(s) skipped")
        return (f"partition {self.partition}: topic recreated: checkpoint at {self.checkpoint}, topic high "
                f"watermark {self.high}" + (f", {self.skipped} trade(s) of the new topic skipped" if self.skipped else ""))


@dataclass(frozen=True)
class Gap:
    """The decision: what is gone, and where a fresh checkpoint starts (Spark's startingOffsets JSON)."""

    topic: str
    recreated: bool
    restart_from: str  # "earliest" | "latest": ALDEBARAN_LANES_GAP_STARTING_OFFSETS
    partitions: tuple[PartitionGap, ...]
    starting: dict[int, int] = field(default_factory=dict)  # partition → offset, or EARLIEST / LATEST

    @property
    def starting_offsets(self) -> str:
        if not self.starting:  # the topic is not there (yet): Spark's own option, for when it is
            return self.restart_from
        return json.dumps({self.topic: {str(p): o for p, o in sorted(self.starting.items())}})

    @property
    def skipped(self) -> int:
        """Trades known to be skipped (a recreated topic's old trades are not counted: unknown)."""
        return sum(p.skipped or 0 for p in self.partitions)

    def describe(self) -> str:
        what = "" if self.recreated else "trades deleted by retention before the lane read them; "
        return (f"{self.topic}: {what}" + "; ".join(p.describe() for p in self.partitions)
                + f"; restarting from the {self.restart_from} offset of each partition with a gap")

    def to_dict(self) -> dict:
        return {"topic": self.topic, "recreated": self.recreated, "restart_from": self.restart_from,
                "skipped": self.skipped, "starting_offsets": self.starting_offsets, "describe": self.describe(),
                "partitions": [vars(p) for p in self.partitions]}


def decide(topic: str, checkpoint: dict[int, int], marks: dict[int, tuple[int, int]],
           restart_from: str = "earliest") -> Gap | None:
    """Checkpoint offsets (partition → next offset to read) and the topic's watermarks now (partition →
    (low, high)) → the gap, or None when every checkpoint offset is still there (low ≤ offset ≤ high).

    Retention: a partition below its low watermark skips `low − offset` trades (from `earliest`) or
    `high − offset` (from `latest`); the other partitions resume where they were. Recreated (an offset above
    the high watermark, or a partition gone): every partition starts at `restart_from`, as none of the
    checkpoint's offsets mean anything on the new topic; `latest` skips `high − low` of its trades."""
    if restart_from not in ("earliest", "latest"):
        raise ValueError(f"restart_from: earliest or latest, not {restart_from!r}")
    recreated = any(p not in marks or offset > marks[p][1] for p, offset in checkpoint.items())
    aged = {p: offset for p, offset in checkpoint.items() if p in marks and offset < marks[p][0]}
    if not recreated and not aged:
        return None
    fresh = EARLIEST if restart_from == "earliest" else LATEST
    gaps: list[PartitionGap] = []
    if recreated:
        for p, offset in sorted(checkpoint.items()):
            low, high = marks.get(p, (None, None))
            skipped = None if low is None else (0 if fresh == EARLIEST else high - low)
            gaps.append(PartitionGap(p, offset, low, high, skipped))
        starting = {p: fresh for p in marks}
    else:
        for p, offset in sorted(aged.items()):
            low, high = marks[p]
            gaps.append(PartitionGap(p, offset, low, high, (low if fresh == EARLIEST else high) - offset))
        # New partitions (not in the checkpoint) from their start, as Spark itself would take them.
        starting = {p: (fresh if p in aged else checkpoint.get(p, EARLIEST)) for p in marks}
    return Gap(topic, recreated, restart_from, tuple(gaps), starting)


def after_failure(topic: str, marks: dict[int, tuple[int, int]], restart_from: str, error: str) -> Gap:
    """The lane died on OffsetOutOfRangeException and its checkpoint logged no offsets to compare (a fresh
    generation whose starting offsets went out of range): every partition restarts at `restart_from`."""
    fresh = EARLIEST if restart_from == "earliest" else LATEST
    log.warning("%s: the lane failed reading trades that are gone (%s)", topic, error[:300])
    return Gap(topic, False, restart_from,
               tuple(PartitionGap(p, -1, low, high, None) for p, (low, high) in sorted(marks.items())),
               {p: fresh for p in marks})


def out_of_range(error: str | None) -> bool:
    """The lane's failure is Kafka's: an offset the topic does not have."""
    return bool(error) and "OffsetOutOfRange" in error


# --- I/O ---------------------------------------------------------------------------------------------
def _batches(store, prefix: str, log_name: str) -> dict[int, str]:
    """Batch id → key of the checkpoint's offsets/ or commits/ entries (Spark keeps the last 100)."""
    root = f"{prefix}{log_name}/"
    out = {}
    for item in store.list(root):
        name = item["Key"][len(root):]
        if name.isdigit():
            out[int(name)] = item["Key"]
    return out


def _topic_offsets(body: str, topic: str) -> dict[int, int] | None:
    """An offsets/ entry: "v1", the batch's metadata, then one JSON line per source."""
    for line in body.splitlines()[2:]:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get(topic), dict):
            return {int(p): int(o) for p, o in value[topic].items()}
    return None


def checkpoint_offsets(checkpoint: str, topic: str) -> dict[int, int] | None:
    """Where the query at `checkpoint` (a directory or ``s3a://bucket/prefix``) resumes reading `topic`:
    per partition, the lower of the latest offsets/ entry and the last committed batch's (Spark re-runs an
    uncommitted batch; a real-time batch logs its start offsets). None: no offsets logged yet."""
    from aldebaran.storage.store import open_prefix

    store, prefix = open_prefix(checkpoint)
    offsets = _batches(store, prefix, "offsets")
    if not offsets:
        return None
    commits = _batches(store, prefix, "commits")
    wanted = {max(offsets)} | ({max(commits)} & set(offsets) if commits else set())
    found: dict[int, int] = {}
    for batch in sorted(wanted):
        for p, o in (_topic_offsets(store.get(offsets[batch]).body.decode(), topic) or {}).items():
            found[p] = min(o, found.get(p, o))
    return found or None


def watermarks(kafka, topic: str, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """The topic's (low, high) watermark per partition now ({} when the topic does not exist)."""
    from confluent_kafka import TopicPartition

    from aldebaran.kafka import io as kio

    consumer = kio.consumer(kafka, "aldebaran-lane-gap-check")  # no subscription, no commit
    try:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                for p in sorted(meta.partitions)}
    finally:
        consumer.close()


def check(checkpoint: str, kafka, restart_from: str) -> Gap | None:
    """:func:`decide` for the lane's checkpoint and its trades topic now."""
    found = checkpoint_offsets(checkpoint, kafka.trades_topic)
    if not found:
        return None
    return decide(kafka.trades_topic, found, watermarks(kafka, kafka.trades_topic), restart_from)


def abandon(checkpoint: str, now: float | None = None) -> str:
    """Move a checkpoint aside, under ``<its parent>/abandoned/<UTC time>-<its name>``; returns where.
    A directory is renamed; on S3 each object is copied, then the old prefix deleted."""
    import os

    from aldebaran.storage.store import open_prefix

    parent, _, name = checkpoint.rstrip("/").rpartition("/")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    target = f"{parent}/{ABANDONED}/{stamp}-{name}"
    if "://" not in checkpoint or checkpoint.startswith("file://"):
        src, dst = checkpoint.removeprefix("file://"), target.removeprefix("file://")
        if os.path.exists(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(src, dst)
        return target
    store, src = open_prefix(checkpoint)
    _, dst = open_prefix(target)
    for item in list(store.list(src)):
        store.put(dst + item["Key"][len(src):], store.get(item["Key"]).body, "application/octet-stream")
    store.delete_prefix(src)
    return target
