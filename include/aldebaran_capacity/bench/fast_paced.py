"""``bench dispatch --steady-rates R,...``: the fast dispatcher's own latency at paced rates, no lane (a breakdown
of trade → fast recipient, never a headline).

Alerts are produced to a fresh fast topic at each rate (alerts/s, paced, ``linger.ms`` 0), each stamped with
the wall clock as it is sent; a webhook with ``"fast": true`` and 100 alerts a POST is served by
``aldebaran dispatch --fast --follow`` (the bench's FastWebhook, aldebaran_capacity.bench.fast_delivery), and a
plain consumer of the topic (the tap) receives them too. Per rate: produced → tap (the bus), tap → recipient (the
dispatcher: fetch, its run's claim, the claim log, the POST, and the wait for the run before it) and produced →
recipient, p50/p99 ms; and the runs and POSTs the dispatcher made (alerts per run is what its group commit
buys at that rate). What the figures were, and where the dispatcher's time goes: docs/design.md, "The
low-latency lane".
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_SECONDS = 20.0
WARM_ALERTS = 20  # through the dispatcher before the clock starts: its consumer, the claim log's first read


def _pct(values: list[float], q: float) -> float | None:
    from aldebaran_capacity.bench.dispatch import percentile

    return round(percentile(values, q), 1) if values else None


class _Tap(threading.Thread):
    """A plain consumer of the topic: alert id → when it was received (epoch ms)."""

    def __init__(self, kafka, topic: str) -> None:
        super().__init__(daemon=True, name="fast-paced-tap")
        from aldebaran.kafka.io import consumer

        self.consumer = consumer(kafka, f"bench-fast-paced-tap-{uuid.uuid4().hex[:6]}",
                                 **{"auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        self.seen: dict[str, float] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            m = self.consumer.poll(0.1)
            if m is not None and not m.error() and m.key() is not None:
                self.seen[m.key().decode()] = time.time() * 1000

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)
        self.consumer.close()


def one_rate(rate: float, seconds: float = DEFAULT_SECONDS, out_dir: Path | None = None) -> dict:
    """One paced segment through a fresh fast topic, dispatcher and recipient."""
    from aldebaran.kafka import admin as kadmin
    from aldebaran.kafka.io import producer
    from aldebaran.runtime import paths
    from aldebaran.settings import KafkaSettings, load
    from aldebaran_capacity.bench.dispatch import make_alerts
    from aldebaran_capacity.bench.fast_delivery import FastWebhook

    kafka = load(KafkaSettings)
    tag = uuid.uuid4().hex[:6]
    topic = f"bench-fast-paced-{tag}"
    kadmin.ensure_topics(kafka, [topic])
    out_dir = out_dir or paths.run_dir() / "bench" / "dispatch"
    out_dir.mkdir(parents=True, exist_ok=True)
    hook = FastWebhook(kafka, topic, out_dir / f"fast-paced-{tag}.log", batch=100)
    p = producer(kafka, **{"linger.ms": 0})
    alerts = make_alerts(max(1, int(rate * seconds)), tag)
    sent: dict[str, float] = {}
    tap = _Tap(kafka, topic)
    tap.start()
    try:
        with hook:
            warm = make_alerts(WARM_ALERTS, f"w{tag}")
            for a in warm:
                p.produce(topic, key=a["alert_id"].encode(), value=json.dumps(a).encode())
            p.flush(10)
            hook.wait_for({a["alert_id"] for a in warm}, 60)
            requests0 = hook.receiver.stats(summary=True).get("requests", 0)
            t0 = time.monotonic()
            for i, a in enumerate(alerts):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                a["trigger_event_ts"] = now = int(time.time() * 1000)
                p.produce(topic, key=a["alert_id"].encode(), value=json.dumps(a).encode())
                p.poll(0)
                sent[a["alert_id"]] = now
            p.flush(10)
            got = hook.wait_for(set(sent), max(30.0, seconds))
            requests = hook.receiver.stats(summary=True).get("requests", 0) - requests0
    finally:
        tap.stop()
        kadmin.delete_topics(kafka, [topic])
    bus = [tap.seen[i] - sent[i] for i in got if i in tap.seen]
    dispatcher = [got[i] - tap.seen[i] for i in got if i in tap.seen]
    total = [got[i] - sent[i] for i in got]
    row = {"rate": rate, "seconds": seconds, "alerts": len(sent), "delivered": len(got),
           "produced_to_tap_p50_ms": _pct(bus, 50), "produced_to_tap_p99_ms": _pct(bus, 99),
           "tap_to_recipient_p50_ms": _pct(dispatcher, 50), "tap_to_recipient_p99_ms": _pct(dispatcher, 99),
           "produced_to_recipient_p50_ms": _pct(total, 50), "produced_to_recipient_p99_ms": _pct(total, 99),
           "posts": requests, "alerts_per_post": round(len(got) / requests, 1) if requests else None}
    log.info("dispatch fast paced %g alerts/s: tap → recipient p50/p99 %s/%s ms, produced → recipient %s/%s ms, "
             "%s alerts a POST", rate, row["tap_to_recipient_p50_ms"], row["tap_to_recipient_p99_ms"],
             row["produced_to_recipient_p50_ms"], row["produced_to_recipient_p99_ms"], row["alerts_per_post"])
    return row


def run(rates, seconds: float = DEFAULT_SECONDS, repeats: int = 1) -> list[dict]:
    """Each rate `repeats` times, interleaved; one row per rate: the median run by produced → recipient p99,
    every run's p99 in ``p99_runs_ms``."""
    by_rate: dict[float, list[dict]] = {r: [] for r in rates}
    for _ in range(repeats):
        for r in rates:
            by_rate[r].append(one_rate(r, seconds))
    return rows(by_rate)


def rows(by_rate: dict[float, list[dict]]) -> list[dict]:
    """One row per rate from its runs (pure)."""
    out = []
    for runs in by_rate.values():
        ordered = sorted(runs, key=lambda x: x["produced_to_recipient_p99_ms"] or float("inf"))
        out.append({**ordered[(len(ordered) - 1) // 2], "runs": len(runs),
                    "p99_runs_ms": [x["produced_to_recipient_p99_ms"] for x in runs]})
    return out


def add_to(dispatch: dict, steady_rates, repeats: int = 1) -> dict:
    """``bench dispatch`` / ``bench all``'s dispatch section: with `steady_rates` (alerts/s) and a fast design
    measured (``dispatch.fast``), its paced latency as ``dispatch.fast.paced``. Returns `dispatch`."""
    if steady_rates and dispatch.get("fast"):
        dispatch["fast"]["paced"] = run(tuple(steady_rates), repeats=repeats)
    return dispatch
