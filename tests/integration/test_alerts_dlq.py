"""Poison on the alerts topic, against the real Kafka and MinIO: a streaming dispatcher (the log channel) meets
an array nested 5,000 deep (the stdlib's parser raised RecursionError on it and killed the dispatcher on that
offset for good) and a message that is not JSON before a valid alert. Both go to alerts.dlq with their reason,
the valid alert is delivered once, the channel's consumer group commits past all three, and the dispatcher
keeps running."""

from __future__ import annotations

import json
import threading
import time

from aldebaran.delivery.channels.log import LogChannel
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.kafka import admin as kadmin, io as kio
from tests.conftest import assert_eventually

DEEP = b"[" * 5000 + b"]" * 5000
NOT_JSON = b"\xffnot json at all"
GOOD = {"alert_id": "poison-test-1", "kind": "OVERFILL", "order_id": "o-1", "client": "Sendence", "stock": "AAPL",
        "requested": 100, "purchased": 120, "purchase_count": 2, "trigger_event_id": "p2",
        "trigger_event_ts": 1_700_000_000_000, "detected_at": 1_700_000_000_500}


def test_poison_alerts_are_dead_lettered_committed_past_and_the_dispatcher_lives_on(kafka_topics, store, s3_prefix,
                                                                                    unique, tmp_path):
    p = kio.producer(kafka_topics)
    for key, value in ((b"bad-1", DEEP), (b"bad-2", NOT_JSON), (GOOD["alert_id"].encode(), json.dumps(GOOD).encode())):
        p.produce(kafka_topics.alerts_topic, key=key, value=value, partition=0)  # in this order, on one partition
    assert p.flush(30) == 0

    log_path = tmp_path / "alerts.log.jsonl"
    group = f"g-{unique}"
    settings = DeliverySettings(prefix=f"{s3_prefix}/deliveries")
    dispatcher = Dispatcher(Ledger.from_settings(settings, store), [LogChannel("log", log_path)], kafka=kafka_topics,
                            group=group, settings=settings)
    stop, errors = threading.Event(), []

    def follow() -> None:  # what `aldebaran dispatch --follow` runs
        try:
            dispatcher.run(stop=stop, idle_timeout=None)
        except BaseException as exc:  # noqa: BLE001 - the assertion below names it
            errors.append(exc)

    thread = threading.Thread(target=follow, name="dispatcher-under-test")
    thread.start()
    try:
        def settled() -> bool:
            lag = kadmin.consumer_lag(kafka_topics, f"{group}-log", kafka_topics.alerts_topic)
            return lag["committed"] and lag["partitions"][0] == 0

        assert_eventually(settled, timeout=60, message="the log channel's group committed past the poison")
        time.sleep(1.0)  # a dispatcher that was going to die on the poison has had its turn
        assert thread.is_alive() and not errors, errors
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive() and not errors, errors

    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [line["idempotency_key"] for line in lines] == [GOOD["alert_id"]]  # delivered once
    assert lines[0]["alert"] == GOOD

    # By the offset they had on the alerts topic (the DLQ's own partitions and offsets are the partitioner's).
    letters = {int(dict(m.headers())["aldebaran.source.offset"]): m
               for m in kio.read_topic(kafka_topics, kafka_topics.alerts_dlq_topic)}
    assert sorted(letters) == [0, 1] and [letters[o].value() for o in (0, 1)] == [DEEP, NOT_JSON]
    headers = {o: dict(m.headers()) for o, m in letters.items()}
    assert headers[0]["aldebaran.reason_code"] == b"too_deep" and headers[1]["aldebaran.reason_code"] == b"not_json"
    for offset, h in headers.items():
        assert h["aldebaran.reason"] and h["aldebaran.consumer"] == b"dispatcher:log"
        assert (h["aldebaran.source.topic"], h["aldebaran.source.partition"], h["aldebaran.source.offset"]) == (
            kafka_topics.alerts_topic.encode(), b"0", str(offset).encode())
    assert [letters[o].key() for o in (0, 1)] == [b"bad-1", b"bad-2"]
