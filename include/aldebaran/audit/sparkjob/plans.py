"""Which plan the auditor runs, decided once at start and recorded with the books (docs/design.md "Plans").

- ``copartitioned``: one shard per partition of the trades topic, no shuffle (aldebaran.audit.sparkjob.copartitioned).
  Needs producers to keep the keying contract (aldebaran.audit.partitioning); an event that breaks it is
  detected and routed to its owner, never audited in the wrong book.
- ``shuffle``: JVM parse, then repartition by order id into ``ALDEBARAN_AUDIT_SHARDS`` shards. Works for
  any keying.
- ``auto`` (default): co-partitioned when a sample of the topic's latest messages keeps the contract (or
  the topic is empty), shuffle otherwise; an existing checkpoint keeps the plan it was written with.

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
from aldebaran.audit.partitioning import owner
from aldebaran.exceptions import ConfigError

log = logging.getLogger(__name__)

SAMPLE_PER_PARTITION = 200
KEYED_SHARE = 0.99  # auto: co-partitioned if at least this share of the sampled valid events keeps the contract


def decide(settings, kafka, state_root: str) -> Plan:
    """The plan for this run (logged), after checking it against the one the checkpoint was written with."""
    from aldebaran import kafka_admin

    partitions = kafka_admin.partition_count(kafka, kafka.trades_topic)
    recorded = read_recorded(state_root)
    if settings.plan == "auto" and recorded is not None:
        plan, why = recorded, f"as recorded in {state_root}/plan.json"
    elif settings.plan == "auto":
        kept, sampled = sample_keying(kafka, partitions)
        if sampled == 0 or kept / sampled >= KEYED_SHARE:
            plan = Plan("copartitioned", partitions, "python" if settings.parser == "auto" else settings.parser)
            why = (f"{kept}/{sampled} sampled events keyed by order id in their owner partition" if sampled
                   else "the topic holds no events yet; misrouted events will be routed to their owner")
        else:
            plan, why = Plan("shuffle", settings.shards, _shuffle_parser(settings)), (
                f"only {kept}/{sampled} sampled events keyed by order id in their owner partition")
    elif settings.plan == "copartitioned":
        plan, why = Plan("copartitioned", partitions,
                         "python" if settings.parser == "auto" else settings.parser), "ALDEBARAN_AUDIT_PLAN"
    else:
        plan, why = Plan("shuffle", settings.shards, _shuffle_parser(settings)), "ALDEBARAN_AUDIT_PLAN"
    if recorded is not None and (recorded.name, recorded.shards) != (plan.name, plan.shards):
        raise ConfigError(
            f"ALDEBARAN_AUDIT_PLAN/ALDEBARAN_AUDIT_SHARDS: the checkpoint's books were written by the {recorded.name} "
            f"plan with {recorded.shards} shards; this run would use {plan.name} with {plan.shards} shards "
            f"({why}). Books sharded differently cannot be read: keep the plan (or the topic's partition count), "
            f"or start a new checkpoint and replay.")
    if plan.name == "copartitioned" and partitions != plan.shards:
        raise ConfigError(f"the trades topic {kafka.trades_topic} now has {partitions} partitions, the checkpoint's "
                          f"co-partitioned books {plan.shards}: start a new checkpoint and replay")
    if recorded is None:
        write_recorded(state_root, plan)
    if plan.name == "copartitioned":
        plan = dataclasses.replace(plan, host=settings.shard_host)
    log.info("auditor plan: %s, %d shards%s, parser %s%s (%s)", plan.name, plan.shards,
             " = partitions of " + kafka.trades_topic if plan.name == "copartitioned" else "", plan.parser,
             f", books in {plan.host} processes" if plan.name == "copartitioned" else "", why)
    return plan


def _shuffle_parser(settings) -> str:
    if settings.parser == "python":
        raise ConfigError("ALDEBARAN_AUDIT_PARSER=python needs the co-partitioned plan (the shuffle plan shards by "
                          "the order id the JVM parse extracts); use parser jvm or auto")
    return "jvm"


def sample_keying(kafka, partitions: int) -> tuple[int, int]:
    """(events keyed by their order id and in its owner partition, valid events sampled) over the latest
    SAMPLE_PER_PARTITION messages of each partition of the trades topic."""
    from confluent_kafka import TopicPartition

    from aldebaran.kafka_io import consumer

    c = consumer(kafka, group=f"aldebaran-plan-sample-{os.getpid()}", **{"enable.partition.eof": True})
    kept = sampled = 0
    try:
        todo = {}
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(kafka.trades_topic, p), timeout=10)
            if hi > lo:
                todo[p] = (max(lo, hi - SAMPLE_PER_PARTITION), hi)
        c.assign([TopicPartition(kafka.trades_topic, p, start) for p, (start, _) in todo.items()])
        while todo:
            msg = c.poll(5)
            if msg is None:
                break
            if msg.error():
                todo.pop(msg.partition(), None)
                continue
            ev = events.validate(msg.value())
            if isinstance(ev, events.Event):
                sampled += 1
                kept += msg.key() == ev.order_id.encode() and msg.partition() == owner(ev.order_id, partitions)
            if msg.offset() + 1 >= todo.get(msg.partition(), (0, 0))[1]:
                todo.pop(msg.partition(), None)
    finally:
        c.close()
    return kept, sampled


def read_recorded(state_root: str) -> Plan | None:
    from aldebaran.audit.state.files import files_for

    files = files_for(state_root)
    try:
        doc = json.loads(files.get("plan.json"))
    except FileNotFoundError:
        return Plan("shuffle", _legacy_shards(state_root), "jvm") if _has_books(state_root) else None
    return Plan(doc["plan"], int(doc["shards"]), doc.get("parser", "jvm"))


def write_recorded(state_root: str, plan: Plan) -> None:
    from aldebaran.audit.state.files import files_for

    files_for(state_root).put("plan.json", json.dumps(
        {"plan": plan.name, "shards": plan.shards, "parser": plan.parser,
         "partitioner": "kafka-murmur2" if plan.name == "copartitioned" else "spark-hash"}).encode())


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
