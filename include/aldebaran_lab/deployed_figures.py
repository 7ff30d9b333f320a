"""The deployed-path bench's figures from what its taps saw (pure: no I/O), so they are unit-tested.

A segment's JSON (``deployed.segments[]`` in docs/img/bench-results.json; these keys are stable):
``rate``, ``achieved_eps``, ``alert_p50_ms``, ``alert_p99_ms``, ``channels.<name>.{expected, delivered,
p50_ms, p99_ms}``, ``restarts``, ``stages_ms``; and beside them ``orders``, ``alerts``, ``alert_max_ms``,
``box`` (aldebaran_capacity.bench.boxstate), ``batches`` (the auditor's, from its heartbeat),
``cpu_us_per_event`` (per role: its CPU over the load window ÷ the events produced then, in CPU-µs per event;
the cores a rate needs are rate × the sum ÷ 10⁶) and ``timeline`` (per second of trade time: the alert's and
each channel's p99, for the plot).
"""

from __future__ import annotations

from aldebaran_capacity.taps import percentile


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _lat(values: list[float]) -> dict:
    return {"p50_ms": _r(percentile(values, 50)), "p99_ms": _r(percentile(values, 99)),
            "max_ms": _r(max(values) if values else None)}


def _median(values: list) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return _r(percentile(values, 50))


def figures(rate: int, sent: dict, t0_ms: float, taps: dict, webhook: dict[str, float], keep_ids: set[str],
            watcher=None, box: dict | None = None) -> dict:
    """One segment: `taps` = {"alerts": TopicTap, "log": LogTap, "bus": TopicTap} (their ``seen``);
    `webhook` = {alert id: received at, epoch ms}; `keep_ids` = the segment's alert ids (those seen
    on the alerts topic). Expected per channel: one alert per order sent."""
    alerts = taps["alerts"].seen
    ids = set(keep_ids) | {a for t in taps.values() for a in t.seen}
    trigger = {a: s.trigger_ms for t in taps.values() for a, s in t.seen.items() if s.trigger_ms is not None}
    alert_lat = [s.at_ms - s.trigger_ms for s in alerts.values() if s.trigger_ms is not None]
    received = {"log": {a: s.at_ms for a, s in taps["log"].seen.items()},
                "webhook": {a: at for a, at in webhook.items() if a in ids},
                "bus": {a: s.at_ms for a, s in taps["bus"].seen.items()}}
    channels = {}
    for name, got in received.items():
        lat = [at - trigger[a] for a, at in got.items() if a in trigger]
        after_topic = [at - alerts[a].at_ms for a, at in got.items() if a in alerts]
        channels[name] = {"expected": sent["orders"], "delivered": len(got), **_lat(lat),
                          "after_alert_p99_ms": _r(percentile(after_topic, 99))}
    seen = list(alerts.values())
    stages = {
        # trade produced → the book step that raised the alert (Kafka append, the wait for the next
        # batch, the batch's read and parse, the step): the auditor's share
        "trade_to_detected": _median([s.detected_ms - s.trigger_ms for s in seen
                                      if s.detected_ms is not None and s.trigger_ms is not None]),
        # the book step → the alert produced to `alerts` (the rest of the batch: other shards, the
        # archive PUT beside the produce)
        "detected_to_produced": _median([s.produced_ms - s.detected_ms for s in seen
                                         if s.produced_ms is not None and s.detected_ms is not None]),
        "produced_to_seen": _median([s.at_ms - s.produced_ms for s in seen if s.produced_ms is not None]),
    }
    for name, got in received.items():
        # on `alerts` → at the recipient: the dispatcher's poll, claim, send and the receipt
        stages[f"alert_to_{name}"] = _median([at - alerts[a].at_ms for a, at in got.items() if a in alerts])
    batches = dict(watcher.batches) if watcher is not None else {}
    if batches:
        stages["batch_p50"] = _median([b.get("batch_ms") for b in batches.values()])
        stages["batch_trigger_p50"] = _median([b.get("trigger_ms") for b in batches.values()])
        # a shard task's input (Kafka read, JVM → Python) and its host round trip, the slowest shard's
        stages["batch_task_input_p50"] = _median([b.get("task_input_ms") for b in batches.values()])
        stages["batch_task_host_p50"] = _median([b.get("task_host_ms") for b in batches.values()])
        for step in sorted({k for b in batches.values() for k in (b.get("steps_ms") or {})}):
            stages[f"batch_{step}_p50"] = _median([(b.get("steps_ms") or {}).get(step) for b in batches.values()])
        # Spark's own phases of a trigger (walCommit: the offsets log, commitOffsets: the commit log, both in
        # the s3a checkpoint; addBatch: foreachBatch)
        for phase in sorted({k for b in batches.values() for k in (b.get("spark_ms") or {})} - {"triggerExecution"}):
            stages[f"spark_{phase}_p50"] = _median([(b.get("spark_ms") or {}).get(phase) for b in batches.values()])
    events = sent.get("events", 0)
    eps = events / sent["seconds"] if sent.get("seconds") else None
    return {
        "rate": rate,
        "achieved_eps": round(events / sent["seconds"]) if sent.get("seconds") else None,
        "orders": sent["orders"],
        "alerts": len(alerts),
        "alert_p50_ms": _r(percentile(alert_lat, 50)),
        "alert_p99_ms": _r(percentile(alert_lat, 99)),
        "alert_max_ms": _r(max(alert_lat) if alert_lat else None),
        "channels": channels,
        "restarts": watcher.restarts() if watcher is not None else {},
        "stages_ms": stages,
        "batches": len(batches),
        "misrouted": sum(b.get("misrouted") or 0 for b in batches.values()),
        "box": box or {},
        "cpu_us_per_event": cpu_per_event((box or {}).get("cores_by_role") or {}, eps),
        "timeline": timeline(t0_ms, trigger, {"alert": {a: s.at_ms for a, s in alerts.items()}, **received}),
    }


def cpu_per_event(cores_by_role: dict[str, float], eps: float | None) -> dict[str, float]:
    """CPU-µs per event of each platform role over a load window: its mean cores ÷ the events per second
    produced then (the bench itself and other processes left out). Empty without a rate."""
    from aldebaran_capacity.bench.boxstate import NOT_PLATFORM

    if not eps:
        return {}
    return {role: round(cores * 1e6 / eps, 1) for role, cores in sorted(cores_by_role.items(), key=lambda x: -x[1])
            if role not in NOT_PLATFORM and cores >= 0.005}


def timeline(t0_ms: float, trigger: dict[str, float], arrivals: dict[str, dict[str, float]]) -> dict:
    """Per whole second of trade time since `t0_ms`: the p99 latency of each stream's arrivals then, so
    a growing backlog shows as a rising line. {stream: [[second, p99_ms], ...]}."""
    out = {}
    for name, got in arrivals.items():
        buckets: dict[int, list[float]] = {}
        for a, at in got.items():
            t = trigger.get(a)
            if t is not None:
                buckets.setdefault(int((t - t0_ms) // 1000), []).append(at - t)
        out[name] = [[s, _r(percentile(v, 99))] for s, v in sorted(buckets.items())]
    return out


def tap_figures(tap, expected: int) -> dict:
    """One topic's alerts as a tap saw them (the fast lane's, the hand-rolled loop's): latency from the
    trade's timestamp, and how many of the `expected` arrived."""
    lat = [s.at_ms - s.trigger_ms for s in tap.seen.values() if s.trigger_ms is not None]
    return {"expected": expected, "delivered": len(tap.seen), **_lat(lat)}
