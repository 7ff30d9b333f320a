"""Which plan the auditor runs, decided once at start and recorded with the books (docs/design.md "Plans").
The one place that chooses between them (``ALDEBARAN_AUDIT_PLAN``):

- ``copartitioned``: one shard per partition of the trades topic, no shuffle, trades parsed in Python and
  books in a dedicated process per shard (copartitioned.py, shardhost.py). Needs producers to keep the
  keying contract (aldebaran.audit.partitioning); an event that breaks it is detected and routed to its
  owner, never audited in the wrong book. The measured winner (docs/benchmarks.md "Plans and parsers
  side by side").
- ``shuffle``: JVM parse, then repartition by order id into ``ALDEBARAN_AUDIT_SHARDS`` shards
  (shuffle.py). Works for any keying, bounded runs included: the fallback for unkeyed topics.
- ``auto`` (default): co-partitioned when a sample of the topic's latest messages keeps the contract with
  any standard partitioner (or the topic is empty), shuffle otherwise; an existing checkpoint keeps the
  plan it was written with.

The co-partitioned plan also records which partitioner the producers use (crc32: librdkafka's default;
murmur2: the Java client's; fnv1a), since it decides which shard owns an order: detected from the
sample, or, on an empty topic, from its first events before the first batch that has any
(:func:`learn_partitioner`); ``ALDEBARAN_AUDIT_PARTITIONER`` pins it.

The books of the two plans are sharded differently (the producers' partitioner over the partitions vs
Spark's hash over the shards), so a checkpoint records its plan in its books (``checkpoint.PLAN``) and
refuses another.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from aldebaran.audit import parse as events
from aldebaran.audit.partitioning import PARTITIONERS, placements
from aldebaran.runtime.checkpoint import PLAN
from aldebaran.exceptions import AuditorError, ConfigError

log = logging.getLogger(__name__)

SAMPLE_PER_PARTITION = 200
MAX_SHARDS = 100_000  # a recorded plan's bound: shuffle shards are ≤ 4096, co-partitioned ones a topic's partitions
DEFAULT_PARTITIONER = "crc32"  # a topic with messages but no valid keyed event to learn from: librdkafka's
KEYED_SHARE = 0.99  # auto: co-partitioned if at least this share of the sampled valid events keeps the contract


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a batch reaches the books: `copartitioned` (one shard per Kafka partition) or `shuffle`
    (repartition by order id into `shards`)."""

    name: str
    shards: int
    # co-partitioned: the producers' partitioner (aldebaran.audit.partitioning); None until the topic's
    # first events show it (a plan decided on an empty topic).
    partitioner: str | None = "murmur2"

    @property
    def copartitioned(self) -> bool:
        return self.name == "copartitioned"

    @property
    def parser(self) -> str:
        """Where trades are parsed: in the shard's Python process, or in the JVM (the shuffle needs the order id)."""
        return "python" if self.copartitioned else "jvm"


def decide(settings, kafka, state_root: str) -> Plan:
    """The plan for this run (logged), after checking it against the one the checkpoint was written with."""
    from aldebaran.kafka import admin as kadmin

    partitions = kadmin.partition_count(kafka, kafka.trades_topic)
    recorded = read_recorded(state_root)
    chosen = None if settings.partitioner == "auto" else settings.partitioner
    if settings.plan == "auto" and recorded is not None:
        plan, why = recorded, "as recorded with the books"
        if plan.copartitioned and chosen is not None:
            plan = dataclasses.replace(plan, partitioner=chosen)
    elif settings.plan == "auto":
        sample = sample_keying(kafka, partitions)
        best, kept = sample.best(chosen)
        if sample.sampled == 0 or kept / sample.sampled >= KEYED_SHARE:
            plan = Plan("copartitioned", partitions, partitioner=chosen or (best if sample.sampled else None))
            why = (f"{kept}/{sample.sampled} sampled events keyed by order id in their {best} partition" if
                   sample.sampled else "the topic holds no events yet; its first events will show the partitioner")
        else:
            plan, why = Plan("shuffle", settings.shards, partitioner=None), (
                f"only {kept}/{sample.sampled} sampled events keyed by order id in their partition (best: {best})")
    elif settings.plan == "copartitioned":
        plan, why = Plan("copartitioned", partitions, partitioner=chosen), "ALDEBARAN_AUDIT_PLAN"
        if recorded is not None:
            plan = dataclasses.replace(plan, partitioner=chosen or recorded.partitioner)
        elif chosen is None:
            sample = sample_keying(kafka, partitions)
            if sample.sampled:
                plan = dataclasses.replace(plan, partitioner=sample.best()[0])
    else:
        plan, why = Plan("shuffle", settings.shards, partitioner=None), "ALDEBARAN_AUDIT_PLAN"
    if recorded is not None and (recorded.name, recorded.shards) != (plan.name, plan.shards):
        raise ConfigError(
            f"ALDEBARAN_AUDIT_PLAN/ALDEBARAN_AUDIT_SHARDS: the checkpoint's books were written by the {recorded.name} "
            f"plan with {recorded.shards} shards; this run would use {plan.name} with {plan.shards} shards "
            f"({why}). Books sharded differently cannot be read: keep the plan (or the topic's partition count), "
            f"or start a new checkpoint and replay.")
    if (recorded is not None and plan.copartitioned and recorded.partitioner is not None
            and plan.partitioner != recorded.partitioner):
        raise ConfigError(
            f"ALDEBARAN_AUDIT_PARTITIONER: the checkpoint's books are owned by the {recorded.partitioner} "
            f"partitioner; this run asks for {plan.partitioner}. Keep the recorded one (auto does), or start a new "
            f"checkpoint and replay.")
    if plan.copartitioned and partitions != plan.shards:
        raise ConfigError(f"the trades topic {kafka.trades_topic} now has {partitions} partitions, the checkpoint's "
                          f"co-partitioned books {plan.shards}: start a new checkpoint and replay")
    if recorded is None or recorded.partitioner != plan.partitioner:
        write_recorded(state_root, plan)
    if plan.copartitioned:
        log.info("auditor plan: copartitioned, %d shards = partitions of %s, parser python, books in dedicated "
                 "processes, partitioner %s (%s)", plan.shards, kafka.trades_topic,
                 plan.partitioner or "not known yet", why)
    else:
        log.info("auditor plan: shuffle, %d shards, parser jvm (%s)", plan.shards, why)
    return plan


def learn_partitioner(kafka, plan: Plan, state_root: str) -> Plan | None:
    """A co-partitioned plan decided on an empty topic: the partitioner its producers use, recorded with the
    books, once the topic has events (None while it is still empty). Called by the driver before a batch,
    so it is known before any book opens. A topic whose sampled messages hold no valid keyed event gets
    DEFAULT_PARTITIONER (logged)."""
    sample = sample_keying(kafka, plan.shards)
    if sample.messages == 0:
        return None
    if sample.sampled:
        best, kept = sample.best()
        why = f"{kept}/{sample.sampled} sampled events keyed by order id in their {best} partition"
    else:
        best, why = DEFAULT_PARTITIONER, "no valid event among the sampled messages: the default"
    learned = dataclasses.replace(plan, partitioner=best)
    write_recorded(state_root, learned)
    log.info("auditor plan: partitioner %s (%s)", best, why)
    return learned


@dataclasses.dataclass
class Sample:
    """What the latest messages of the trades topic say about its producers' keying."""

    messages: int = 0  # messages read
    sampled: int = 0  # valid events among them
    kept: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(PARTITIONERS, 0))  # keyed by order id, in that partitioner's partition

    def best(self, only: str | None = None) -> tuple[str, int]:
        """The partitioner that explains most sampled events (ties: PARTITIONERS order), and how many."""
        if only is not None:
            return only, self.kept[only]
        name = max(PARTITIONERS, key=lambda n: (self.kept[n], -PARTITIONERS.index(n)))
        return name, self.kept[name]


def sample_keying(kafka, partitions: int) -> Sample:
    """Over the latest SAMPLE_PER_PARTITION messages of each partition of the trades topic: the valid
    events, and how many of them each standard partitioner places where they are (keyed by order id)."""
    from confluent_kafka import TopicPartition

    from aldebaran.kafka.io import consumer

    c = consumer(kafka, group=f"aldebaran-plan-sample-{os.getpid()}", **{"enable.partition.eof": True})
    sample = Sample()
    try:
        todo = {}
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(kafka.trades_topic, p), timeout=10)
            if hi > lo:
                todo[p] = (max(lo, hi - SAMPLE_PER_PARTITION), hi)
        if not todo:
            return sample
        c.assign([TopicPartition(kafka.trades_topic, p, start) for p, (start, _) in todo.items()])
        while todo:
            msg = c.poll(5)
            if msg is None:
                break
            if msg.error():
                todo.pop(msg.partition(), None)
                continue
            sample.messages += 1
            ev = events.validate(msg.value())
            if isinstance(ev, events.Event):
                sample.sampled += 1
                key = ev.order_id.encode()
                if msg.key() == key:
                    for name, p in placements(key, partitions).items():
                        sample.kept[name] += p == msg.partition()
            if msg.offset() + 1 >= todo.get(msg.partition(), (0, 0))[1]:
                todo.pop(msg.partition(), None)
    finally:
        c.close()
    return sample


def read_recorded(state_root: str) -> Plan | None:
    from aldebaran.audit.state.files import files_for

    files = files_for(state_root)
    try:
        body = files.get(PLAN)
    except FileNotFoundError:
        return Plan("shuffle", _legacy_shards(state_root), partitioner=None) if _has_books(state_root) else None
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise TypeError(f"JSON {type(doc).__name__}, not an object")
        if doc.get("plan") not in ("copartitioned", "shuffle"):
            raise ValueError(f"unknown plan {str(doc.get('plan'))[:40]!r}")
        if type(doc.get("shards")) is not int or not 0 < doc["shards"] <= MAX_SHARDS:
            raise ValueError(f"shards {str(doc.get('shards'))[:40]!r} is not a whole number in 1..{MAX_SHARDS}")
        partitioner = doc.get("partitioner", "kafka-murmur2") if doc["plan"] == "copartitioned" else None
        # Written before any standard partitioner was first-class: "kafka-murmur2" is murmur2.
        partitioner = {"kafka-murmur2": "murmur2"}.get(partitioner, partitioner)
        if partitioner is not None and partitioner not in PARTITIONERS:
            raise ValueError(f"unknown partitioner {str(partitioner)[:40]!r}")
    except (ValueError, TypeError, RecursionError) as exc:
        # Not quarantined: the plan says how the books are sharded, and a guess would read them wrongly.
        # The auditor stops with the reason, and the file stays for an operator to restore.
        raise AuditorError(f"the books' {PLAN} under {state_root} cannot be read: {exc}; the auditor will not "
                           "guess how its books are sharded: restore the file, or start from a new checkpoint") from None
    # A recorded "parser" is history: it never changed how the books are sharded, so it is not read back.
    return Plan(doc["plan"], doc["shards"], partitioner=partitioner)


def write_recorded(state_root: str, plan: Plan) -> None:
    from aldebaran.audit.state.files import files_for

    files_for(state_root).put(PLAN, json.dumps(
        {"plan": plan.name, "shards": plan.shards, "parser": plan.parser,
         "partitioner": plan.partitioner if plan.copartitioned else "spark-hash"}).encode())


def _shard_dirs(state_root: str) -> set[str]:
    if state_root.startswith(("s3://", "s3a://")):
        from aldebaran.audit.state.files import files_for

        return {n.split("/", 1)[0] for n in files_for(state_root).names() if n.startswith("shard-")}
    root = state_root.removeprefix("file://")
    return {n for n in os.listdir(root) if n.startswith("shard-")} if os.path.isdir(root) else set()


def _has_books(state_root: str) -> bool:
    return bool(_shard_dirs(state_root))


def _legacy_shards(state_root: str) -> int:
    """A checkpoint written before plans were recorded: the shuffle plan, as many shards as it has."""
    return max(int(n.removeprefix("shard-")) for n in _shard_dirs(state_root)) + 1
