"""Runs on every channel (delivery/settle.py): what a crash between a run's send and its record leaves,
per channel kind, and how repeats of an alert id are kept from a channel that cannot deduplicate.

The settle step runs on a local-directory ledger (the real LocalStore backend) and, for the log
channel, a real file. The channels that "crash" are failure-injection fakes, named so: they raise
SimulatedCrash (a stand-in for SIGKILL: nothing after it runs) part-way through a run's sends.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import ClassVar

import pytest

from aldebaran.delivery.channels.base import Channel, Outcome
from aldebaran.delivery.channels.log import LogChannel
from aldebaran.delivery.decode import AlertDeadLetters
from aldebaran.delivery.dispatcher import deliver_direct
from aldebaran.delivery.stats import DispatchStats
from aldebaran.delivery.handles import NEW
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import IN_DOUBT, RetryPolicy
from aldebaran.delivery.runs import CLAIMED, PENDING, RECORDED, Run
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.delivery.settle import Partition, RunSettler
from aldebaran.exceptions import ObjectStoreError
from aldebaran.model import Alert
from aldebaran.settings import KafkaSettings
from aldebaran.storage.store import LocalStore

TOPIC = "alerts"


class SimulatedCrash(BaseException):
    """Stands for a SIGKILL of the dispatcher: nothing after it runs."""


class CrashAfterSendsFake(Channel):
    """Failure injection: an SMS-like channel (no deduplication, no lookup); sends succeed until
    `crash_after` alerts went out, then the process 'dies'."""

    kind: ClassVar[str] = "fake"
    can_dedupe: ClassVar[bool] = False

    def __init__(self, crash_after: int = 10**9, concurrency: int = 16) -> None:
        super().__init__("fake_sms", concurrency=concurrency)
        self.crash_after = crash_after
        self.sent: list[str] = []

    def send_many(self, alerts):  # serial: the crash lands at an exact point
        out = []
        for a in alerts:
            if len(self.sent) >= self.crash_after:
                raise SimulatedCrash()
            self.sent.append(a.alert_id)
            out.append(Outcome.delivered(a.alert_id, {"sid": f"SM{len(self.sent)}"}))
        return out


class PartialWriteCrashFake(LogChannel):
    """Failure injection: the real log channel, which writes only the first `written` alerts of its
    first run to the file and then 'dies' before the dispatcher records anything."""

    def __init__(self, path, written: int) -> None:
        super().__init__("log", path)
        self.written = written

    def send_many(self, alerts):
        super().send_many(alerts[: self.written])
        raise SimulatedCrash()


def alert(i: int) -> Alert:
    raw = json.dumps({"alert_id": f"a-{i}", "kind": "OVERFILL", "order_id": str(i), "client": "c", "stock": "s",
                      "requested": 1, "purchased": 2, "purchase_count": 1, "trigger_event_id": f"e{i}",
                      "trigger_event_ts": 1, "detected_at": 1}).encode()
    return Alert.from_json(raw)


@pytest.fixture
def ledger(tmp_path):
    return Ledger(LocalStore(tmp_path / "ledger"), prefix="deliveries", lease_seconds=30, policy=RetryPolicy(3, 1, 1))


def settler(ledger, channel, owner: str, window: int = 200_000) -> RunSettler:
    settings = DeliverySettings(dedupe_window_offsets=window)
    return RunSettler(channel, ledger, settings, TOPIC, owner, DispatchStats(), AlertDeadLetters(KafkaSettings()))


def partition(epoch: int, ids) -> Partition:
    part = Partition(0, epoch)
    part.buffer = [(offset, None, alert(i), None) for offset, i in enumerate(ids)]
    return part


def runs(ledger, channel: str) -> list[Run]:
    return list(ledger.runs(channel, TOPIC, 0))


def log_lines(path) -> list[str]:
    return [json.loads(line)["idempotency_key"] for line in path.read_text().splitlines()]


# --- the aggregate ------------------------------------------------------------------------------
def test_a_run_settles_pending_entries_once_and_only_to_final_states():
    run = Run.claim("log", TOPIC, 0, [[5, "a", PENDING, None], [6, "b", PENDING, None]], 1, "w", 0.0)
    run.settle({5: ("D", {"offset": 10})})
    assert [e[0] for e in run.pending()] == [6]
    with pytest.raises(ValueError, match="cannot become"):
        run.settle({5: ("U", {"error": "x"})})  # already delivered
    with pytest.raises(ValueError, match="cannot become"):
        run.settle({6: (PENDING, None)})
    with pytest.raises(ValueError, match="have no outcome"):
        run.record(1.0)
    run.settle({6: ("U", {"error": "unknown"})})
    run.record(1.0)
    assert run.state == RECORDED and run.counts() == {"D": 1, "U": 1}


def test_an_unknown_outcome_on_a_channel_that_cannot_deduplicate_is_in_doubt(ledger):
    sms = CrashAfterSendsFake()
    handle = ledger.open_run(sms, TOPIC, 0, 1, "w", [(0, None, alert(0), None), (1, None, alert(1), None)], 16)
    assert handle.status == NEW and [e[2] for e in handle.run.entries] == [PENDING, PENDING]
    handle.report({0: Outcome.delivered("a-0", {"sid": "SM1"}), 1: Outcome.unknown("a-1", "read timeout")})
    stored, _ = ledger.get_run("fake_sms", TOPIC, 0, 0)
    assert [e[2] for e in stored.entries] == ["D", "U"]
    record, _ = ledger.get("fake_sms", "a-1")
    assert record.state == IN_DOUBT and record.run.endswith("00000000000000000000.json")
    assert record.alert == alert(1)  # the typed alert, back from the record
    assert ledger.indexed("in_doubt", "fake_sms") == ["a-1"]
    # The claim, the doubted alert's record with its index marker before and after it, the run's record.
    assert ledger.writes == 5


# --- a crash between send and record ------------------------------------------------------------
def test_no_lookup_a_crash_puts_exactly_the_claimed_runs_pending_alerts_in_doubt(ledger):
    crashing = CrashAfterSendsFake(crash_after=40, concurrency=16)
    with pytest.raises(SimulatedCrash):
        settler(ledger, crashing, "owner-1").settle(partition(1, range(100)), threading.Event())
    # Runs of 16: two recorded, the third (offsets 32..47) claimed with 8 of its alerts sent.
    assert [(r.start, r.state) for r in runs(ledger, "fake_sms")] == [(0, RECORDED), (16, RECORDED), (32, CLAIMED)]

    survivor = CrashAfterSendsFake(concurrency=16)
    s2 = settler(ledger, survivor, "owner-2")
    assert s2.settle(_from(partition(2, range(100)), 32), threading.Event()) == 100  # from the committed offset
    doubted = sorted(ledger.indexed("in_doubt", "fake_sms"), key=lambda a: int(a[2:]))
    assert doubted == [f"a-{i}" for i in range(32, 48)]  # exactly that run's pending alerts, sent or not
    assert survivor.sent == [f"a-{i}" for i in range(48, 100)]  # never a resend of the doubted ones
    assert s2.stats.in_doubt == {"fake_sms": 16} and s2.stats.sent == {"fake_sms": 52}
    assert all(r.state == RECORDED for r in runs(ledger, "fake_sms"))


def _from(part: Partition, offset: int) -> Partition:
    """The partition as a new owner polls it: from the committed offset on."""
    part.buffer = [b for b in part.buffer if b[0] >= offset]
    return part


def test_log_channel_a_crash_is_settled_by_its_lookup_nothing_twice_nothing_lost(ledger, tmp_path):
    path = tmp_path / "alerts.log.jsonl"
    with pytest.raises(SimulatedCrash):
        settler(ledger, PartialWriteCrashFake(path, written=700), "owner-1").settle(
            partition(1, range(3000)), threading.Event())
    assert [(r.start, r.end, r.state) for r in runs(ledger, "log")] == [(0, 2999, CLAIMED)]  # one run of 3000
    assert len(log_lines(path)) == 700

    s2 = settler(ledger, LogChannel("log", path), "owner-2")
    assert s2.settle(partition(2, range(3000)), threading.Event()) == 3000
    assert log_lines(path) == [f"a-{i}" for i in range(3000)]  # each once, in order, none lost
    (run,) = runs(ledger, "log")
    assert run.state == RECORDED and run.counts() == {"D": 3000} and run.owner == "owner-2"
    assert ledger.indexed("in_doubt", "log") == []
    assert s2.stats.sent == {"log": 2300} and s2.stats.already == {"log": 700}
    assert ledger.writes == 3  # the crashed owner's claim, the adoption, the record: never one per alert


def test_log_channel_one_fsync_per_run(ledger, tmp_path, monkeypatch):
    import aldebaran.delivery.channels.log as logmod

    path, fsyncs, real = tmp_path / "f.jsonl", [], logmod.os.fsync

    def counting_fsync(fd):  # os is one module: count only the log file's (the local ledger fsyncs too)
        if logmod.os.readlink(f"/proc/self/fd/{fd}") == str(path):
            fsyncs.append(fd)
        real(fd)

    monkeypatch.setattr(logmod.os, "fsync", counting_fsync)
    s = settler(ledger, LogChannel("log", path, max_run=500), "w")
    assert s.settle(partition(1, range(2000)), threading.Event()) == 2000
    assert len(fsyncs) == 4 and ledger.writes == 8  # 4 runs of 500: one fsync, one claim, one record each


# --- repeats of an alert id ------------------------------------------------------------------------
def test_repeats_within_the_window_are_not_sent_on_any_channel(ledger):
    fake = CrashAfterSendsFake(concurrency=4)
    s = settler(ledger, fake, "w")
    assert s.settle(partition(1, [1, 2, 3, 1, 4, 2, 5]), threading.Event()) == 7
    assert fake.sent == ["a-1", "a-2", "a-3", "a-4", "a-5"]
    assert s.stats.already == {"fake_sms": 2}


def test_a_repeat_beyond_the_window_is_never_sent_twice_without_deduplication(ledger, tmp_path):
    """Window 0: nothing is remembered in memory. The SMS-like channel's sent markers and the log
    channel's own sent-log still refuse an alert id that an earlier run sent (a replay, days later)."""
    fake = CrashAfterSendsFake(concurrency=4)
    assert settler(ledger, fake, "w", window=0).settle(partition(1, range(8)), threading.Event()) == 8
    later = partition(1, [3, 9, 5])
    later.buffer = [(100 + o, None, a, None) for o, _raw, a, _err in later.buffer]  # far later on the topic
    again = CrashAfterSendsFake(concurrency=4)
    assert settler(ledger, again, "w2", window=0).settle(later, threading.Event()) == 103
    assert again.sent == ["a-9"]
    (_, _, last) = runs(ledger, "fake_sms")
    assert [e[2] for e in last.entries] == ["S", "D", "S"]

    path = tmp_path / "log.jsonl"
    assert settler(ledger, LogChannel("log", path), "w", window=0).settle(partition(1, range(8)), threading.Event()) == 8
    later = partition(1, [3, 9, 5])
    later.buffer = [(100 + o, None, a, None) for o, _raw, a, _err in later.buffer]
    assert settler(ledger, LogChannel("log", path), "w2", window=0).settle(later, threading.Event()) == 103
    assert log_lines(path) == [f"a-{i}" for i in range(8)] + ["a-9"]


def test_stop_is_honoured_between_runs(ledger):
    fake = CrashAfterSendsFake(concurrency=4)
    stop = threading.Event()
    real_send_many = fake.send_many

    def send_then_stop(alerts):
        out = real_send_many(alerts)
        stop.set()
        return out

    fake.send_many = send_then_stop
    part = partition(1, range(100))
    assert settler(ledger, fake, "w").settle(part, stop) == 4  # the first run is recorded and commits
    assert len(fake.sent) == 4 and [r.state for r in runs(ledger, "fake_sms")] == [RECORDED]


class StoreDownOnceFake:
    """Failure injection: the ledger's store refuses the first sent marker (an outage), then works."""

    def __init__(self, store) -> None:
        self.store, self.failed = store, False

    def __getattr__(self, name):
        return getattr(self.store, name)

    def create(self, key, body):
        from aldebaran.exceptions import ObjectStoreError

        if "/sent/" in key and not self.failed:
            self.failed = True
            raise ObjectStoreError("injected: store unavailable")
        return self.store.create(key, body)


def test_an_outage_before_the_send_leaves_no_doubt(tmp_path):
    """The owner's own run, claimed but interrupted before any send (a marker write failed): taken up again
    as it is, not adopted as a crash (which would put its alerts IN_DOUBT on SMS)."""
    from aldebaran.exceptions import ObjectStoreError

    ledger = Ledger(StoreDownOnceFake(LocalStore(tmp_path / "ledger")), prefix="deliveries", lease_seconds=30)
    fake = CrashAfterSendsFake(concurrency=4)
    s = settler(ledger, fake, "w")
    part = partition(1, range(8))
    with pytest.raises(ObjectStoreError):
        s.settle(part, threading.Event())
    assert fake.sent == [] and part.unsent == {0}
    assert s.settle(part, threading.Event()) == 8
    assert fake.sent == [f"a-{i}" for i in range(8)] and ledger.indexed("in_doubt", "fake_sms") == []


# --- one alert through its own record: dispatcher → ledger → send → report ---------------------------------
class CountingStoreSpy:
    """The real LocalStore, with a count of the requests made to it."""

    def __init__(self, store) -> None:
        self.store, self.calls = store, []

    def __getattr__(self, name):
        attr = getattr(self.store, name)
        if name in ("get", "create", "replace", "put", "delete", "list"):
            def counted(*args, **kwargs):
                self.calls.append(name)
                return attr(*args, **kwargs)
            return counted
        return attr


def crossings_into_the_ledger(fn) -> list[str]:
    """The calls `fn` makes from delivery/dispatcher.py into the ledger (delivery/ledger.py and its reads,
    delivery/reads.py) or delivery/handles.py."""
    seen = []

    def profile(frame, event, _arg) -> None:
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if event == "call" and caller.endswith("delivery/dispatcher.py") and \
                frame.f_code.co_filename.endswith(("delivery/ledger.py", "delivery/reads.py", "delivery/handles.py")):
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_deliver_direct_crosses_into_the_ledger_twice_a_claim_and_a_report(tmp_path):
    spy = CountingStoreSpy(LocalStore(tmp_path / "ledger"))
    ledger = Ledger(spy, prefix="deliveries", lease_seconds=30)
    channel, stats, page = LogChannel("log", tmp_path / "pages.jsonl"), DispatchStats(), alert(7)
    results = []
    assert crossings_into_the_ledger(lambda: results.append(deliver_direct(ledger, channel, page, "w", stats))) \
        == ["attempt", "report"]
    # The claim (If-None-Match) and the outcome (If-Match); the retry marker a retried record may hold goes, and
    # the record is read once more in case another writer put it back in RETRY meanwhile (test_index_markers).
    assert results == ["sent"] and spy.calls == ["create", "replace", "delete", "get"] and ledger.writes == 2
    assert log_lines(tmp_path / "pages.jsonl") == ["a-7"]

    spy.calls.clear()
    assert crossings_into_the_ledger(lambda: results.append(deliver_direct(ledger, channel, page, "w2", stats))) \
        == ["attempt"]  # already delivered: one read after the refused create, nothing sent
    assert results[-1] == "already" and spy.calls == ["create", "get"] and stats.already == {"log": 1}
    assert log_lines(tmp_path / "pages.jsonl") == ["a-7"]


# --- a takeover's read of the dedupe window -------------------------------------------------------
def test_the_window_is_read_in_parallel_bounded_and_in_offset_order(ledger, tmp_path):
    log = LogChannel("log", tmp_path / "alerts.jsonl")
    for start in range(0, 40, 2):  # 20 runs of two alerts
        handle = ledger.open_run(log, TOPIC, 0, 1, "w", [(o, None, alert(o), None) for o in (start, start + 1)], 16)
        handle.report({o: Outcome.delivered(f"a-{o}", {}) for o in (start, start + 1)})
    one_by_one = [r.start for r in ledger.runs("log", TOPIC, 0, 10)]
    assert one_by_one == list(range(10, 40, 2))
    assert [r.start for r in ledger.runs("log", TOPIC, 0, 10, until=30, readers=8)] == list(range(10, 31, 2))
    assert [r.start for r in ledger.runs("log", TOPIC, 0, 0, until=-1, readers=8)] == []


def test_a_taken_over_partition_skips_what_the_window_recorded(ledger, tmp_path):
    path = tmp_path / "alerts.jsonl"
    first = settler(ledger, LogChannel("log", path), "owner-1")
    first.settle(partition(1, range(40)), threading.Event())
    sent = log_lines(path)
    # The new owner's consumer starts again from offset 20 (its commit was lost): nothing is sent twice.
    second = settler(ledger, LogChannel("log", path), "owner-2")
    part = Partition(0, 2)
    part.buffer = [(o, None, alert(o), None) for o in range(20, 40)]
    second.settle(part, threading.Event())
    assert log_lines(path) == sent and len(sent) == 40


class ReportFailsFake:
    """Failure injection: a run handle whose report (the run's one write) raises ObjectStoreError `failures`
    times, as an unreachable object store would, then lands."""

    def __init__(self, failures: int) -> None:
        self.failures, self.reports = failures, []
        self.run = Run.claim("log", TOPIC, 0, [[7, "a-7", PENDING, None]], 1, "w", 1.0)

    def report(self, outcomes) -> None:
        self.reports.append(outcomes)
        if len(self.reports) <= self.failures:
            raise ObjectStoreError("injected: object store unreachable")


def test_a_failed_record_is_retried_alone_doubling_to_10s_with_one_warning_each(ledger, tmp_path, caplog):
    s = settler(ledger, LogChannel("log", tmp_path / "alerts.jsonl"), "w")
    handle, stop, waits = ReportFailsFake(7), threading.Event(), []
    stop.wait = lambda seconds: waits.append(seconds)
    with caplog.at_level("WARNING", logger="aldebaran.delivery.settle"):
        s._report(handle, {7: "outcome"}, stop)
    assert handle.reports == [{7: "outcome"}] * 8  # the same outcomes each time: nothing is sent again
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 7
    assert lines[0] == ("log: recording run 0@7 failed (injected: object store unreachable); the sends stand, "
                        "retrying the record in 0.5s")


def test_a_failed_record_is_raised_once_the_dispatcher_stops(ledger, tmp_path):
    s = settler(ledger, LogChannel("log", tmp_path / "alerts.jsonl"), "w")
    handle, stop = ReportFailsFake(100), threading.Event()
    stop.wait = lambda seconds: stop.set()  # the stop arrives during the first back-off
    with pytest.raises(ObjectStoreError, match="injected"):
        s._report(handle, {}, stop)
    assert len(handle.reports) == 2  # the write is tried once more after the wait, then the error stands
