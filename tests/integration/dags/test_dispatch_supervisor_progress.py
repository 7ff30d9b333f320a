"""A busy dispatcher is not a dead one, on real Kafka and MinIO: a streaming dispatcher (the real
Dispatcher and its heartbeat, in this process) on the `log` channel slowed by a failure injection, so
that one turn of its loop lasts several times the supervisor's stale limit while its deliveries still
settle one by one. The dispatch supervisor's own steps (observe the heartbeat in MinIO, diagnose,
decide) are asked again and again meanwhile: never a restart. A channel that hangs instead, with its
alerts read and unsettled, is a restart once the progress limit has passed."""

from __future__ import annotations

import json
import threading
import time

import pytest

from aldebaran.audit.findings import alert_id
from aldebaran.delivery.channels import configured_channels
from aldebaran.delivery.dispatcher import Dispatcher, default_ledger
from aldebaran.delivery.stats import DispatchStats
from aldebaran.delivery.service import Heartbeat
from aldebaran.runtime.heartbeat import DISPATCHER, key as heartbeat_key
from aldebaran.kafka import io as kio
from aldebaran.platform import dispatch_supervisor as ds
from aldebaran.platform import processes
from aldebaran.platform.settings import DispatchSupervisorSettings
from tests.conftest import assert_eventually

STALE, LIMIT = 3.0, 8.0
CFG = DispatchSupervisorSettings(stale_after_seconds=STALE, progress_limit_seconds=LIMIT)


class SlowChannelFaultInjection:
    """Failure injection: the real channel, but each send takes `seconds` per alert (a slow provider)."""

    def __init__(self, inner, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def send_many(self, alerts):
        time.sleep(self.seconds * len(alerts))
        return self.inner.send_many(alerts)


class HungChannelFaultInjection:
    """Failure injection: the real channel, but a send blocks until `release` is set (a hung provider)."""

    def __init__(self, inner, release: threading.Event) -> None:
        self.inner, self.release = inner, release

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def send_many(self, alerts):
        self.release.wait(120)
        return self.inner.send_many(alerts)


def _alert(order_id: str) -> dict:
    return {"alert_id": alert_id("OVERFILL", order_id), "kind": "OVERFILL", "order_id": order_id,
            "client": "Sendence", "stock": "AAPL", "requested": 100, "purchased": 120, "purchase_count": 2,
            "trigger_event_id": "3", "trigger_event_ts": 0, "detected_at": int(time.time() * 1000)}


@pytest.fixture
def env(kafka_topics, store, s3_prefix, tmp_path, monkeypatch, unique):
    log_file = tmp_path / "alerts.jsonl"
    for key, value in {
        "ALDEBARAN_CHANNELS": "log",
        "AIRFLOW_CONN_ALDEBARAN_LOG": json.dumps({"conn_type": "log", "extra": {"path": str(log_file)}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        "ALDEBARAN_DELIVERY_GROUP": f"progress-{unique}",
        "ALDEBARAN_DELIVERY_RUN_MAX": "1",  # one alert per send: progress between the sends of one turn
    }.items():
        monkeypatch.setenv(key, value)
    name = f"progress-{unique}"
    yield name, log_file
    store.delete(heartbeat_key(DISPATCHER, name))


def _run(name: str, wrap, alerts: list[dict], kafka_topics):
    """Produce `alerts`, then start a dispatcher on the wrapped log channel with its heartbeat thread."""
    kio.produce_all(kio.producer(kafka_topics), kafka_topics.alerts_topic,
                         [(a["alert_id"], json.dumps(a)) for a in alerts])
    ledger = default_ledger()
    channels = [wrap(c) for c in configured_channels(["log"])]
    dispatcher = Dispatcher(ledger, channels)
    stats, stop = DispatchStats(), threading.Event()
    heartbeat = Heartbeat(ledger.store, name, ["log"], dispatcher.owner, stats, 0.5, ledger)
    heartbeat.start()
    thread = threading.Thread(target=dispatcher.run, kwargs={"stop": stop, "heartbeat": heartbeat, "stats": stats},
                              daemon=True)
    thread.start()
    return heartbeat, stop, thread


def _decide(store, name: str) -> tuple[dict, dict]:
    facts = processes.observe(store, name, ["log"], {}, time.time(), ds.kind())
    problems = processes.diagnose(facts, CFG)
    return facts, processes.decide(facts, problems, {}, CFG)[0]


def _lines(log_file) -> int:
    return len(log_file.read_text().splitlines()) if log_file.exists() else 0


def test_a_slow_but_progressing_dispatcher_is_not_restarted(env, kafka_topics, store):
    name, log_file = env
    alerts = [_alert(f"slow-{i}") for i in range(8)]
    heartbeat, stop, thread = _run(name, lambda c: SlowChannelFaultInjection(c, 1.2), alerts, kafka_topics)
    try:
        assert_eventually(lambda: _lines(log_file) >= 1, timeout=60, message="the first slow delivery")
        longest_turn, progress_seen, decisions = 0.0, set(), []
        while _lines(log_file) < len(alerts):
            facts, decision = _decide(store, name)
            unit = facts["heartbeat"]["progress"]["log"]
            longest_turn = max(longest_turn, facts["now"] - float(unit["loop_at"]))
            progress_seen.add(unit["progress_at"])
            decisions.append((decision["action"], decision["reason"]))
            assert time.time() < facts["now"] + 60
            time.sleep(0.5)
        # The loop spent longer than the stale limit in one turn (the beat came from its thread), its
        # deliveries moved the whole time, and the supervisor never wanted a restart.
        assert longest_turn > STALE, longest_turn
        assert len(progress_seen) >= 3
        assert {a for a, _ in decisions} == {processes.NONE}, decisions
    finally:
        stop.set()
        thread.join(60)
        heartbeat.finish("stopped")
    assert sorted(json.loads(line)["alert"]["alert_id"] for line in log_file.read_text().splitlines()) == \
        sorted(a["alert_id"] for a in alerts)


def test_a_hung_dispatcher_with_work_pending_is_restarted_after_the_progress_limit(env, kafka_topics, store):
    name, log_file = env
    release = threading.Event()
    heartbeat, stop, thread = _run(name, lambda c: HungChannelFaultInjection(c, release), [_alert("hung-0")],
                                   kafka_topics)
    try:
        def pending() -> bool:
            return bool((_decide(store, name)[0]["heartbeat"]["progress"] or {}).get("log", {}).get("pending"))

        assert_eventually(pending, timeout=60, message="the alert is read and waits on the hung channel")
        facts, decision = _decide(store, name)
        assert decision["action"] == processes.NONE  # the beat is fresh, and the limit has not passed
        assert_eventually(lambda: _decide(store, name)[1]["action"] == processes.RESTART, timeout=LIMIT + 30,
                          interval=0.5, message="restart once the progress limit has passed")
        reason = _decide(store, name)[1]["reason"]
        assert "log: work pending and no progress for" in reason
        assert "ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS" in reason
        assert _lines(log_file) == 0
    finally:
        release.set()
        stop.set()
        thread.join(60)
        heartbeat.finish("stopped")
