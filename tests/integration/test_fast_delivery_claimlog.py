"""Fast delivery with the cross-lane claim log (``ALDEBARAN_DELIVERY_CROSS_LANE=log``, issue 38 item 1) on real
Kafka and MinIO: a fast delivery's exact copy is recognised through the partition's claim log (no sent marker
is written), a misaligned fast topic is refused by name, and with both lanes streaming the same alerts, killing
the fast dispatcher, the exact one or both mid-run loses nothing and delivers nothing twice: the log channel's
file holds each alert once, the webhook accepted each once. A same-key resend (the adopted run of a killed
dispatcher, which cannot know what its predecessor's last requests did) is counted and bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import warnings

import pytest

from aldebaran.cli import explain
from aldebaran.runtime import heartbeat, paths
from aldebaran.delivery import fast
from aldebaran.delivery.channels import configured_channels
from aldebaran.delivery.claimlog import LanesMisaligned
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.kafka import admin as kadmin
from aldebaran.kafka import io as kio
from tests.conftest import assert_eventually
from tests.integration.test_dispatch_failures import make_alert
from tests.integration.test_fast_delivery import fast_copy, fast_env, logged, produce, receiver  # noqa: F401


@pytest.fixture(autouse=True)
def log_mode(monkeypatch):
    """Before fast_env loads the settings (autouse fixtures come first); the dispatcher processes inherit it."""
    monkeypatch.setenv("ALDEBARAN_DELIVERY_CROSS_LANE", "log")


def test_the_exact_copy_of_a_fast_delivery_is_recognised_through_the_claim_log(fast_env, kafka_topics, receiver):
    ledger, settings, log_file = fast_env
    assert settings.cross_lane == "log"
    alerts = [make_alert(f"cl-{i}") for i in range(30)]
    produce(kafka_topics, kafka_topics.fast_alerts_topic, [fast_copy(a) for a in alerts])
    stats = fast.fast_dispatcher(ledger, kafka=kafka_topics, settings=settings).run_once(idle_timeout=3.0)
    assert stats.sent == {"hook": 30, "log": 30}

    produce(kafka_topics, kafka_topics.alerts_topic, alerts)
    stats = Dispatcher(ledger, configured_channels(), kafka=kafka_topics, settings=settings).run_once(idle_timeout=3.0)
    assert stats.sent == {} and stats.already == {"hook": 30, "log": 30}
    assert all(receiver.requests_per_key[a["alert_id"]] == 1 for a in alerts)
    assert sorted(logged(log_file)) == sorted(a["alert_id"] for a in alerts)
    # The exact runs name the fast run that holds each id; the ledger holds no sent marker.
    exact_runs = [r for p in (0, 1) for r in ledger.runs("hook", kafka_topics.alerts_topic, p)]
    receipts = [e[3] for r in exact_runs for e in r.entries]
    assert len(receipts) == 30 and all(f"/runs/{kafka_topics.fast_alerts_topic}/" in x["sent_by"] for x in receipts)
    assert not list(ledger.store.list(f"{ledger.prefix}/hook/sent/"))
    claim_logs = [o["Key"] for o in ledger.store.list(f"{ledger.prefix}/hook/claims/")]
    assert claim_logs and len(claim_logs) <= 2  # one per partition
    # explain finds the fast run through the claim logs (no marker to read).
    story = explain.explain(alerts[0]["alert_id"], ledger, ["hook", "log"], kafka=kafka_topics, locate_timeout=10)
    lanes = {v["channel"]: v for v in story.fast}
    assert {c: (v["lane"], v["state"], v["run"]["topic"]) for c, v in lanes.items()} == {
        c: ("fast", "DELIVERED", kafka_topics.fast_alerts_topic) for c in ("hook", "log")}


def test_a_fast_topic_partitioned_unlike_the_alerts_topic_is_refused(fast_env, kafka_topics, unique):
    ledger, settings, _ = fast_env
    odd = kafka_topics.model_copy(update={"fast_alerts_topic": f"t-{unique}-fast3"})
    kadmin.ensure_topics(odd, [odd.fast_alerts_topic], partitions=kadmin.partition_count(
        kafka_topics, kafka_topics.alerts_topic) + 1)
    try:
        with pytest.raises(LanesMisaligned, match="partitioned alike"):
            fast.fast_dispatcher(ledger, kafka=odd, settings=settings).run_once(idle_timeout=1.0)
    finally:
        kadmin.delete_topics(odd, [odd.fast_alerts_topic])


def start(args: list[str], name: str, log_path) -> subprocess.Popen:
    out = open(log_path, "ab")
    return subprocess.Popen([str(paths.venv_bin("aldebaran")), "dispatch", *args, "--follow", "--name", name],
                            env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.parametrize("victims", [("fast",), ("exact",), ("fast", "exact")])
def test_killing_a_lane_mid_run_loses_nothing_and_delivers_nothing_twice(
        fast_env, kafka_topics, receiver, tmp_path, unique, victims):
    ledger, settings, log_file = fast_env
    alerts = [make_alert(f"ck-{i}") for i in range(600)]
    every = {a["alert_id"] for a in alerts}
    lanes = {"fast": ["--fast"], "exact": []}
    names = {lane: f"{lane}-{unique}" for lane in lanes}
    procs = {lane: start(args, names[lane], tmp_path / f"{lane}-1.log") for lane, args in lanes.items()}

    producer = kio.producer(kafka_topics)  # one for the test: a producer per chunk spent ~25 s connecting

    def stream(batch: list[dict]) -> None:  # both lanes' copies, side by side: their claims race
        for i in range(0, len(batch), 20):
            produce(kafka_topics, kafka_topics.fast_alerts_topic, [fast_copy(a) for a in batch[i:i + 20]], producer)
            produce(kafka_topics, kafka_topics.alerts_topic, batch[i:i + 20], producer)
            time.sleep(0.1)

    try:
        for name in names.values():
            assert_eventually(lambda n=name: (heartbeat.read(ledger.store, heartbeat.DISPATCHER, n) or {}).get(
                "status") == "running", timeout=60, message=f"{name} is running")
        feeder = threading.Thread(target=stream, args=(alerts[:400],))
        feeder.start()
        assert_eventually(lambda: len(receiver.accepted) >= 60, timeout=60, interval=0.05, message="delivering")
        asked = receiver.requests
        receiver.delay_next(12, 1.0)  # a slow recipient: the victims die waiting for answers, runs claimed
        assert_eventually(lambda: receiver.requests > asked, timeout=30, interval=0.01, message="a send in flight")
        for lane in victims:
            os.killpg(procs[lane].pid, signal.SIGKILL)
            procs[lane].wait(10)
        feeder.join()
        stream(alerts[400:])
        for lane in victims:
            procs[lane] = start(lanes[lane], names[lane], tmp_path / f"{lane}-2.log")

        def all_delivered():
            assert set(receiver.accepted) == every, f"{len(set(receiver.accepted) & every)} of {len(every)}"
            assert sorted(logged(log_file)) == sorted(every)

        assert_eventually(all_delivered, timeout=120, interval=0.5, message="every alert at both recipients")
        assert_eventually(lambda: not [r for t in (kafka_topics.fast_alerts_topic, kafka_topics.alerts_topic)
                                       for p in (0, 1) for r in ledger.runs("hook", t, p) if r.state != "RECORDED"],
                          timeout=60, message="every run recorded")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        for name in names.values():
            ledger.store.delete(heartbeat.key(heartbeat.DISPATCHER, name))
        # A stop that overran its grace (the dispatcher's watchdog dumped its threads' stacks and exited) is
        # not what this test is about, but it is a bug: say where to read the stacks.
        for out in tmp_path.glob("*.log"):
            text = out.read_text(errors="replace")
            if "still stopping" in text or "Timeout (0:" in text:  # the watchdog's line, or its backstop's
                warnings.warn(f"a dispatcher overran its stop; its threads' stacks are in {out}", stacklevel=1)
    # 0 lost (above); 0 twice: the log file (its channel looks up what it sent) holds each alert once, and the
    # webhook accepted each once (201; a same-key resend is answered 409 and not taken again).
    assert len(logged(log_file)) == len(alerts)
    assert receiver.statuses[201] == len(every)
    # Same-key resends: only alerts of a killed dispatcher's runs (adopted by its successor, which cannot know
    # what its predecessor's last requests did); never one of a live race between the lanes.
    resent = {k for k, n in receiver.requests_per_key.items() if n > 1}
    adopted = {i for t in (kafka_topics.fast_alerts_topic, kafka_topics.alerts_topic) for p in (0, 1)
               for r in ledger.runs("hook", t, p) if any("adopted" in h["note"] for h in r.history)
               for i in r.alert_ids()}
    print(f"victims={victims}: {len(resent)} same-key resends at the webhook, {len(adopted)} alerts in adopted runs")
    assert resent <= adopted
