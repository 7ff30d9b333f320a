"""The reconciler: both lanes' alert topics → :class:`aldebaran.lanes.judge.Reconciliation` → records.

It reads the fast topic (``ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC``) and the exact topic
(``ALDEBARAN_KAFKA_ALERTS_TOPIC``) with one consumer, by assignment (no consumer group offsets: where to
resume comes from the lane keeper's last heartbeat, :meth:`Reconciliation.resume_ms`, by timestamp; the
exact topic from ``ttl`` earlier, since its copy may come first). Each alert judged unconfirmed gets a
record, ``<records prefix>/<lane>/unconfirmed/<alert_id>.json`` (the fast alert, its time, why), which
``platform_health`` fails on and ``aldebaran lanes status`` lists; a late confirmation deletes it, and an
operator settles one with ``aldebaran lanes resolve`` (moved under ``resolved/`` with a reason, and a
marker under ``resolving/`` that the running reconciler takes within seconds: it drops the id from its
counts, so the heartbeat's ``reconcile`` block stays the whole truth).

The status commands and ``platform_health`` read that heartbeat block (counts, the oldest unconfirmed
alert, the first ids), never the records' listing: that listing grows with what is unconfirmed and
costs one GET per record (:func:`list_records`, kept for ``aldebaran lanes status --full``).

Where channels opted in to the fast lane (``retractor``: a :class:`aldebaran.delivery.retraction.RetractionSink`,
None when no channel is fast), they had the alert: its retraction is produced to the fast topic, keyed by
its own id and acknowledged, before the record is written (the record is what marks the alert judged, so a
keeper that dies in between judges it again and produces a second copy, which the fast dispatcher takes
for a repeat), and a late confirmation produces a reinstatement before the record is deleted. The fast
dispatcher delivers both as ordinary runs; this reconciler skips them when it reads the fast topic. A
produce that fails is asked again at a later step; nothing is written meanwhile.

Messages of either topic that are not alerts (:mod:`aldebaran.delivery.decode`) are skipped and sent to
``alerts.dlq`` as rejected by ``reconciler:<lane>``, after the step that read them; a failed send is kept
and tried again at the next step.
"""

from __future__ import annotations

import json
import logging
import time

from aldebaran.delivery.decode import AlertDeadLetters, Rejected, decode
from aldebaran.delivery.retraction import is_own, reinstatement, retraction, retraction_id
from aldebaran.delivery.exceptions import RetryableError
from aldebaran.exceptions import NotFound
from aldebaran.lanes.judge import Reconciliation
from aldebaran.storage.store import safe_segment

log = logging.getLogger(__name__)
MISSED_LOG_SECONDS = 60.0  # how often the missed exact-lane alerts are summed up in the log

UNCONFIRMED, RESOLVED, RESOLVING = "unconfirmed", "resolved", "resolving"
INBOX_SECONDS = 5.0  # how often the running reconciler looks for resolutions (a small listing)


def record_prefix(records_prefix: str, lane: str, state: str = UNCONFIRMED) -> str:
    return f"{records_prefix.strip('/')}/{safe_segment(lane, 'lane name')}/{state}/"


def record_key(records_prefix: str, lane: str, alert_id: str, state: str = UNCONFIRMED) -> str:
    return f"{record_prefix(records_prefix, lane, state)}{safe_segment(alert_id, 'alert id')}.json"


def list_records(store, records_prefix: str, lane: str, state: str = UNCONFIRMED) -> list[dict]:
    out = []
    for item in store.list(record_prefix(records_prefix, lane, state)):
        try:
            out.append(json.loads(store.get(item["Key"]).body))
        except NotFound:
            continue  # confirmed (deleted) between the listing and the read
    return out


def resolve(store, records_prefix: str, lane: str, alert_id: str, reason: str, by: str) -> dict:
    """An operator settles an unconfirmed alert: its record moves to ``resolved/`` with the reason."""
    from aldebaran.exceptions import AldebaranError

    key = record_key(records_prefix, lane, alert_id)
    try:
        record = json.loads(store.get(key).body)
    except NotFound:
        raise AldebaranError(f"no unconfirmed record for alert {alert_id} on lane {lane} ({store.uri(key)})") from None
    record.update(resolved_at=time.time(), resolved_by=by, resolution=reason)
    store.put(record_key(records_prefix, lane, alert_id, RESOLVED), json.dumps(record).encode())
    # Before the delete: a crash in between leaves a marker for an open record, which the reconciler
    # ignores (it only drops ids whose record is gone), never an open count nobody will lower.
    store.put(record_key(records_prefix, lane, alert_id, RESOLVING), b"{}")
    store.delete(key)
    return record


class Reconciler:
    """One lane's reconciliation over Kafka, its records in `store`. Call :meth:`step` in a loop."""

    def __init__(self, kafka, store, lane: str, ttl_seconds: float, records_prefix: str,
                 resume_ms: int | None = None, retractor=None, dead_letters: AlertDeadLetters | None = None) -> None:
        self.kafka, self.store, self.lane, self.records_prefix = kafka, store, lane, records_prefix
        self.state = Reconciliation(int(ttl_seconds * 1000))
        self.fast_topic, self.exact_topic = kafka.fast_alerts_topic, kafka.alerts_topic
        self._eof: dict[tuple[str, int], bool] = {}
        self._consumer = None
        self._resume_ms = resume_ms
        # What an earlier keeper reported unconfirmed is still open: a late exact copy must clear it.
        for rec in list_records(store, records_prefix, lane):
            self.state.unconfirmed[rec["alert_id"]] = int(rec.get("fast_ts") or 0)
            self.state.counts.unconfirmed += 1
        self._fast_alerts: dict[str, dict] = {}  # pending fast alerts' JSON, for their record
        self.retractor = retractor  # None: no channel delivers the fast lane
        self._held: dict[str, dict] = {}  # records whose retraction is not acknowledged yet: asked again
        self._held_at = 0.0
        # Confirmed late, reinstatement not acknowledged yet: id → (when, the held record if it was never written).
        self._reinstating: dict[str, tuple[float, dict | None]] = {}
        self._reinstate_at = 0.0
        self.dead_letters = dead_letters or AlertDeadLetters(kafka)  # connects at the first rejected message
        self._rejected: list[Rejected] = []  # read, not yet acknowledged by alerts.dlq
        self.rejected = 0
        self.own = 0  # retractions and reinstatements read back from the fast topic (skipped)
        self._missed_since, self._missed_example, self._missed_logged_at = 0, None, time.monotonic()
        self.resolved = 0  # settled by an operator while this reconciler ran (the `resolving/` inbox)
        self._inbox_at = 0.0

    # --- Kafka ----------------------------------------------------------------------------------
    def open(self) -> None:
        from confluent_kafka import OFFSET_END, TopicPartition

        from aldebaran.kafka.io import consumer

        c = consumer(self.kafka, f"aldebaran-lane-{self.lane}-reconciler")
        start = self._resume_ms if self._resume_ms is not None else int(time.time() * 1000)
        wanted = []
        for topic, at in ((self.fast_topic, start), (self.exact_topic, start - self.state.ttl_ms)):
            meta = c.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None:
                raise NotFound(f"topic {topic} not found (the lane keeper creates the fast topic; the exact topic "
                               "is created by `aldebaran services up` or the auditor)")
            wanted += [TopicPartition(topic, p, max(at, 0)) for p in meta.partitions]
        found = c.offsets_for_times(wanted, timeout=10)
        # No record at or after the time: the partition's end (offset -1 from offsets_for_times).
        assignment = [TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
                      for tp in found]
        c.assign(assignment)
        self._eof = {(tp.topic, tp.partition): False for tp in assignment}
        self._consumer = c
        log.info("reconciler %s: reading %s from %s and %s from %s ms before (ttl %d ms)", self.lane,
                 self.fast_topic, start, self.exact_topic, self.state.ttl_ms, self.state.ttl_ms)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def step(self, timeout: float = 0.2, max_messages: int = 5000) -> int:
        """Read what is there (up to `max_messages`), then judge. Returns the number of alerts read."""
        from confluent_kafka import KafkaError

        if self._consumer is None:
            self.open()
        msgs = self._consumer.consume(num_messages=max_messages, timeout=timeout)
        read = 0
        for msg in msgs:
            where = (msg.topic(), msg.partition())
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    self._eof[where] = True
                    continue
                log.warning("reconciler %s: consumer error %s (retrying)", self.lane, msg.error())
                continue
            self._eof[where] = False
            read += 1
            self._on_alert(msg)
        now_ms = int(time.time() * 1000)
        self.state.caught_up(
            fast_at=now_ms if self._caught_up(self.fast_topic) else None,
            exact_at=now_ms if self._caught_up(self.exact_topic) else None)
        self._apply(self.state.judge())
        self._dead_letter()
        if time.monotonic() - self._inbox_at >= INBOX_SECONDS:
            self._inbox_at = time.monotonic()
            self.take_resolutions()
        return read

    def take_resolutions(self) -> int:
        """Drop the ids an operator resolved (``aldebaran lanes resolve``) from the open count. The inbox
        holds only resolutions not taken yet, so this listing stays small whatever the history."""
        taken = 0
        for item in self.store.list(record_prefix(self.records_prefix, self.lane, RESOLVING)):
            alert_id = item["Key"].rsplit("/", 1)[1][: -len(".json")]
            try:
                self.store.get(record_key(self.records_prefix, self.lane, alert_id))
                continue  # the resolve is half done (its delete is still to come): next time
            except NotFound:
                pass
            if self.state.unconfirmed.pop(alert_id, None) is not None:
                self.state.counts.unconfirmed -= 1
                self.resolved += 1
                taken += 1
            self._held.pop(alert_id, None)
            self._reinstating.pop(alert_id, None)
            self.store.delete(item["Key"])
        return taken

    def _caught_up(self, topic: str) -> bool:
        flags = [eof for (t, _), eof in self._eof.items() if t == topic]
        return bool(flags) and all(flags)

    def _on_alert(self, msg) -> None:
        alert = decode(msg)
        if isinstance(alert, Rejected):
            log.debug("reconciler %s: rejected alert at %s skipped: %s", self.lane, alert.where(), alert.reason)
            self._rejected.append(alert)
            self.rejected += 1
            return
        alert_id, kind = alert.alert_id, alert.kind
        ts = msg.timestamp()[1]
        if msg.topic() == self.fast_topic:
            if is_own(alert):  # a retraction or reinstatement this reconciler produced: not a fast alert
                self.own += 1
                return
            self.state.fast(alert_id, ts)
            if alert_id in self.state.pending_fast:
                self._fast_alerts[alert_id] = alert.to_dict()
        else:
            self._apply(self.state.exact(alert_id, kind, ts))
            self._fast_alerts.pop(alert_id, None)  # confirmed: no record will need it

    def _dead_letter(self) -> None:
        if not self._rejected:
            return
        try:
            self.dead_letters.send(self._rejected, f"reconciler:{self.lane}")
        except RetryableError as exc:  # Kafka is down: the keeper's loop goes on, the next step tries again
            log.warning("reconciler %s: %s; tried again at the next step", self.lane, exc)
            return
        self._rejected = []

    # --- records --------------------------------------------------------------------------------------
    def _apply(self, verdicts) -> None:
        bodies = []
        for alert_id in verdicts.unconfirmed:
            ts = self.state.unconfirmed[alert_id]
            bodies.append({
                "alert_id": alert_id, "lane": self.lane, "fast_ts": ts, "reported_at": time.time(),
                "ttl_seconds": self.state.ttl_ms / 1000, "alert": self._fast_alerts.pop(alert_id, None),
                "why": f"the exact lane raised no alert {alert_id} within {self.state.ttl_ms / 1000:.0f}s of "
                       f"the fast lane's (read {self.exact_topic} up to {self.state.exact_horizon} ms); "
                       + ("retracted on the channels that had it from the fast lane" if self.retractor
                          else "not delivered by the dispatchers")})
        if self._held and time.monotonic() - self._held_at >= 5.0:  # Kafka was down: not every step
            self._held_at = time.monotonic()
            bodies += [b for b in self._held.values() if b["alert_id"] not in verdicts.unconfirmed]
        if bodies:
            self._report(bodies)
        for alert_id in verdicts.confirmed_late:
            # A held record was never written, but its retraction may have gone out (a produce that failed
            # half-way): it is reinstated all the same (an unneeded reinstatement only says the alert stands).
            self._reinstating[alert_id] = (time.time(), self._held.pop(alert_id, None))
            log.warning("lane %s: alert %s confirmed late by the exact lane", self.lane, alert_id)
        if verdicts.confirmed_late or (self._reinstating and time.monotonic() - self._reinstate_at >= 5.0):
            self._reinstate_at = time.monotonic()
            self._reinstate()
        self._log_missed(verdicts.missed)

    def _log_missed(self, missed: list[str]) -> None:
        """One line a minute for the exact-lane alerts the fast lane did not raise, not one per alert: while the
        lane is behind or down that is every alert, thousands a second (each still at DEBUG; the count is in
        the status's ``counts.missed``)."""
        for alert_id in missed:
            log.debug("lane %s: exact-lane alert %s had no fast-lane copy (delivered as usual)", self.lane, alert_id)
        if missed:
            self._missed_since += len(missed)
            self._missed_example = self._missed_example or missed[0]
        if self._missed_since and time.monotonic() - self._missed_logged_at >= MISSED_LOG_SECONDS:
            log.info("lane %s: %d exact-lane alert(s) had no fast-lane copy in the last %.0f s (delivered as usual; "
                     "e.g. %s)", self.lane, self._missed_since, time.monotonic() - self._missed_logged_at,
                     self._missed_example)
            self._missed_since, self._missed_example, self._missed_logged_at = 0, None, time.monotonic()

    def _report(self, bodies: list[dict]) -> None:
        """Produce the retractions (where fast channels had the alerts), acknowledged, then write the
        unconfirmed records (module docstring). A failed produce writes nothing: held, asked again."""
        if self.retractor is not None:
            try:
                # A second copy (a keeper that died before its record) has the same id and key, so the same
                # partition: the fast dispatcher records it a repeat (S), not a second send, by its window of
                # recent ids, else the id's sent marker, which a fast channel keeps whatever it can do otherwise
                # (aldebaran.delivery.settle; with ALDEBARAN_DELIVERY_CROSS_LANE=log its partition's claim log, on
                # channels where a resend is harmless anyway). tests/integration/test_fast_delivery.py sends one.
                self.retractor.send([retraction(b) for b in bodies])
            except RetryableError as exc:
                log.warning("lane %s: %s; %d retraction(s) asked again later, their records not written yet",
                            self.lane, exc, len(bodies))
                for b in bodies:
                    self._held[b["alert_id"]] = b
                self._held_at = time.monotonic()
                return
        for body in bodies:
            alert_id = body["alert_id"]
            self._held.pop(alert_id, None)
            if self.retractor is not None:
                body["retraction"] = retraction_id(alert_id)
            self.store.put(record_key(self.records_prefix, self.lane, alert_id), json.dumps(body).encode())
            log.error("lane %s: alert %s unconfirmed: %s", self.lane, alert_id, body["why"])

    def _reinstate(self) -> None:
        """For each alert confirmed late: a reinstatement where its record says it was retracted (produced,
        acknowledged), then the record's delete. A failed produce keeps both for a later step."""
        messages, done = [], []
        for alert_id, (confirmed_at, held) in self._reinstating.items():
            body = held
            if body is None:
                try:
                    body = json.loads(self.store.get(record_key(self.records_prefix, self.lane, alert_id)).body)
                except NotFound:
                    done.append(alert_id)  # resolved by an operator meanwhile, or a delete already done
                    continue
                except ValueError:
                    body = {}  # unreadable: deleted below like any record of a confirmed alert
                body = body if isinstance(body, dict) else {}
            retracted = held is not None or body.get("retraction") or body.get("retractions")
            if self.retractor is not None and retracted and body.get("alert_id") == alert_id:
                messages.append(reinstatement(retraction(body), confirmed_at))
            done.append(alert_id)
        if messages:
            try:
                self.retractor.send(messages)
            except RetryableError as exc:
                log.warning("lane %s: %s; reinstatement(s) asked again later", self.lane, exc)
                return
        for alert_id in done:
            self._reinstating.pop(alert_id, None)
            self.store.delete(record_key(self.records_prefix, self.lane, alert_id))
            log.warning("lane %s: alert %s confirmed late: record removed", self.lane, alert_id)

    def status(self) -> dict:
        return {**self.state.status(), "fast_topic": self.fast_topic, "exact_topic": self.exact_topic,
                "rejected": self.rejected, "resolved": self.resolved, "own_skipped": self.own,
                "retractions_waiting": len(self._held) + len(self._reinstating)}
