"""An SMS lookup outage: the provider's message log (``GET ?Reference=``) is down while a dispatcher holds
IN_DOUBT deliveries on that channel, against real Kafka, MinIO and the lab's Twilio-style provider.

The sweep asks the lookup, fails, and backs off with a cap for as long as the outage lasts; the dispatcher
never ends; sends on that channel (new alerts, and the sweep's retries) and on the other channel go on; when
the lookup is back each IN_DOUBT is settled by it once, and no alert is ever texted twice.

The old dispatcher retried a failing sweep 8 times (1, 2, 4, 8, 16 s, then its 30 s cap: about 2 minutes),
then raised, and the process ended; it also blocked the loop while it retried, so nothing else was sent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest

from aldebaran.delivery import dispatcher as dispatch
from aldebaran.delivery.dispatcher import Dispatcher
from aldebaran.delivery.records import DELIVERED, IN_DOUBT
from aldebaran.delivery.runs import CLAIMED
from aldebaran_capacity.receivers import SmsProvider
from aldebaran_capacity.receivers.base import json_response
from tests.conftest import assert_eventually
from tests.integration.channel_crash import HERE, delivery_settings, ledger_for, runs
from tests.integration.test_dispatch_failures import channel_env, make_alert, publish, secret, webhook  # noqa: F401

OLD_FATAL_TRIES = 8  # failed sweeps the old dispatcher survived; the 9th try's error ended it


class FaultyLookupSmsProvider(SmsProvider):
    """Failure injection: while `lookup_down` is set, the provider's message lookup answers 503 (its log is
    down); sending (POST) keeps working. `refused_at`: when each refused lookup came (monotonic)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookup_down = threading.Event()
        self.refused_at: list[float] = []

    def handle(self, request, body: bytes, now: float):
        if request.method == "GET" and self.lookup_down.is_set():
            with self.lock:
                self.refused_at.append(time.monotonic())
            return json_response(503, {"code": 20503, "message": "injected: message log unavailable", "status": 503})
        return super().handle(request, body, now)

    def refused(self) -> list[float]:
        with self.lock:
            return list(self.refused_at)


@pytest.fixture
def sms():  # the SMS provider channel_env configures (tests/integration/test_dispatch_failures.py)
    with FaultyLookupSmsProvider() as provider:
        yield provider


@dataclass(frozen=True)
class Outage:
    cap: float | None  # the sweep's backoff cap (None: the production value, dispatcher.SWEEP_BACKOFF_MAX)
    seconds: float  # the outage lasts at least this long
    min_refused: int  # and at least this many lookups are refused


COMPRESSED = Outage(cap=0.5, seconds=0.0, min_refused=5 * OLD_FATAL_TRIES)
FULL = Outage(cap=None, seconds=300.0, min_refused=OLD_FATAL_TRIES + 1)


def lookup_notes(record) -> int:
    return sum("provider's lookup" in (h.get("note") or "") for h in record.history)


@pytest.mark.parametrize("outage", [pytest.param(COMPRESSED, id="compressed"),
                                    pytest.param(FULL, id="5min", marks=pytest.mark.campaign)])
def test_an_sms_lookup_outage_backs_off_keeps_delivering_and_settles_each_doubt_once_after(
        outage, kafka_topics, store, s3_prefix, channel_env, sms, webhook, unique, monkeypatch):
    """What is compressed, and why the property survives it.

    `5min` (campaign, make chaos-short): the literal outage: the lookup down for 300 s at the production
    backoff cap (dispatcher.SWEEP_BACKOFF_MAX, 30 s): about 14 failed sweeps, past the old fatal 9th.

    `compressed` (make test): the cap is set to 0.5 s and the lookup stays down until 40 lookups (5 × the
    old 8 tries) have failed, ~30 s. Only the waits between tries shrink. The sweep's schedule depends on
    how many sweeps failed in a row (the backoff doubles per failure up to the cap), never on how long the
    outage has lasted, and the old fatal point was a count too (its 9th failing try: ~2 minutes only
    because its waits were 1, 2, 4, 8, 16, 30, 30, 30 s). So 40 capped cycles run the same code as 40
    cycles of 30 s, some 20 minutes of outage in production; the gaps between refused lookups show the
    cap held. What the count cannot show (anything that reads the clock: the provider's lag, Kafka's
    poll interval while the loop runs on) the literal variant covers.
    """
    if outage.cap is not None:
        monkeypatch.setattr(dispatch, "SWEEP_BACKOFF_MAX", outage.cap)
    cap = dispatch.SWEEP_BACKOFF_MAX
    settings = delivery_settings(s3_prefix)
    ledger = ledger_for(store, settings)
    group, topic = f"g-{unique}", kafka_topics.alerts_topic
    before = [make_alert(f"before-{i}") for i in range(6)]
    publish(kafka_topics, before)

    # 1. IN_DOUBT on a channel that cannot deduplicate: a dispatcher SIGKILLed between send and record
    #    (fault_dispatch.py), its claimed runs adopted by the next one.
    channel_env("sms", lookup=True)
    proc = subprocess.run([sys.executable, str(HERE / "fault_dispatch.py"), settings.prefix, group, "3"],
                          env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    pending = sorted({e[1] for r in runs(ledger, "sms", topic) if r.state == CLAIMED for e in r.entries
                      if e[2] == "?"})
    assert pending, "the killed dispatcher left no claimed run"

    # 2. The lookup goes down; a streaming dispatcher (SMS and webhook) starts and adopts the runs.
    sms.lookup_down.set()
    stop, errors = threading.Event(), []

    def streaming() -> None:
        try:
            Dispatcher(ledger, channel_env("sms", "webhook", lookup=True), kafka=kafka_topics, group=group,
                       settings=settings).run(stop=stop)
        except BaseException as exc:  # noqa: BLE001 - the test's point is that there is none
            errors.append(exc)

    thread = threading.Thread(target=streaming, name="dispatcher-under-lookup-outage", daemon=True)
    t0 = time.monotonic()
    thread.start()
    try:
        try:
            assert_eventually(lambda: sorted(ledger.indexed("in_doubt", "sms")) == pending, timeout=45,
                              message="the adopted runs' alerts IN_DOUBT")
            assert_eventually(lambda: sms.refused(), timeout=30, message="the sweep asking the lookup")

            # 3. During the outage: new alerts go out on both channels, and one SMS refused with a 503 (a clear
            #    non-send: RETRY) is sent again by the sweep, whose lookups keep failing.
            first_sent = {a["alert_id"] for a in before} - set(pending)  # the runs the killed one had not claimed
            assert_eventually(lambda: first_sent <= set(sms.sends_by_reference), timeout=30,
                              message="the unclaimed alerts sent")
            during = [make_alert(f"during-{i}") for i in range(6)]
            sms.fail_next(1, 503)  # the next POST: one of `during`
            publish(kafka_topics, during)
            sent_ids = {a["alert_id"] for a in during}
            assert_eventually(lambda: sent_ids <= set(sms.sends_by_reference), timeout=45,
                              message="SMS sends during the lookup outage")
            assert_eventually(lambda: {a["alert_id"] for a in before + during} <= set(webhook.accepted), timeout=30,
                              message="webhook deliveries during the lookup outage")
            retried = [r for r in map(lambda a: ledger.get("sms", a["alert_id"]), during) if r and r[0].attempt > 1]
            assert len(retried) == 1 and retried[0][0].state == DELIVERED  # the sweep's retry, lookups failing
            assert sms.lookup_down.is_set() and sorted(ledger.indexed("in_doubt", "sms")) == pending

            # 4. The outage goes on, well past the old fatal point; the dispatcher stays up.
            assert_eventually(lambda: len(sms.refused()) >= outage.min_refused
                              and time.monotonic() - t0 >= outage.seconds,
                              timeout=max(60.0, outage.seconds + 4 * cap + 30), interval=0.5,
                              message=f"{outage.min_refused} refused lookups")
            assert thread.is_alive() and not errors, errors
            refused = sms.refused()
            gaps = [b - a for a, b in zip(refused, refused[1:])]
            # Capped: once at the cap, a lookup again every cap (+ one loop turn); never a busy loop either.
            # The lower bounds are loose: a gap is measured at the provider, after the sweep's own ledger reads, so
            # a late lookup shortens the gap after it (0.23 s against a 0.5 s cap once, three test workers on two
            # cores); a busy loop would be milliseconds apart, and most gaps are near the cap.
            assert max(gaps) <= cap + 2.0 and min(gaps) >= 0.2 * min(1.0, cap), gaps
            assert sorted(gaps)[len(gaps) // 2] >= 0.5 * min(1.0, cap), gaps
            for alert_id in pending:  # still IN_DOUBT: never resent, never settled without the provider's word
                record, _ = ledger.get("sms", alert_id)
                assert record.state == IN_DOUBT and sms.sends_by_reference[alert_id] <= 1
            outage_seconds = time.monotonic() - t0
        finally:
            sms.lookup_down.clear()

        # 5. The lookup is back: each doubt settled by it, once; nothing texted twice.
        assert_eventually(lambda: ledger.indexed("in_doubt", "sms") == [], timeout=cap + 30,
                          message="the doubts settled after the outage")
        assert_eventually(lambda: all(ledger.get("sms", i)[0].state == DELIVERED for i in pending),
                          timeout=cap + 30, message="the settled doubts delivered")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive() and not errors, errors
    for alert_id in pending:
        record, _ = ledger.get("sms", alert_id)
        assert lookup_notes(record) == 1, record.history  # settled by the lookup once
        (message,) = sms.by_reference(alert_id)  # one text: the crashed run's, or the first send after "no such"
        if "it has the message" in record.history[-1]["note"]:
            assert record.receipt["sid"] == message.sid
    every = {a["alert_id"] for a in before + during}
    assert set(sms.sends_by_reference) == every and set(sms.sends_by_reference.values()) == {1}
    assert set(webhook.accepted) == every and set(webhook.requests_per_key.values()) == {1}
    print(f"lookup outage: {outage_seconds:.1f}s, {len(refused)} lookups refused, cap {cap}s, "
          f"gaps {min(gaps):.2f}..{max(gaps):.2f}s, {len(pending)} doubts settled once")
