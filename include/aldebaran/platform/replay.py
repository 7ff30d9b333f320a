"""Replays and backfills: re-run the audit over a fixed range of the trades topic as a bounded job.

`plan` turns the operator's range (offsets, timestamps, or earliest/latest) into explicit per-partition
start and end offsets, resolved once against Kafka, so the range is fixed for the whole run (trades
arriving meanwhile are not part of it). The replay runs the same auditor (spark_apps/auditor.py, via
the Spark provider's SparkSubmitOperator) with ``--trigger available-now`` on a **fresh checkpoint of
its own** — it never touches the live auditor's checkpoint or lease — and its own query name (its
alert archive is ``archive/replays/<query>/``).

Its alerts go to the alerts topic with the same deterministic ids (f(kind, order id)), so the delivery
records (``deliveries/<channel>/<alert_id>.json``) suppress everything already delivered; `report`
lists what is new (no delivery record on any configured channel yet). While it runs, the auditor logs
its progress through the range (`bounded_progress`: events read of the range's size, rate, ETA).

Range syntax (start / end Params):
- ``earliest`` / ``latest``;
- offsets as JSON, per partition ``{"0": 120, "1": 95}`` or Spark's ``{"trades": {"0": 120, "1": 95}}``;
  the end is exclusive;
- a time, ISO-8601 (``2026-11-22T09:00:00Z``) or epoch milliseconds: the first offset of each partition
  whose Kafka timestamp is at or after it (Kafka's offsets-for-times index).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import time
from datetime import datetime, timezone
from typing import Callable, Iterator

from aldebaran.exceptions import ConfigError

log = logging.getLogger(__name__)

EARLIEST, LATEST = "earliest", "latest"


def _parse_time_ms(spec: str) -> int | None:
    text = spec.strip()
    if re.fullmatch(r"\d{11,}", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def resolve(spec: str | None, topic: str, which: str, watermarks: dict[int, tuple[int, int]],
            offsets_for_time=None) -> dict[int, int]:
    """One end of the range as explicit offsets per partition (every partition of the topic)."""
    name = f"{which} ({spec!r})"
    text = (spec or (EARLIEST if which == "start" else LATEST)).strip()
    if text == EARLIEST:
        return {p: lo for p, (lo, _) in watermarks.items()}
    if text == LATEST:
        return {p: hi for p, (_, hi) in watermarks.items()}
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"replay {name}: not valid JSON: {exc}") from None
        if isinstance(raw, dict) and topic in raw and isinstance(raw[topic], dict):
            raw = raw[topic]
        try:
            given = {int(p): int(o) for p, o in raw.items()}
        except (ValueError, TypeError, AttributeError):
            raise ConfigError(f"replay {name}: expected {{\"<partition>\": <offset>, ...}}") from None
        unknown = sorted(set(given) - set(watermarks))
        if unknown:
            raise ConfigError(f"replay {name}: topic {topic} has no partition(s) {unknown} "
                              f"(it has {sorted(watermarks)})")
        default = {p: (lo if which == "start" else hi) for p, (lo, hi) in watermarks.items()}
        # -2 / -1 are Kafka's earliest / latest, as in Spark's JSON offsets.
        return {p: {-2: watermarks[p][0], -1: watermarks[p][1]}.get(o, o) for p, o in {**default, **given}.items()}
    at_ms = _parse_time_ms(text)
    if at_ms is None:
        raise ConfigError(f"replay {name}: use earliest, latest, JSON offsets, an ISO-8601 time or epoch ms")
    if offsets_for_time is None:
        raise ConfigError(f"replay {name}: a time needs Kafka's offsets-for-times lookup")
    found = offsets_for_time(at_ms)
    # No message at or after that time in a partition: the range ends (or starts) at its end.
    return {p: (found.get(p, -1) if found.get(p, -1) >= 0 else watermarks[p][1]) for p in watermarks}


def _kafka_lookups(kafka, topic: str):
    from confluent_kafka import TopicPartition

    from aldebaran.exceptions import AldebaranError
    from aldebaran.kafka.io import consumer

    c = consumer(kafka, group="aldebaran-replay-planner")
    meta = c.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None:
        c.close()
        raise AldebaranError(f"replay: topic {topic} not found on {kafka.bootstrap_servers}")
    watermarks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in meta.partitions}

    def offsets_for_time(at_ms: int) -> dict[int, int]:
        got = c.offsets_for_times([TopicPartition(topic, p, at_ms) for p in watermarks], timeout=10)
        return {tp.partition: tp.offset for tp in got}

    return c, watermarks, offsets_for_time


def submit_env() -> dict[str, str]:
    """What spark-submit needs from the environment: the pyspark wheel's launcher on PATH, and this
    interpreter (the one with the platform's packages) for the driver and the workers."""
    import os

    from aldebaran.runtime import paths
    from aldebaran.runtime import spark as sparkmod

    from aldebaran.platform.detached_submit import master

    env = sparkmod.spark_env(master=master({}))  # spark_default's master: SPARK_LOCAL_IP only for a local one
    out = {k: env[k] for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP") if k in env}
    # Not configuration: the task's PATH, with this venv's spark-submit first, for the subprocess.
    out["PATH"] = f"{paths.venv_bin('spark-submit').parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return out


def export_kafka_connection(context=None) -> None:
    """``pre_execute`` of the replay's spark-submit task: the provider's hook starts spark-submit with this
    task's environment plus ``env_vars`` (an XCom, no place for a secret), so the platform's Kafka
    connection as Airflow resolved it (aldebaran.kafka.conn) goes into this task process's environment, and
    the object store's too (aldebaran.storage.s3access: the replay's books and s3a checkpoint)."""
    import os

    from aldebaran.storage import s3access
    from aldebaran.kafka.conn import connection_env

    # Not configuration: the resolved connections go into the environment spark-submit inherits.
    os.environ.update({**connection_env(), **s3access.connection_env()})


def replay_name(run_id: str) -> str:
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return f"replay-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{digest}"


def checkpoint_root(given: str | None) -> str:
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.runtime.checkpoint import Checkpoint
    from aldebaran.platform.settings import ReplaySettings
    from aldebaran.settings import load

    root = given or load(ReplaySettings).checkpoint_root
    if root:
        return root.rstrip("/")
    return Checkpoint(load(AuditorSettings).checkpoint).beside("replays")


def plan(run_id: str, topic: str | None = None, start: str | None = None, end: str | None = None,
         rules: str | None = None, checkpoint_root_override: str | None = None, expire_at_end: bool = False) -> dict:
    """Task 1: the replay's exact range, fresh checkpoint and auditor arguments.

    `expire_at_end` (default off): also report the books still open at the range's end as if their time
    had run out (ORPHANs). Off, a replay equals the live auditor's alerts for the same input; on, it may
    add ORPHANs the live auditor never sent (a request that came after the range's end)."""
    from aldebaran.runtime import spark as sparkmod
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.platform.settings import ReplaySettings
    from aldebaran.settings import KafkaSettings, load

    kafka = load(KafkaSettings, trades_topic=topic or None)
    topic = kafka.trades_topic
    rules = load(AuditorSettings, rules=rules or None).rules
    c, watermarks, lookup = _kafka_lookups(kafka, topic)
    try:
        begin = resolve(start, topic, "start", watermarks, lookup)
        finish = resolve(end, topic, "end", watermarks, lookup)
    finally:
        c.close()
    backwards = {p: (begin[p], finish[p]) for p in watermarks if finish[p] < begin[p]}
    if backwards:
        raise ConfigError(f"replay: end before start on {topic} partition(s) {backwards}")
    name = replay_name(run_id)
    checkpoint = f"{checkpoint_root(checkpoint_root_override)}/{name}"
    archive_prefix = load(ReplaySettings).archive_prefix.strip("/")
    starting = json.dumps({topic: {str(p): o for p, o in sorted(begin.items())}})
    ending = json.dumps({topic: {str(p): o for p, o in sorted(finish.items())}})
    events = sum(finish[p] - begin[p] for p in watermarks)
    result = {
        "run_id": run_id, "topic": topic, "query_name": name, "checkpoint": checkpoint,
        "archive_prefix": archive_prefix, "rules": rules, "start": begin, "end": finish, "messages": events,
        "expire_at_end": expire_at_end,
        "auditor_args": ["--trigger", "available-now", "--checkpoint", checkpoint, "--query-name", name,
                         "--starting-offsets", starting, "--ending-offsets", ending, "--rules", rules,
                         "--archive-prefix", archive_prefix, "--expire-at-end", "true" if expire_at_end else "false"],
        # The replay reads `topic`; everything else (alerts topic, object store) as configured.
        "env_vars": {**submit_env(), "ALDEBARAN_KAFKA_TRADES_TOPIC": topic},
        "jars": ",".join(sparkmod.connector_jars(s3a=checkpoint.startswith("s3a://"))),
    }
    log.info("replay %s: %s offsets %s → %s (%d messages), checkpoint %s, rules %s", name, topic, begin, finish,
             events, checkpoint, rules)
    return result


def range_size(starting: str | None, ending: str | None) -> int | None:
    """Messages between two explicit Spark JSON offsets (``{"<topic>": {"<partition>": offset}}``, as
    `plan` writes them); None when either end is not explicit (earliest/latest, -2/-1)."""
    try:
        begin, end = json.loads(starting or ""), json.loads(ending or "")
        pairs = [(int(begin[t][p]), int(o)) for t, offsets in end.items() for p, o in offsets.items()]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if any(b < 0 or e < 0 for b, e in pairs):
        return None
    return sum(max(0, e - b) for b, e in pairs)


# The auditor's per-batch figures that together count the messages it read: valid events (applied or
# duplicates), DLQ records, and events of another partition's orders (co-partitioned plan: produced to
# their owner partition, beyond a bounded replay's end offsets).
READ_FIGURES = ("applied", "duplicates", "dlq", "misrouted")


@contextlib.contextmanager
def bounded_progress(settings) -> Iterator[Callable[[dict], None] | None]:
    """For a bounded run of the auditor (``--trigger available-now``, as a replay runs it): an `on_batch`
    callback that logs the events read of the range's size, rate and ETA (aldebaran.runtime.progress: a line at
    most every 10 s, in the task log). None for a streaming run."""
    if settings.trigger != "available-now":
        yield None
        return
    from aldebaran.runtime.progress import Progress

    total = range_size(settings.starting_offsets, settings.ending_offsets)
    # Plain lines even on a terminal: the Spark driver shares it with the JVM's log output, which writes
    # past Python and would tear a live bar.
    bar = Progress(settings.query_name, total, unit="events", logger=log, terminal=False)
    started = False

    def on_batch(figures: dict) -> None:
        nonlocal started
        if not started:  # the clock starts with the first batch: JVM and session start are no part of the rate
            bar.start()
            started = True
        bar.advance(sum(figures.get(k) or 0 for k in READ_FIGURES))

    try:
        yield on_batch
    finally:
        bar.close()


def plan_from_params(run_id: str, params: dict) -> dict:
    given = {k: v for k, v in dict(params).items() if v not in ("", None)}
    return plan(run_id, topic=given.get("topic"), start=given.get("start"), end=given.get("end"),
                rules=given.get("rules"), checkpoint_root_override=given.get("checkpoint_root"),
                expire_at_end=bool(given.get("expire_at_end", False)))


def report(replay: dict) -> dict:
    """Task 3: what the replay found, and which of its alerts are new (no delivery record yet)."""
    from aldebaran.audit.archive import Archive
    from aldebaran.delivery.channels import channel_names
    from aldebaran.delivery.dispatcher import default_ledger
    from aldebaran.storage.store import open_store

    store = open_store()
    alerts = [json.loads(line) for line in Archive(store, replay["archive_prefix"], replay["query_name"]).read_all()]
    by_id = {a["alert_id"]: a for a in alerts}
    ledger = default_ledger()
    channels = channel_names()
    recorded: dict[str, set[str]] = {channel: ledger.known_alert_ids(channel) for channel in channels}
    new = sorted(i for i in by_id if not any(i in recorded[c] for c in channels))
    partial = sorted(i for i in by_id if i not in new and not all(i in recorded[c] for c in channels))
    kinds: dict[str, int] = {}
    for a in alerts:
        kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
    summary = {"query_name": replay["query_name"], "messages": replay["messages"], "alerts": len(alerts),
               "distinct_alert_ids": len(by_id), "kinds": kinds, "channels": channels,
               "already_recorded": len(by_id) - len(new) - len(partial), "partially_recorded": partial,
               "new_count": len(new), "new": new[:1000],
               "archive": store.uri(f"{replay['archive_prefix']}/{replay['query_name']}/")}
    log.info("replay %s: %d alerts (%d distinct) over %d messages; %d already have a delivery record on every "
             "channel, %d on some, %d are new", replay["query_name"], len(alerts), len(by_id), replay["messages"],
             summary["already_recorded"], len(partial), len(new))
    for alert_id in new[:200]:
        a = by_id[alert_id]
        log.info("  new: %s %s order %s (requested %s, purchased %s)", alert_id, a["kind"], a["order_id"],
                 a.get("requested"), a.get("purchased"))
    if len(new) > 200:
        log.info("  … and %d more new alerts (all in %s)", len(new) - 200, summary["archive"])
    return summary
