"""A corrupt stored object is quarantined with its key and reason, never fatal; the sweep cannot crash the
dispatcher in a loop (aldebaran.storage.quarantine, aldebaran.delivery.dispatcher).

The real dispatcher's sweep and the real ledger on a local-directory store (the LocalStore backend), with
corrupt objects planted in it: not JSON, a JSON list, a record with a wrong-typed field, odd index keys,
a corrupt partition owner. The store that fails is a failure-injection fake, named so.
"""

from __future__ import annotations

import json
import threading

import pytest

from aldebaran.storage import quarantine
from aldebaran.delivery.channels.log import LogChannel
from aldebaran.delivery.decode import AlertDeadLetters
from aldebaran.delivery.dispatcher import SWEEP_BACKOFF_MAX, ChannelDispatcher
from aldebaran.delivery.stats import DispatchStats
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import Record, RetryPolicy
from aldebaran.delivery.runs import Run
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.exceptions import LedgerCorrupt, NotFound, ObjectStoreError
from aldebaran.model import Alert
from aldebaran.settings import KafkaSettings, load
from aldebaran.storage.store import LocalStore

NOW = 1_000_000.0


def alert(i: int) -> Alert:
    return Alert.from_dict({"alert_id": f"{i:032x}", "kind": "OVERFILL", "order_id": str(i)})


@pytest.fixture
def ledger(tmp_path):
    return Ledger(LocalStore(tmp_path / "ledger"), policy=RetryPolicy(5, 1.0, 1.0), clock=lambda: NOW)


def dispatcher(tmp_path, ledger) -> ChannelDispatcher:
    kafka = load(KafkaSettings)
    return ChannelDispatcher(LogChannel("log", tmp_path / "alerts.jsonl"), ledger, load(DeliverySettings), kafka,
                             "g", "me", DispatchStats(), AlertDeadLetters(kafka))


def retry_record(ledger, i: int) -> Record:
    """A record in RETRY, due now, its index marker written (as a failed send leaves it)."""
    record = Record.claimed("log", alert(i), "w", NOW - 100, None)
    record.failed(NOW - 100, "HTTP 503", False, ledger.policy)
    ledger.create(record)
    return record


def plant(ledger, kind: str, alert_id: str, body: bytes) -> str:
    key = ledger.key("log", alert_id)
    ledger.store.put(key, body)
    ledger.store.put(ledger.index_key(kind, "log", alert_id), b"")
    return key


def whys(ledger) -> dict:
    return {w["key"]: w for w in quarantine.listed(ledger.store, ledger.quarantine_prefix())}


def test_the_sweep_quarantines_each_corrupt_object_and_delivers_the_rest(tmp_path, ledger):
    good = retry_record(ledger, 1)
    wrong_type = json.loads(retry_record(ledger, 5).to_bytes())
    wrong_type["attempt"] = "three"
    elsewhere = {**json.loads(retry_record(ledger, 7).to_bytes()), "alert_id": "../../escape"}
    bodies = {f"{2:032x}": (b"{not json", "Expecting property name"),
              f"{3:032x}": (b"[1, 2, 3]", "JSON list, not an object"),
              f"{5:032x}": (json.dumps(wrong_type).encode(), "field 'attempt' is str"),
              f"{6:032x}": (b"\xff\xfe binary", ""),
              f"{7:032x}": (json.dumps(elsewhere).encode(), "names log/'../../escape'")}
    corrupt = {plant(ledger, "in_doubt" if i == f"{6:032x}" else "retry", i, body): (body, reason)
               for i, (body, reason) in bodies.items()}
    odd = {f"{ledger.prefix}-index/retry/log/bad..id": (b"", "odd index key"),
           f"{ledger.prefix}-index/in_doubt/log/sub/dir": (b"", "odd index key")}
    for key in odd:
        ledger.store.put(key, b"")
    d = dispatcher(tmp_path, ledger)

    assert d.sweep() == 1  # the good record is delivered; no corrupt object stops the sweep
    assert [json.loads(line)["idempotency_key"] for line in (tmp_path / "alerts.jsonl").read_text().splitlines()] \
        == [good.alert_id]
    found = whys(ledger)
    assert set(found) == set(corrupt) | set(odd)
    for key, (body, reason) in {**corrupt, **odd}.items():
        why = found[key]
        assert reason in why["reason"] and why["reader"] == "me" and why["at"] > 0 and why["size"] == len(body)
        assert ledger.store.get(why["copy"]).body == body  # the copy is byte for byte
        with pytest.raises(NotFound):
            ledger.store.get(key)  # off the live path
    assert ledger.quarantined == {"log": len(corrupt) + len(odd)}

    assert d.sweep() == 0  # the next sweep (or the next process) meets none of them again
    assert ledger.indexed("retry", "log") == [] and ledger.indexed("in_doubt", "log") == []
    assert ledger.quarantined == {"log": len(corrupt) + len(odd)}


def test_the_records_and_runs_decoders_say_corrupt_for_any_bytes():
    for body in (b"[]", b"3", b"null", b'"x"', b"{", b'{"alert_id": 1}'):
        with pytest.raises(LedgerCorrupt) as exc:
            Record.from_bytes(body, "k1")
        assert exc.value.key == "k1" and exc.value.reason
        with pytest.raises(LedgerCorrupt) as exc:
            Run.from_bytes(body, "k2")
        assert exc.value.key == "k2"
    run = Run.claim("log", "alerts", 0, [[0, "a", "?", None]], 1, "w", NOW)
    bad = json.loads(run.to_bytes())
    bad["start"] = "0"
    with pytest.raises(LedgerCorrupt, match="'start' is str"):
        Run.from_bytes(json.dumps(bad).encode(), "k3")
    assert Run.from_bytes(run.to_bytes()).entries == run.entries


@pytest.mark.parametrize("body", [b"{not json", b"[1]", b'{"epoch": "seven"}', b'{"owner": "x"}', b'{"epoch": 0}'])
def test_a_corrupt_partition_owner_is_quarantined_and_the_partition_taken_with_a_higher_epoch(ledger, body):
    key = ledger.owner_key("log", "alerts", 3)
    ledger.store.put(key, body)
    epoch = ledger.take_partition("log", "alerts", 3, "me")
    assert epoch == int(NOW * 1000)  # above any epoch handed out one assignment at a time
    assert ledger.owner_epoch("log", "alerts", 3) == epoch
    assert ledger.take_partition("log", "alerts", 3, "next") == epoch + 1  # and it counts on from there
    why = whys(ledger)[key]
    assert "partition owner cannot be read" in why["reason"] and ledger.store.get(why["copy"]).body == body


class StoreDownFake:
    """Failure injection: the real LocalStore, unreachable while `down` is set (every call raises)."""

    def __init__(self, store) -> None:
        self.store, self.down = store, True

    def __getattr__(self, name):
        attr = getattr(self.store, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if self.down:
                raise ObjectStoreError("injected: object store unreachable")
            return attr(*args, **kwargs)
        return call


def test_a_failing_sweep_backs_off_capped_and_never_raises(tmp_path):
    store = StoreDownFake(LocalStore(tmp_path / "ledger"))
    d = dispatcher(tmp_path, Ledger(store, clock=lambda: NOW))
    waits = [d._sweep_once() for _ in range(10)]
    assert waits[:3] == [1.0, 2.0, 4.0] and max(waits) == SWEEP_BACKOFF_MAX == waits[-1]
    store.down = False
    assert d._sweep_once() == d.settings.sweep_seconds


def test_taking_a_partition_retries_while_the_store_is_down_and_gives_up_only_on_stop(tmp_path):
    store = StoreDownFake(LocalStore(tmp_path / "ledger"))
    d = dispatcher(tmp_path, Ledger(store, clock=lambda: NOW))
    stop = threading.Event()
    calls = []

    def take(*args):
        calls.append(args)
        if len(calls) == 3:
            store.down = False
        return d.ledger.take_partition(*args)

    d_wait = stop.wait
    stop.wait = lambda seconds: d_wait(0)  # no real backoff in a unit test
    assert d._retrying(stop, take, "log", "alerts", 0, "me") == 1 and len(calls) == 3
    store.down = True
    stop.set()
    assert d._retrying(stop, take, "log", "alerts", 0, "me") is None


def test_taking_a_partition_backs_off_doubling_to_the_cap_with_one_warning_per_retry(tmp_path, caplog):
    store = StoreDownFake(LocalStore(tmp_path / "ledger"))
    d = dispatcher(tmp_path, Ledger(store, clock=lambda: NOW))
    stop, waits = threading.Event(), []

    def wait(seconds):
        waits.append(seconds)
        store.down = len(waits) < 8
        return False

    stop.wait = wait
    with caplog.at_level("WARNING", logger="aldebaran.delivery.dispatcher"):
        assert d._retrying(stop, d.ledger.take_partition, "log", "alerts", 0, "me") == 1
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, SWEEP_BACKOFF_MAX, SWEEP_BACKOFF_MAX, SWEEP_BACKOFF_MAX]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 8 and lines[0] == "log: injected: object store unreachable; backing off 1s"
    assert lines[-1].endswith(f"backing off {SWEEP_BACKOFF_MAX:.0f}s")


def test_taking_a_partition_raises_what_is_not_a_store_outage(tmp_path):
    d = dispatcher(tmp_path, Ledger(LocalStore(tmp_path / "ledger"), clock=lambda: NOW))
    calls = []

    def broken(*args):
        calls.append(args)
        raise LedgerCorrupt("k", "injected")

    with pytest.raises(LedgerCorrupt):
        d._retrying(threading.Event(), broken, "x")
    assert len(calls) == 1


def test_the_cli_lists_the_quarantine(tmp_path, monkeypatch, capsys):
    from aldebaran.cli import main as cli

    ledger = Ledger(LocalStore(tmp_path / "ledger"))
    key = plant(ledger, "retry", f"{9:032x}", b"[]")
    dispatcher(tmp_path, ledger).sweep()
    monkeypatch.setenv("ALDEBARAN_DELIVERY_STORE", f"file://{tmp_path / 'ledger'}")
    assert cli.main(["deliveries", "quarantine"]) == 0
    out = capsys.readouterr().out
    assert key in out and "JSON list, not an object" in out and "reader=me" in out and "(1 in file://" in out
