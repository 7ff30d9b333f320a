"""A stalled streaming dispatcher is fenced by its successor (issue 37 item 7), against real Kafka and MinIO,
with real `aldebaran dispatch --follow` processes: the small, always-run form of the dispatch-failover
campaign's stall (tests/integration/test_chaos.py, marked `campaign`).

The stale owner freezes itself with SIGSTOP right after a send, before its record (the dispatch worker's
--stop-after-send injection): frozen at a random moment it would mostly hold no claimed run, and nothing
would be left to fence. Its successor joins the group, gets the partitions once the frozen member's session
expires, takes higher owner epochs and adopts the claimed run. Then SIGCONT: the stale owner's record write
(If-Match on the ETag it claimed with) must be refused. The recipient is the log channel: one line per
receipt, counted by key. It settles an adopted run by looking the file up instead of resending it, so every
key must appear exactly once; a webhook would get the adopted run again under the same keys, which counts
as a duplicate here.
"""

from __future__ import annotations

import json
import os
from collections import Counter

from aldebaran_lab.chaos.common import DispatcherProcess, delivery_env
from aldebaran_lab.chaos.dispatch_failover import owner_of
from tests.conftest import assert_eventually
from tests.integration.channel_crash import delivery_settings, ledger_for, runs
from tests.integration.test_dispatch_failures import make_alert, publish

ALERTS = 40


def test_a_stalled_dispatcher_is_fenced_by_its_successor_and_nothing_is_delivered_twice(
        kafka_topics, store, s3_prefix, tmp_path, unique):
    settings = delivery_settings(s3_prefix)
    ledger = ledger_for(store, settings)
    topic = kafka_topics.alerts_topic
    receipts = tmp_path / "alerts.log.jsonl"
    env = {**os.environ, "ALDEBARAN_CHANNELS": "log", "ALDEBARAN_LOG_CHANNEL_PATH": str(receipts),
           "ALDEBARAN_METRICS_ENABLED": "false",
           # a consumer session of 6 s, the broker's floor: the frozen member is expelled after that long
           **delivery_env(settings.prefix, settings.lease_seconds, ALDEBARAN_DELIVERY_GROUP=f"g-{unique}")}
    alerts = [make_alert(f"fence-{i}") for i in range(ALERTS)]
    publish(kafka_topics, alerts)
    stale = DispatcherProcess(f"t-{unique}-stale", env, tmp_path / "stale.log", ["log"], store)
    successor = DispatcherProcess(f"t-{unique}-successor", env, tmp_path / "successor.log", ["log"], store)
    try:
        stale.start(stop_after_send=True)
        assert_eventually(lambda: stale.frozen() or not stale.alive(), timeout=60, message="the stale owner froze")
        assert stale.frozen(), stale.tail()
        held = [r for r in runs(ledger, "log", topic) if r.state == "CLAIMED" and r.owner == owner_of(stale)]
        assert held, "frozen with no claimed run: nothing to fence"

        successor.start()
        heir = owner_of(successor)

        def adopted():
            now = {(r.partition, r.start): r for r in runs(ledger, "log", topic)}
            for r in held:
                got = now[(r.partition, r.start)]
                assert got.state == "RECORDED" and got.owner == heir and got.epoch > r.epoch, (got.owner, got.state)
                assert any(h["note"] == f"adopted from {r.owner} (epoch {r.epoch})" for h in got.history)
            return True

        assert_eventually(adopted, timeout=60, message="the successor adopted the frozen owner's runs")
        stale.resume()

        # (a) The stale owner's record write was refused: the conditional replace of the run it claimed
        # failed (PreconditionFailed → Fenced), and its partition stopped. Only a write under the old ETag
        # after the adoption produces this line; two dispatchers running one after the other never do.
        wanted = [f"log: partition {r.partition} stopped: {ledger.run_key('log', topic, r.partition, r.start)} "
                  f"changed under {r.owner} (epoch {r.epoch}): another owner took this run" for r in held]

        def refused():
            text = stale.log_path.read_text(errors="replace")
            missing = [w for w in wanted if w not in text]
            assert not missing, f"no refusal logged for {missing}: {stale.tail(10)}"

        assert_eventually(refused, timeout=30, message="the stale owner's record write was refused")
        assert_eventually(lambda: len(lines(receipts)) >= ALERTS, timeout=30, message="every alert delivered")
        assert stale.stop() == 0 and successor.stop() == 0
    finally:
        for d in (stale, successor):
            if d.alive():
                d.resume()
                d.kill()
            d.forget()

    # (b) Each alert received exactly once: one line (receipt) per alert id in the channel's file, none twice.
    got = Counter(lines(receipts))
    assert sorted(got) == sorted(a["alert_id"] for a in alerts)
    assert [k for k, n in got.items() if n > 1] == []
    every = runs(ledger, "log", topic)
    assert all(r.state == "RECORDED" for r in every)
    assert {e[1] for r in every for e in r.entries if e[2] == "D"} == set(got)


def lines(path) -> list[str]:
    """The idempotency keys of the log channel's file, one per line written."""
    if not path.exists():
        return []
    return [json.loads(line)["idempotency_key"] for line in path.read_text().splitlines() if line.strip()]
