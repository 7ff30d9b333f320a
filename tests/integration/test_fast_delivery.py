"""Fast delivery on real Kafka and MinIO (issue 26, item 4): a channel with ``fast: true`` is delivered from the
fast lane's topic, and the exact lane's copy of the same alert is recognised by the ledger (its sent marker)
and not sent again; an alert the exact lane never confirms is retracted on that channel, once (the reconciler
produces the retraction to the fast topic, the fast dispatcher delivers it), and explain shows it; a fast dispatcher SIGKILLed mid-stream and started again loses nothing and sends nothing twice.
The alerts on both topics are produced by the test (the lanes themselves run in test_realtime_lane.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from aldebaran.cli import explain
from aldebaran.cli.story import render_text
from aldebaran.runtime import heartbeat, paths
from aldebaran.delivery import fast
from aldebaran.delivery.channels import configured_channels
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.retraction import reinstatement_id, retraction, retraction_id
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.kafka import io as kio
from aldebaran.lanes import reconciler
from aldebaran.settings import load
from aldebaran_capacity.receivers import WebhookReceiver
from tests.conftest import assert_eventually
from tests.integration.test_dispatch_failures import make_alert


def produce(kafka, topic: str, alerts: list[dict], producer=None) -> None:
    """`producer`: one the caller reuses across chunks (a new one per call costs ~0.4 s of connecting)."""
    kio.produce_all(producer or kio.producer(kafka), topic, [(a["alert_id"], json.dumps(a)) for a in alerts])


def fast_copy(alert: dict) -> dict:
    return {**alert, "lane": "realtime"}  # the fast lane's copy: same id, its lane named


@pytest.fixture
def receiver():
    with WebhookReceiver("fast-secret") as hook:
        yield hook


@pytest.fixture
def fast_env(kafka_topics, s3_prefix, receiver, monkeypatch, unique, tmp_path):
    """Two channels: `hook` (webhook, fast) and `log` (its file, fast); the ledger under the test's prefix."""
    log_file = tmp_path / "fast.log.jsonl"
    env = {
        "ALDEBARAN_CHANNELS": "hook,log",
        "AIRFLOW_CONN_ALDEBARAN_HOOK": json.dumps({"conn_type": "http", "host": receiver.url, "password": "fast-secret",
                                                   "extra": {"endpoint": "/alerts", "timeout": 3, "fast": True}}),
        "AIRFLOW_CONN_ALDEBARAN_LOG": json.dumps({"conn_type": "log", "extra": {"path": str(log_file), "fast": True}}),
        "ALDEBARAN_DELIVERY_PREFIX": f"{s3_prefix}/deliveries",
        # The sent markers' path, unless a module sets the mode first (test_fast_delivery_claimlog: the claim log).
        "ALDEBARAN_DELIVERY_CROSS_LANE": os.environ.get("ALDEBARAN_DELIVERY_CROSS_LANE", "markers"),
        "ALDEBARAN_DELIVERY_GROUP": f"d-{unique}",
        "ALDEBARAN_DELIVERY_SWEEP_SECONDS": "0.5",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load(DeliverySettings)
    return Ledger.from_settings(settings), settings, log_file


def logged(log_file) -> list[str]:
    if not log_file.exists():
        return []
    return [json.loads(line)["alert"]["alert_id"] for line in log_file.read_text().splitlines()]


def test_a_fast_alert_is_delivered_from_the_fast_topic_and_its_exact_copy_is_recognised(
        fast_env, kafka_topics, receiver):
    ledger, settings, log_file = fast_env
    alert = make_alert("fd-1")
    produce(kafka_topics, kafka_topics.fast_alerts_topic, [fast_copy(alert)])

    stats = fast.fast_dispatcher(ledger, kafka=kafka_topics, settings=settings).run_once(idle_timeout=3.0)
    assert stats.sent == {"hook": 1, "log": 1}
    assert list(receiver.accepted) == [alert["alert_id"]] and logged(log_file) == [alert["alert_id"]]
    assert receiver.accepted[alert["alert_id"]].alert["lane"] == "realtime"  # the fast copy reached it

    # The exact lane raises the same alert: the ledger knows it was delivered; nothing is sent.
    produce(kafka_topics, kafka_topics.alerts_topic, [alert])
    stats = Dispatcher(ledger, configured_channels(), kafka=kafka_topics, settings=settings).run_once(idle_timeout=3.0)
    assert stats.sent == {} and stats.already == {"hook": 1, "log": 1}
    assert receiver.requests_per_key[alert["alert_id"]] == 1 and logged(log_file) == [alert["alert_id"]]

    story = explain.explain(alert["alert_id"], ledger, ["hook", "log"], kafka=kafka_topics, locate_timeout=10)
    exact = {d["channel"]: d for d in story.deliveries}
    assert exact["hook"]["state"] == "REPEAT" and "/runs/" + kafka_topics.fast_alerts_topic + "/" in \
        exact["hook"]["receipt"]["sent_by"]
    lanes = {v["channel"]: v for v in story.fast}
    assert {c: (v["lane"], v["state"], v["run"]["topic"]) for c, v in lanes.items()} == {
        c: ("fast", "DELIVERED", kafka_topics.fast_alerts_topic) for c in ("hook", "log")}
    assert "hook: delivered by the fast lane's run" in render_text(story)


def test_an_unconfirmed_fast_alert_is_retracted_once_by_the_fast_dispatcher_and_explain_shows_it(
        fast_env, kafka_topics, receiver, s3_prefix, unique):
    """The reconciler produces the retraction to the fast topic (keyed retract-<id>), the fast dispatcher
    delivers it as an ordinary run, once, however many copies the topic holds; a late confirmation's
    reinstatement too; the reconciler skips both when it reads the fast topic back."""
    ledger, settings, log_file = fast_env
    lonely, confirmed_late = make_alert("fr-1"), make_alert("fr-2")
    produce(kafka_topics, kafka_topics.fast_alerts_topic, [fast_copy(lonely), fast_copy(confirmed_late)])
    fast.fast_dispatcher(ledger, kafka=kafka_topics, settings=settings).run_once(idle_timeout=3.0)
    assert sorted(receiver.accepted) == sorted([lonely["alert_id"], confirmed_late["alert_id"]])

    sink = fast.lane_retractor(kafka_topics)  # hook and log are fast: a sink, not None
    lane, lanes_prefix = f"lane-{unique}", f"{s3_prefix}/lanes"
    rec = reconciler.Reconciler(kafka_topics, ledger.store, lane, 2.0, lanes_prefix,
                                resume_ms=int(time.time() * 1000) - 60_000, retractor=sink)
    retracted = {retraction_id(a["alert_id"]) for a in (lonely, confirmed_late)}
    try:
        def judged():
            rec.step(timeout=0.5)
            assert rec.status()["counts"]["unconfirmed"] == 2

        assert_eventually(judged, timeout=30, interval=0.2, message="both fast alerts unconfirmed")
        records = reconciler.list_records(ledger.store, lanes_prefix, lane)
        assert {r["alert_id"]: r["retraction"] for r in records} == {
            a["alert_id"]: retraction_id(a["alert_id"]) for a in (lonely, confirmed_late)}
        assert not retracted & set(receiver.accepted)  # the reconciler sends nothing itself
        on_topic = {m.key().decode(): json.loads(m.value()) for m in
                    kio.read_topic(kafka_topics, kafka_topics.fast_alerts_topic)}
        assert retracted <= set(on_topic) and all(on_topic[k]["alert_id"] == k for k in retracted)

        # A keeper that died after the produce and before its record judges again and produces again.
        sink.send([retraction(records[0])])
        stats = fast.fast_dispatcher(ledger, kafka=kafka_topics, settings=settings).run_once(idle_timeout=3.0)
        assert stats.sent == {"hook": 2, "log": 2}
        # A copy beyond the dispatcher's window of recent ids meets the sent marker a fast channel keeps.
        sink.send([retraction(records[1])])
        narrow = settings.model_copy(update={"dedupe_window_offsets": 0})
        stats = fast.fast_dispatcher(ledger, kafka=kafka_topics, settings=narrow).run_once(idle_timeout=3.0)
        assert stats.sent == {} and stats.already == {"hook": 1, "log": 1}
        for alert in (lonely, confirmed_late):
            key = retraction_id(alert["alert_id"])
            assert receiver.requests_per_key[key] == 1
            body = receiver.accepted[key].alert
            assert (body["kind"], body["retracts"], body["order_id"]) == ("RETRACTION", alert["alert_id"],
                                                                          alert["order_id"])
            assert "exact lane raised no alert" in body["reason"]
        assert sorted(logged(log_file)) == sorted([lonely["alert_id"], confirmed_late["alert_id"], *retracted])

        # fr-2 is confirmed late by the exact lane: a reinstatement through the fast topic, its copy a repeat.
        produce(kafka_topics, kafka_topics.alerts_topic, [confirmed_late])

        def reinstated():
            rec.step(timeout=0.5)
            assert rec.status()["counts"]["confirmed_late"] == 1

        assert_eventually(reinstated, timeout=30, interval=0.2, message="fr-2 confirmed late")
        assert [r["alert_id"] for r in reconciler.list_records(ledger.store, lanes_prefix, lane)] == [lonely["alert_id"]]
        again = reinstatement_id(confirmed_late["alert_id"])
        stats = fast.fast_dispatcher(ledger, kafka=kafka_topics, settings=settings).run_once(idle_timeout=3.0)
        assert stats.sent == {"hook": 1, "log": 1}
        assert receiver.requests_per_key[again] == 1
        assert receiver.accepted[again].alert["reinstates"] == confirmed_late["alert_id"]
        stats = Dispatcher(ledger, configured_channels(), kafka=kafka_topics, settings=settings).run_once(
            idle_timeout=3.0)
        assert stats.sent == {} and receiver.requests_per_key[confirmed_late["alert_id"]] == 1

        # Read back from the fast topic, its own messages are not fast alerts to judge.
        for _ in range(5):
            rec.step(timeout=0.3)
        status = rec.status()
        assert status["own_skipped"] >= 4 and status["counts"]["fast"] == 2 and status["counts"]["unconfirmed"] == 1
    finally:
        rec.close()
        sink.close()

    story = explain.explain(lonely["alert_id"], ledger, ["hook", "log"], kafka=kafka_topics, locate_timeout=5)
    assert any("the exact lane never raised this alert" in n for n in story.notes)
    views = {v["channel"]: v for v in story.fast}
    assert views["hook"]["lane"] == "fast" and views["hook"]["retraction"]["state"] == "DELIVERED"
    assert "/runs/" + kafka_topics.fast_alerts_topic + "/" in views["hook"]["retraction"]["sent_by"]
    assert f"hook: retraction retract-{lonely['alert_id']} DELIVERED" in explain.render_text(story)
    late = {v["channel"]: v for v in explain.explain(confirmed_late["alert_id"], ledger, ["hook", "log"],
                                                      kafka=kafka_topics, locate_timeout=5).fast}
    assert late["log"]["reinstatement"]["state"] == "DELIVERED"


def start_fast_dispatcher(name: str, log_path) -> subprocess.Popen:
    out = open(log_path, "ab")
    return subprocess.Popen([str(paths.venv_bin("aldebaran")), "dispatch", "--fast", "--follow", "--name", name],
                            env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def test_the_fast_dispatcher_killed_mid_run_loses_nothing_and_sends_nothing_twice(
        fast_env, kafka_topics, receiver, tmp_path, unique):
    ledger, settings, log_file = fast_env
    alerts = [make_alert(f"fk-{i}") for i in range(600)]
    every = {a["alert_id"] for a in alerts}
    name = f"fast-{unique}"
    exact_stop = threading.Event()
    exact = Dispatcher(ledger, configured_channels(), kafka=kafka_topics, settings=settings)
    exact_thread = threading.Thread(target=exact.run, kwargs={"stop": exact_stop}, name="exact-lane-dispatcher")
    proc = start_fast_dispatcher(name, tmp_path / "fast-1.log")

    producer = kio.producer(kafka_topics)

    def stream(batch: list[dict]) -> None:  # the fast copies, then the exact lane's copies
        for i in range(0, len(batch), 20):
            produce(kafka_topics, kafka_topics.fast_alerts_topic, [fast_copy(a) for a in batch[i:i + 20]], producer)
            time.sleep(0.1)
        produce(kafka_topics, kafka_topics.alerts_topic, batch, producer)

    try:
        assert_eventually(lambda: (heartbeat.read(ledger.store, heartbeat.DISPATCHER, name) or {}).get("status") == "running",
                          timeout=60, message="the fast dispatcher is running")
        feeder = threading.Thread(target=stream, args=(alerts[:400],))
        feeder.start()
        assert_eventually(lambda: len(receiver.accepted) >= 60, timeout=60, interval=0.05,
                          message="the fast dispatcher delivers")
        # Mid-run: the receiver holds the next requests (a slow recipient), the dispatcher waits for its
        # answers with its run claimed and marked, and dies there.
        asked = receiver.requests
        receiver.delay_next(40, 1.0)
        assert_eventually(lambda: receiver.requests > asked, timeout=30, interval=0.01, message="a send in flight")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        feeder.join()
        exact_thread.start()  # the exact copies meet the dead dispatcher's markers
        stream(alerts[400:])
        proc = start_fast_dispatcher(name, tmp_path / "fast-2.log")

        def all_delivered():
            assert set(receiver.accepted) == every, f"{len(set(receiver.accepted) & every)} of {len(every)}"
            assert sorted(logged(log_file)) == sorted(every)

        assert_eventually(all_delivered, timeout=90, interval=0.5, message="every alert at both recipients")
        assert_eventually(lambda: not [r for p in (0, 1) for r in ledger.runs("hook", kafka_topics.fast_alerts_topic, p)
                                       if r.state != "RECORDED"], timeout=30, message="every fast run recorded")
    finally:
        exact_stop.set()
        if exact_thread.is_alive():
            exact_thread.join(30)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        ledger.store.delete(heartbeat.key(heartbeat.DISPATCHER, name))
    fast_runs = [r for p in (0, 1) for r in ledger.runs("hook", kafka_topics.fast_alerts_topic, p)]
    assert any("adopted" in h["note"] for r in fast_runs for h in r.history)  # the killed run, taken over
    # 0 lost (above), 0 twice: the log file holds each alert once; the webhook recipient accepted each once
    # (a resend of the killed run, with the same Idempotency-Key, is answered 409 and not taken again).
    assert len(logged(log_file)) == len(alerts)
    assert receiver.statuses[201] == len(every)
