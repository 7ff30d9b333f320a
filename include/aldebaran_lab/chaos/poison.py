"""`aldebaran chaos poison`: hostile messages on the running platform's `alerts` and `trades`, then an
ordinary order, the way a user would meet them (BRIEF §2: every consumer treats any bytes as possible input).

It runs against the platform as ``make demo`` leaves it (Airflow supervising the auditor and the streaming
dispatchers), not against processes of its own:

1. an ordinary order first (request 100, purchases 60 + 60: one OVERFILL), timed from the trade to the
   ``alerts`` topic and to the ``log`` channel's file: the usual latency on this platform, now;
2. hostile messages: the alert decoder's hand-made cases and structure-aware ones on ``alerts``
   (aldebaran_lab.chaos.fuzz_topics), malformed trades on ``trades`` (aldebaran_lab.chaos.fuzz), each
   remembered by its partition and offset;
3. a second ordinary order, timed the same way.

Verdict: the second order reaches ``alerts`` and the ``log`` channel (within ``LATENCY_SLACK_S`` of the
first one's time, or ``LATENCY_FLOOR_S``); ``alerts.dlq`` holds every hostile alert, dead-lettered by every
running dispatcher with a reason; ``trades.dlq`` holds every hostile trade with a reason; the auditor and
every dispatcher that was running still run, under the same pid (no restart).
"""

from __future__ import annotations

import collections
import logging
import time
import uuid

from aldebaran_lab.chaos.common import CampaignResult

log = logging.getLogger(__name__)

LATENCY_FLOOR_S = 10.0  # an order after the poison may take this long whatever the first one took
LATENCY_SLACK_S = 5.0  # ... or the first order's time plus this


def run(alerts: int = 200, trades: int = 200, seed: int = 1, timeout_s: float = 180.0, mode: str = "full") -> CampaignResult:
    """`alerts` / `trades`: hostile messages per topic (the hand-made alert cases come on top)."""
    from aldebaran.runtime import heartbeat
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.platform import dispatch_supervisor
    from aldebaran.settings import KafkaSettings, load
    from aldebaran_lab.chaos import fuzz, fuzz_topics
    from aldebaran_lab.deployed_parts import Watcher, auditor_running
    from aldebaran_lab.demo_platform import Platform

    t0 = time.monotonic()
    result = CampaignResult("poison", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    platform = Platform.load()
    kafka = load(KafkaSettings)
    if not auditor_running(platform.query):
        return result.aborted(failures, RuntimeError(
            f"the auditor {platform.query!r} is not running: `make demo` first"), t0)
    dstore = dispatch_supervisor.delivery_store()
    now = time.time()
    running = sorted(hb["name"] for hb in heartbeat.read_all(dstore, heartbeat.DISPATCHER)
                     if hb.get("status") == "running" and now - (hb.get("at") or 0) < 120
                     and hb.get("name") and "-" not in hb["name"])  # "fast-lane" reads alerts.fast, not alerts
    if "log" not in running:
        return result.aborted(failures, RuntimeError(
            f"no running `log` dispatcher (running: {running or 'none'}): `make demo` first"), t0)
    log_path = configured_channels(["log"])[0].path
    watcher = Watcher(platform.query, running)
    watcher.sample()
    watcher.start()
    details: dict = {"query": platform.query, "dispatchers": running}
    try:
        dlq_from = {t: _ends(kafka, t) for t in (kafka.alerts_dlq_topic, kafka.dlq_topic)}
        details["before"] = before = _order(kafka, log_path, "before", timeout_s)
        if before["log_ms"] is None:
            failures.append(f"the first ordinary order did not reach the log channel in {timeout_s:.0f}s: "
                            "the platform was not delivering before the poison")
        hand = fuzz_topics.malformed_alerts()
        shaped, _ = fuzz_topics.hostile_alerts(alerts, seed)
        bad_trades, _ = fuzz.generate_trades(trades, seed + 1)
        sent = {"alerts": _produce(kafka, kafka.alerts_topic, hand + shaped),
                "trades": _produce(kafka, kafka.trades_topic, bad_trades)}
        details["hostile"] = {topic: {"sent": len(s["at"]), "refused_by_broker": s["refused"]}
                              for topic, s in sent.items()}
        result.faults = sum(len(s["at"]) for s in sent.values())
        details["after"] = after = _order(kafka, log_path, "after", timeout_s)
        limit = max(LATENCY_FLOOR_S * 1000, (before["log_ms"] or 0) + LATENCY_SLACK_S * 1000)
        if after["log_ms"] is None:
            failures.append(f"the ordinary order after the poison did not reach the log channel in {timeout_s:.0f}s")
            result.lost += 1
        elif after["log_ms"] > limit:
            failures.append(f"the ordinary order after the poison took {after['log_ms']:.0f} ms to the log channel "
                            f"(limit {limit:.0f} ms)")
        deadline = time.monotonic() + timeout_s
        while True:  # the dead letters: each dispatcher reaches the poison in its own time
            letters = {t: _letters(kafka, t, dlq_from[t]) for t in dlq_from}
            verdict = _dead_letters(sent, letters, running, kafka)
            if not verdict["missing"] or time.monotonic() > deadline:
                break
            time.sleep(2.0)
        details["dead_letters"] = verdict
        failures += [f"{topic}: {n} hostile message(s) without their dead letter"
                     for topic, n in verdict["missing"].items()]
        if verdict["without_reason"]:
            failures.append(f"{verdict['without_reason']} dead letter(s) without a reason")
        watcher.sample()
        details["restarts"] = restarts = watcher.restarts()
        if restarts:
            failures.append(f"restarted during the poison: {restarts}")
        if not auditor_running(platform.query):
            failures.append("the auditor is no longer running")
        stopped = [name for name in running
                   if (heartbeat.read(dstore, heartbeat.DISPATCHER, name) or {}).get("status") != "running"]
        if stopped:
            failures.append(f"dispatchers no longer running: {stopped}")
    finally:
        watcher.stop()
    result.details = {**details, "failures": failures}
    result.rows = _rows(details)
    return result.finish(t0)


def _produce(kafka, topic: str, values: list[bytes]) -> dict:
    """Produce `values` (unkeyed); {"at": [(partition, offset)], "refused": {reason: count}}: a message the
    broker refuses (over its size limit) never reaches a consumer, so it is reported, not expected."""
    from aldebaran.kafka import io as kio

    at, refused = [], collections.Counter()

    def on_delivery(err, msg) -> None:
        if err is not None:
            refused[str(err.name())] += 1
        else:
            at.append((msg.partition(), msg.offset()))

    p = kio.producer(kafka)
    for value in values:
        while True:
            try:
                p.produce(topic, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
            except Exception as exc:  # noqa: BLE001 - librdkafka refuses it locally (e.g. too large): reported
                refused[type(exc).__name__] += 1
                break
    p.flush(60)
    return {"at": at, "refused": dict(refused)}


def _order(kafka, log_path, label: str, timeout_s: float) -> dict:
    """One ordinary order (keyed by its id, as the producer contract says); its alert's times (ms from the
    tipping trade's Kafka timestamp) on `alerts` and in the log channel's file."""
    import json

    from aldebaran.kafka import io as kio
    from aldebaran_capacity.taps import LogTap, TopicTap

    order = f"poison-{label}-{uuid.uuid4().hex[:8]}"
    keep = lambda order_id: order_id == order  # noqa: E731
    taps = {"alerts": TopicTap(kafka, kafka.alerts_topic, keep), "log": LogTap(log_path, keep)}
    for tap in taps.values():
        tap.start()
    try:
        trades = [{"id": order, "#shares": 100, "client": "Sendence", "stock": "AAPL"},
                  {"id": f"{order}-p1", "initial_order_id": order, "#shares": 60, "client": "Sendence", "stock": "AAPL"},
                  {"id": f"{order}-p2", "initial_order_id": order, "#shares": 60, "client": "Sendence", "stock": "AAPL"}]
        kio.produce_all(kio.producer(kafka), kafka.trades_topic,
                             [(order.encode(), json.dumps(t).encode()) for t in trades])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not taps["log"].seen:
            time.sleep(0.2)
    finally:
        for tap in taps.values():
            tap.stop()

    def took(tap) -> float | None:
        seen = next(iter(tap.seen.values()), None)
        return None if seen is None or seen.trigger_ms is None else round(seen.at_ms - seen.trigger_ms, 1)

    return {"order_id": order, "alert_ms": took(taps["alerts"]), "log_ms": took(taps["log"])}


def _ends(kafka, topic: str) -> dict[int, int]:
    """The topic's high watermark per partition (where this campaign's dead letters will start)."""
    from confluent_kafka import TopicPartition

    from aldebaran.kafka import io as kio

    c = kio.consumer(kafka, f"aldebaran-poison-{uuid.uuid4().hex[:8]}")
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


def _letters(kafka, topic: str, start: dict[int, int]) -> list[dict]:
    """The dead letters written to `topic` since `start`: their headers (name → text)."""
    from confluent_kafka import KafkaError, TopicPartition

    from aldebaran.kafka import io as kio

    ends = _ends(kafka, topic)
    todo = {p for p, hi in ends.items() if hi > start.get(p, 0)}
    if not todo:
        return []
    c = kio.consumer(kafka, f"aldebaran-poison-{uuid.uuid4().hex[:8]}")
    out: list[dict] = []
    try:
        c.assign([TopicPartition(topic, p, start.get(p, 0)) for p in todo])
        deadline = time.monotonic() + 30
        while todo and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    todo.discard(m.partition())
                continue
            out.append({k: (v or b"").decode("utf-8", "replace") for k, v in (m.headers() or [])})
            if m.offset() + 1 >= ends[m.partition()]:
                todo.discard(m.partition())
    finally:
        c.close()
    return out


def _dead_letters(sent: dict, letters: dict, dispatchers: list[str], kafka) -> dict:
    """Each hostile message against its dead letters: an alert needs one from every running dispatcher, a
    trade one from the auditor. Pure but for its inputs (unit-tested)."""
    wanted = {kafka.alerts_topic: ("alerts", kafka.alerts_dlq_topic), kafka.trades_topic: ("trades", kafka.dlq_topic)}
    by_source: dict[tuple, set] = collections.defaultdict(set)
    without_reason = 0
    reasons: collections.Counter = collections.Counter()
    for records in letters.values():
        for h in records:
            try:
                where = (h.get("aldebaran.source.topic"), int(h.get("aldebaran.source.partition", "")),
                         int(h.get("aldebaran.source.offset", "")))
            except ValueError:
                continue
            by_source[where].add(h.get("aldebaran.consumer") or "auditor")
            if not h.get("aldebaran.reason"):
                without_reason += 1
            reasons[h.get("aldebaran.reason_code") or "?"] += 1
    missing: dict[str, int] = {}
    consumers: collections.Counter = collections.Counter()
    for source, (name, _dlq) in wanted.items():
        for partition, offset in sent[name]["at"]:
            who = by_source.get((source, partition, offset), set())
            consumers.update(who)
            if name == "alerts":
                ok = all(f"dispatcher:{d}" in who for d in dispatchers)
            else:
                ok = bool(who)
            missing[name] = missing.get(name, 0) + (not ok)
    return {"missing": {k: v for k, v in missing.items() if v}, "without_reason": without_reason,
            "by_consumer": dict(consumers), "reason_codes": dict(reasons.most_common(12))}


def _rows(details: dict) -> list[dict]:
    """The report's table (aldebaran_lab.chaos.common.markdown): one row per poisoned topic; "lost" counts
    hostile messages without their dead letters, "recovery" the ordinary order's trade → log time after the
    poison (before it in brackets)."""
    before, after = details.get("before") or {}, details.get("after") or {}
    took = f"order after: log {after.get('log_ms')} ms (before: {before.get('log_ms')} ms)"
    missing = (details.get("dead_letters") or {}).get("missing") or {}
    readers = {"alerts": len(details.get("dispatchers") or []), "trades": 1}
    rows = []
    for topic, h in (details.get("hostile") or {}).items():
        refused = f"; refused by the broker {h['refused_by_broker']}" if h["refused_by_broker"] else ""
        rows.append({"scenario": f"hostile messages on `{topic}`{refused}", "runs": readers[topic],
                     "faults": h["sent"], "lost": missing.get(topic, 0), "duplicated": 0, "resent_same_key": None,
                     "recovery": took})
    return rows
