"""Which plan the auditor runs, decided once at start and recorded with the books (docs/design.md "Plans").

- ``copartitioned``: one shard per partition of the trades topic, no shuffle (aldebaran.audit.sparkjob.copartitioned).
  Needs producers to keep the keying contract (aldebaran.audit.partitioning); an event that breaks it is
  detected and routed to its owner, never audited in the wrong book.
- ``shuffle``: JVM parse, then repartition by order id into ``ALDEBARAN_AUDIT_SHARDS`` shards. Works for
  any keying.
- ``auto`` (default): co-partitioned when a sample of the topic's latest messages keeps the contract with
  any standard partitioner (or the topic is empty), shuffle otherwise; an existing checkpoint keeps the
  plan it was written with.

The co-partitioned plan also records which partitioner the producers use (crc32: librdkafka's default;
murmur2: the Java client's; fnv1a), since it decides which shard owns an order: detected from the
sample, or, on an empty topic, from its first events before the first batch that has any
(:func:`learn_partitioner`); ``ALDEBARAN_AUDIT_PARTITIONER`` pins it.

The books of the two plans are sharded differently (Kafka's murmur2 over the partitions vs Spark's hash
over the shards), so a checkpoint records its plan in ``<checkpoint>/books/plan.json`` and refuses another.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from aldebaran import events
from aldebaran.audit.sparkjob.batch import Plan
from aldebaran.audit.partitioning import PARTITIONERS, placements
from aldebaran.exceptions import ConfigError

log = logging.getLogger(__name__)

SAMPLE_PER_PARTITION = 200
DEFAULT_PARTITIONER = "crc32"  # a topic with messages but no valid keyed event to learn from: librdkafka's
KEYED_SHARE = 0.99  # auto: co-partitioned if at least this share of the sampled valid events keeps the contract


def decide(settings, kafka, state_root: str) -> Plan:
    """The plan for this run (logged), after checking it against the one the checkpoint was written with."""
    from aldebaran import kafka_admin

    partitions = kafka_admin.partition_count(kafka, kafka.trades_topic)
    recorded = read_recorded(state_root)
    chosen = None if settings.partitioner == "auto" else settings.partitioner
    if settings.plan == "auto" and recorded is not None:
        plan, why = recorded, f"as recorded in {state_root}/plan.json"
        if plan.name == "copartitioned" and chosen is not None:
            plan = dataclasses.replace(plan, partitioner=chosen)
    elif settings.plan == "auto":
        sample = sample_keying(kafka, partitions)
        best, kept = sample.best(chosen)
        if sample.sampled == 0 or kept / sample.sampled >= KEYED_SHARE:
            plan = Plan("copartitioned", partitions, "python" if settings.parser == "auto" else settings.parser,
                        partitioner=chosen or (best if sample.sampled else None))
            why = (f"{kept}/{sample.sampled} sampled events keyed by order id in their {best} partition" if
                   sample.sampled else "the topic holds no events yet; its first events will show the partitioner")
        else:
            plan, why = Plan("shuffle", settings.shards, _shuffle_parser(settings), partitioner=None), (
                f"only {kept}/{sample.sampled} sampled events keyed by order id in their partition (best: {best})")
    elif settings.plan == "copartitioned":
        plan, why = Plan("copartitioned", partitions, "python" if settings.parser == "auto" else settings.parser,
                         partitioner=chosen), "ALDEBARAN_AUDIT_PLAN"
        if recorded is not None:
            plan = dataclasses.replace(plan, partitioner=chosen or recorded.partitioner)
        elif chosen is None:
            sample = sample_keying(kafka, partitions)
            if sample.sampled:
                plan = dataclasses.replace(plan, partitioner=sample.best()[0])
    else:
        plan, why = Plan("shuffle", settings.shards, _shuffle_parser(settings), partitioner=None), "ALDEBARAN_AUDIT_PLAN"
    if recorded is not None and (recorded.name, recorded.shards) != (plan.name, plan.shards):
        raise ConfigError(
            f"ALDEBARAN_AUDIT_PLAN/ALDEBARAN_AUDIT_SHARDS: the checkpoint's books were written by the {recorded.name} "
            f"plan with {recorded.shards} shards; this run would use {plan.name} with {plan.shards} shards "
            f"({why}). Books sharded differently cannot be read: keep the plan (or the topic's partition count), "
            f"or start a new checkpoint and replay.")
    if (recorded is not None and plan.name == "copartitioned" and recorded.partitioner is not None
            and plan.partitioner != recorded.partitioner):
        raise ConfigError(
            f"ALDEBARAN_AUDIT_PARTITIONER: the checkpoint's books are owned by the {recorded.partitioner} "
            f"partitioner; this run asks for {plan.partitioner}. Keep the recorded one (auto does), or start a new "
            f"checkpoint and replay.")
    if plan.name == "copartitioned" and partitions != plan.shards:
        raise ConfigError(f"the trades topic {kafka.trades_topic} now has {partitions} partitions, the checkpoint's "
                          f"co-partitioned books {plan.shards}: start a new checkpoint and replay")
    if recorded is None or recorded.partitioner != plan.partitioner:
        write_recorded(state_root, plan)
    if plan.name == "copartitioned":
        plan = dataclasses.replace(plan, host=settings.shard_host)
    log.info("auditor plan: %s, %d shards%s, parser %s%s%s (%s)", plan.name, plan.shards,
             " = partitions of " + kafka.trades_topic if plan.name == "copartitioned" else "", plan.parser,
             f", books in {plan.host} processes" if plan.name == "copartitioned" else "",
             f", partitioner {plan.partitioner or 'not known yet'}" if plan.name == "copartitioned" else "", why)
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


def _shuffle_parser(settings) -> str:
    if settings.parser == "python":
        raise ConfigError("ALDEBARAN_AUDIT_PARSER=python needs the co-partitioned plan (the shuffle plan shards by "
                          "the order id the JVM parse extracts); use parser jvm or auto")
    return "jvm"


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

    from aldebaran.kafka_io import consumer

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
        doc = json.loads(files.get("plan.json"))
    except FileNotFoundError:
        return Plan("shuffle", _legacy_shards(state_root), "jvm", partitioner=None) if _has_books(state_root) else None
    partitioner = doc.get("partitioner", "kafka-murmur2") if doc["plan"] == "copartitioned" else None
    # Written before any standard partitioner was first-class: "kafka-murmur2" is murmur2.
    partitioner = {"kafka-murmur2": "murmur2"}.get(partitioner, partitioner)
    return Plan(doc["plan"], int(doc["shards"]), doc.get("parser", "jvm"), partitioner=partitioner)


def write_recorded(state_root: str, plan: Plan) -> None:
    from aldebaran.audit.state.files import files_for

    files_for(state_root).put("plan.json", json.dumps(
        {"plan": plan.name, "shards": plan.shards, "parser": plan.parser,
         "partitioner": plan.partitioner if plan.name == "copartitioned" else "spark-hash"}).encode())


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
