"""The cross-lane claim log (``ALDEBARAN_DELIVERY_CROSS_LANE=log``): one object per (channel, partition) where
both lanes' runs of a fast channel claim their alert ids, instead of one sent marker per alert.

    <prefix>/<channel>/claims/<partition:05d>.json   {"v": 1, "runs": [[run_key, [alert_id, ...]], ...]}

A run (either lane) claims the ids it is about to send in one conditional write: read the log (cached with
its ETag), append the ids nobody holds under the run's key, write it back with ``If-Match: <etag>`` (the first
write ``If-None-Match: *``); on 412 re-read and decide again. The ids some other run already holds come back
with that run's key: the settler records them REPEAT once the holder run is recorded (it waits up to a lease
for that; a holder still unrecorded then belongs to a lane gone for good, and the alert is sent here). A run
waits only on runs that claimed before it (one write claims all its ids), so two runs never wait on each other.
A run that claims again (adopted after its owner died) finds its own key: sent.

The race: two runs (one per lane) claiming the same id at once both write against the ETag they read; the
store lets one write through, the other gets 412, re-reads, and finds the id held: exactly one sends. A
dispatcher that dies between its claim and its record leaves its ids held by an unrecorded run, which its
successor adopts and sends (the run is claimed before the log), so nothing is lost.

It works because both lanes' copies of an alert meet in the same log: the alerts topic and the fast topic
must have the same partition count and the same key → partition mapping (both are written by Spark's Kafka
sink under the key ``alert_id``, Java murmur2). :func:`check_aligned` refuses a partition count mismatch with
:class:`LanesMisaligned` when a dispatcher of a fast channel starts in this mode.

The log keeps the last ``ALDEBARAN_DELIVERY_CLAIM_LOG_WINDOW`` ids (oldest runs dropped first, whole runs): the
other lane's copy must come within that many alerts of the partition; a later one is not recognised here (the
recipient drops it by its idempotency key, or the log channel by its sent-log; that is why only channels where
a resend is harmless use the log — the others keep their markers).
"""

from __future__ import annotations

import json
import logging
import threading

from aldebaran.exceptions import AlreadyExists, ConfigError, LedgerCorrupt, NotFound, PreconditionFailed
from aldebaran.storage.store import safe_segment, writer_token

log = logging.getLogger(__name__)

MAX_TRIES = 50  # CAS rounds before giving up (two writers per log: one per lane)


class LanesMisaligned(ConfigError):
    """The alerts topic and the fast topic are partitioned differently: the claim log cannot meet both copies."""


def merge(runs: list, ids: list[str], run_key: str, window: int) -> tuple[list | None, dict[str, str]]:
    """The log after `run_key` claims `ids` (None if unchanged: nothing to write), and id → holder run key of
    every id another run holds. Pure: the caller reads and writes."""
    holder = {alert_id: key for key, held in runs for alert_id in held}
    held_elsewhere = {i: holder[i] for i in ids if i in holder and holder[i] != run_key}
    fresh = list(dict.fromkeys(i for i in ids if i not in holder))
    if not fresh:
        return None, held_elsewhere
    merged = [[k, list(h)] for k, h in runs]
    if merged and merged[-1][0] == run_key:
        merged[-1][1].extend(fresh)
    else:
        merged.append([run_key, fresh])
    total = sum(len(h) for _, h in merged)
    while len(merged) > 1 and total > window:  # whole runs, oldest first; never the one claiming now
        total -= len(merged.pop(0)[1])
    return merged, held_elsewhere


class ClaimLog:
    """One (channel, partition)'s claim log, as this process last saw it."""

    def __init__(self, ledger, channel: str, partition: int, window: int) -> None:
        self.ledger, self.window = ledger, window
        self.key = f"{ledger.prefix}/{safe_segment(channel, 'channel')}/claims/{partition:05d}.json"
        self._runs: list = []
        self._etag: str | None = None
        self._read = False
        self._lock = threading.Lock()
        self.conflicts = 0  # 412s met (the other lane wrote first)

    def claim(self, ids: list[str], run_key: str) -> dict[str, str]:
        """Claim `ids` for `run_key`: id → holder run key of those another run holds (not to be sent here)."""
        with self._lock:
            if not self._read:
                self._reload()
            token = writer_token()  # the same for every try: a try whose reply was lost is ours on read-back
            for _ in range(MAX_TRIES):
                runs, held = merge(self._runs, ids, run_key, self.window)
                if runs is None:
                    return held  # a stale view is enough: a holder once seen stays the holder
                body = json.dumps({"v": 1, "runs": runs}, separators=(",", ":")).encode()
                try:
                    if self._etag is None:
                        etag = self.ledger._write(self.ledger.store.create, self.key, body, "application/json", token)
                    else:
                        etag = self.ledger._write(self.ledger.store.replace, self.key, body, self._etag,
                                                  "application/json", token)
                except (AlreadyExists, PreconditionFailed):
                    self.conflicts += 1
                    self._reload()
                    continue
                self._runs, self._etag = runs, etag
                return held
            raise PreconditionFailed(f"{self.key}: {MAX_TRIES} conditional writes lost in a row")

    def _reload(self) -> None:
        try:
            obj = self.ledger.store.get(self.key)
        except NotFound:
            self._runs, self._etag = [], None
        else:
            self._runs, self._etag = parse(obj.body, self.key), obj.etag
        self._read = True


def holder_of(ledger, channel: str, alert_id: str) -> str | None:
    """The run key a channel's claim logs name for `alert_id`, or None (for explain: one listing and a read per
    partition; the partition is not known from the id alone, the writer's partitioner decides it)."""
    prefix = f"{ledger.prefix}/{safe_segment(channel, 'channel')}/claims/"
    for item in ledger.store.list(prefix):
        try:
            runs = parse(ledger.store.get(item["Key"]).body, item["Key"])
        except NotFound:
            continue
        except LedgerCorrupt as exc:  # a reader that only looks: skipped with its key, never fatal
            log.warning("explain: %s", exc)
            continue
        for key, held in runs:
            if alert_id in held:
                return key
    return None


def parse(body: bytes, key: str) -> list:
    """The runs of a stored log; LedgerCorrupt (quarantined by the caller's reader) if it is not one."""
    try:
        runs = json.loads(body)["runs"]
        if all(isinstance(k, str) and isinstance(h, list) and all(isinstance(i, str) for i in h) for k, h in runs):
            return runs
        raise ValueError("odd entry")
    except (ValueError, KeyError, TypeError) as exc:
        raise LedgerCorrupt(f"claim log {key} is unreadable: {exc}", key, f"unreadable claim log: {exc}") from None


def check_aligned(kafka) -> None:
    """Refuse (LanesMisaligned) when the alerts and fast topics' partition counts differ; the key → partition
    mapping is the writers' (Spark's Kafka sink on both, keyed by alert_id) and cannot be read from the broker."""
    from aldebaran.kafka.admin import partition_count

    exact, fast = partition_count(kafka, kafka.alerts_topic), partition_count(kafka, kafka.fast_alerts_topic)
    if exact != fast:
        raise LanesMisaligned(
            f"ALDEBARAN_DELIVERY_CROSS_LANE=log needs {kafka.alerts_topic} and {kafka.fast_alerts_topic} partitioned "
            f"alike (same count, both keyed by alert_id with the same partitioner): they have {exact} and {fast} "
            "partitions; repartition one, or use ALDEBARAN_DELIVERY_CROSS_LANE=markers")
