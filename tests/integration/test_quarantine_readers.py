"""Every reader of the delivery ledger goes on past a corrupt object, on the real MinIO (issue 37 item 2).

One corrupt object of each kind is planted in a ledger under this test's prefix: a per-alert record, a
run, an odd index key, a partition owner (and a retraction's record). The readers that only look (the
Deliveries page's data and its FastAPI app, `aldebaran deliveries list|runs|show|stats`, explain's fast view,
health) skip it and name it with its reason, moving nothing; the dispatcher quarantines what it meets
(a record, an index key, an owner: moved aside; a run: marked, left in place, its partition stopped while
the others deliver), and the page and health count the quarantine.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from aldebaran.storage import quarantine
from aldebaran.delivery import pages
from aldebaran.delivery.channels.base import Outcome
from aldebaran.delivery.channels.log import LogChannel
from aldebaran.delivery.corrupt import quarantined
from aldebaran.delivery.decode import AlertDeadLetters
from aldebaran.delivery.dispatcher import ChannelDispatcher
from aldebaran.delivery.stats import DispatchStats
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import RetryPolicy
from aldebaran.delivery.retraction import retraction_id
from aldebaran.delivery.runs import Run
from aldebaran.delivery.settings import DeliverySettings
from aldebaran.delivery.settle import Partition
from aldebaran.delivery.tools import find
from aldebaran.exceptions import NotFound
from aldebaran.model import Alert
from aldebaran.platform.health_checks import check_quarantine
from aldebaran.settings import KafkaSettings, load
from tests.conftest import assert_eventually
from tests.unit.plugins.test_plugin_unit import FakeUser, plugin  # noqa: F401  (fixture: the plugin module)

CHANNEL = "webhook"


def alert(unique: str, name: str) -> Alert:
    return Alert.from_dict({"alert_id": f"{unique}-{name}", "kind": "OVERFILL", "order_id": name, "client": "Sendence",
                            "stock": "AAPL", "requested": 100, "purchased": 120})


class Planted:
    """A ledger on MinIO with good records and one corrupt object of each kind, keys by kind."""

    def __init__(self, store, prefix: str, unique: str, topic: str) -> None:
        self.ledger = Ledger(store, prefix=prefix, policy=RetryPolicy(5, 0.01, 0.01))
        self.unique, self.topic = unique, topic
        ch = LogChannel(CHANNEL)
        for name, outcome in (("later", Outcome.retry), ("gone", Outcome.permanent)):
            self.ledger.attempt(ch, alert(unique, name), "w1").report(outcome(f"{unique}-{name}", "HTTP 503"))
        ledger = self.ledger
        self.record = ledger.key(CHANNEL, f"{unique}-bad")
        store.put(self.record, b"{not json")
        store.put(ledger.index_key("retry", CHANNEL, f"{unique}-bad"), b"")
        self.odd = f"{prefix}-index/retry/{CHANNEL}/bad..id"
        store.put(self.odd, b"")
        self.run = ledger.run_key(CHANNEL, topic, 0, 0)
        ill = json.loads(Run.claim(CHANNEL, topic, 0, [[0, "a", "?", None]], 1, "w", time.time()).to_bytes())
        store.put(self.run, json.dumps({**ill, "start": "zero"}).encode())  # ill-shaped: its start not a number
        self.owner = ledger.owner_key(CHANNEL, topic, 1)
        store.put(self.owner, b'{"epoch": "seven"}')
        self.retraction = ledger.key(CHANNEL, retraction_id(f"{unique}-fast"))
        store.put(self.retraction, b"[]")


@pytest.fixture
def planted(store, s3_prefix, unique):
    return Planted(store, f"{s3_prefix}/deliveries", unique, load(KafkaSettings).alerts_topic)


def keys(corrupt: list[dict]) -> dict[str, str]:
    return {c["key"]: c["reason"] for c in corrupt}


def still_there(store, *keys_: str) -> None:
    for key in keys_:
        store.get(key)  # NotFound if a reader that only looks had moved it


def test_readers_that_only_look_skip_each_corrupt_object_and_name_it(planted, store, capsys, unique):
    from aldebaran.cli.main import main

    p, ledger = planted, planted.ledger
    [webhook] = pages.overview(ledger, 20, fast_topic="no-fast-topic")
    found = keys(webhook["corrupt"])
    assert "Expecting property name" in found[p.record]
    assert "odd index key" in found[p.odd]
    assert "JSON list, not an object" in found[p.retraction]
    assert [r.alert_id for r in webhook["latest"]] and f"{unique}-later" in {r.alert_id for r in webhook["latest"]}
    html = pages.render_overview(ledger, [webhook], ledger.prefix, 20, "tester", quarantined(ledger), 0)
    assert p.record in html and "Corrupt, skipped: 3" in html and 'id=quarantine-count>0<' in html

    view = find(ledger, CHANNEL, f"{unique}-x", (0, 0))  # the run covering offset 0 cannot be read
    assert view["state"] == "CORRUPT" and "field 'start' is str" in keys(view["corrupt"])[p.run]
    assert find(ledger, CHANNEL, f"{unique}-bad", None)["state"] == "CORRUPT"

    assert main(["deliveries", "list", "--prefix", ledger.prefix]) == 0
    out = capsys.readouterr().out
    assert f"{unique}-later" in out and f"CORRUPT, skipped: {p.record}" in out
    assert main(["deliveries", "runs", "--prefix", ledger.prefix, "--channel", CHANNEL, "--partition", "0"]) == 0
    assert f"CORRUPT, skipped: {p.run}" in capsys.readouterr().out

    # explain's fast-lane view reads the retraction's record: a corrupt one is skipped, neither raised nor moved.
    from aldebaran.delivery.fast import fast_view

    assert fast_view(ledger, CHANNEL, f"{unique}-fast", "no-fast-topic") is None
    still_there(store, p.record, p.odd, p.run, p.owner, p.retraction)
    assert quarantined(ledger)["count"] == 0


def test_the_plugin_app_shows_corrupt_objects_and_answers_409_for_one(plugin, planted, store, unique):
    from fastapi.testclient import TestClient

    app = plugin.create_app()
    app.dependency_overrides[plugin.ledger_backend] = lambda: store
    app.dependency_overrides[plugin.authorization()] = FakeUser
    client = TestClient(app, follow_redirects=False)
    prefix = planted.ledger.prefix

    page = client.get("/deliveries/", params={"ledger": prefix})
    assert page.status_code == 200, page.text
    assert planted.record in page.text and planted.odd in page.text and "id=quarantine-count>" in page.text
    one = client.get(f"/deliveries/{CHANNEL}/{unique}-bad", params={"ledger": prefix})
    assert one.status_code == 409 and planted.record in one.text
    stats = client.get("/api/deliveries/stats", params={"ledger": prefix}).json()
    assert stats["quarantine"]["count"] == 0 and stats["quarantine"]["where"].endswith(f"{prefix}-quarantine/")


@pytest.mark.parametrize("window", [0, 1000], ids=["claim", "dedupe-window"])
def test_the_dispatcher_quarantines_what_it_meets_and_goes_on(planted, store, tmp_path, unique, window):
    p, ledger = planted, planted.ledger
    settings = DeliverySettings(prefix=ledger.prefix, dedupe_window_offsets=window)
    kafka = load(KafkaSettings)
    d = ChannelDispatcher(LogChannel(CHANNEL, tmp_path / "alerts.jsonl"), ledger, settings, kafka, "g", "me",
                          DispatchStats(), AlertDeadLetters(kafka))
    assert d.topic == p.topic
    time.sleep(0.05)  # the RETRY record's backoff (10 ms) is over

    assert d.sweep() == 1  # the good record is retried; the corrupt one and the odd key go aside
    epoch = ledger.take_partition(CHANNEL, p.topic, 1, "me")  # the corrupt owner: aside, a fresh epoch
    assert epoch > 1_000_000_000_000  # the clock in ms: above any epoch handed out one at a time
    parts = {n: Partition(n, e) for n, e in ((0, ledger.take_partition(CHANNEL, p.topic, 0, "me")), (1, epoch))}
    for part in parts.values():
        part.buffer = [(o, b"", alert(unique, f"p{part.number}-{o}"), None) for o in range(3)]
    stop = threading.Event()
    assert d._settle_partition(parts[0], stop) is None  # the corrupt run stops its partition...
    assert p.run in parts[0].broken and parts[0].buffer == []
    assert d._settle_partition(parts[1], stop) == 3  # ...and only its partition
    sent = [json.loads(line)["idempotency_key"] for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert sent == [f"{unique}-later"] + [f"{unique}-p1-{o}" for o in range(3)]

    whys = {w["key"]: w for w in quarantine.listed(store, ledger.quarantine_prefix())}
    assert set(whys) == {p.record, p.odd, p.owner, p.run}
    for key, reason in ((p.record, "Expecting property name"), (p.odd, "odd index key"),
                        (p.owner, "partition owner cannot be read"), (p.run, "left in place")):
        assert reason in whys[key]["reason"] and whys[key]["reader"] == "me", whys[key]
    for key in (p.record, p.odd):
        with pytest.raises(NotFound):
            store.get(key)  # off the live path
    assert store.get(p.run).body == store.get(whys[p.run]["copy"]).body  # marked: the fence stays
    assert ledger.quarantined == {CHANNEL: 4}

    counted = quarantined(ledger)
    assert counted["count"] == 4 and not counted["capped"]
    health = check_quarantine(ledger, [2, None, 1])
    assert health["ok"] and health["alerts_dlq_rejected"] == 3 and "4 corrupt ledger object(s)" in health["warning"]
    [webhook] = pages.overview(ledger, 20, fast_topic="no-fast-topic")
    html = pages.render_overview(ledger, [webhook], ledger.prefix, 20, "tester", counted, 3)
    assert "id=quarantine-count>4<" in html and "id=dlq-count>3<" in html


def test_deliveries_stats_counts_the_quarantine(planted, store, capsys):
    from aldebaran.cli.main import main

    ledger = planted.ledger
    ledger.quarantine(planted.record, "Expecting property name", "test", CHANNEL)
    assert main(["deliveries", "stats", "--prefix", ledger.prefix]) == 0
    out = capsys.readouterr().out
    assert f"quarantine: 1 corrupt object(s) set aside in {store.uri(ledger.quarantine_prefix())}" in out


def test_deliveries_show_names_a_corrupt_run_that_holds_the_alert(kafka_topics, store, s3_prefix, unique, capsys):
    from aldebaran.cli.main import main
    from aldebaran.delivery.tools import locate_alert
    from tests.integration.test_dispatch_failures import make_alert, publish

    a = make_alert(f"{unique}-show")
    publish(kafka_topics, [a])

    def located():
        found = locate_alert(a["alert_id"], timeout=5.0)
        assert found is not None
        return found

    position = assert_eventually(located, timeout=30, message="the alert on the alerts topic")
    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")
    run = ledger.run_key(CHANNEL, kafka_topics.alerts_topic, position[0], position[1])
    store.put(run, b"\xff not json")

    assert main(["deliveries", "show", a["alert_id"], "--channel", CHANNEL, "--prefix", ledger.prefix]) == 0
    out = capsys.readouterr().out
    [view] = json.loads(out[out.index("{"):])["channels"]
    assert view["state"] == "CORRUPT" and view["corrupt"][0]["key"] == run, view
    store.get(run)  # shown, not moved


def test_platform_health_shows_the_quarantine_as_a_warning(kafka_topics, store, s3_prefix, unique, tmp_path,
                                                           monkeypatch):
    from aldebaran.platform import health

    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log")
    monkeypatch.setenv("AIRFLOW_CONN_ALDEBARAN_LOG", json.dumps({"conn_type": "log",
                                                                 "extra": {"path": str(tmp_path / "a.jsonl")}}))
    monkeypatch.setenv("ALDEBARAN_DELIVERY_PREFIX", f"{s3_prefix}/deliveries")
    monkeypatch.setenv("ALDEBARAN_HEALTH_PREFIX", f"{s3_prefix}/health")
    monkeypatch.setenv("ALDEBARAN_HEALTH_CHECK_DISPATCHERS", "false")
    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")
    key = ledger.key("log", f"{unique}-bad")
    ledger.quarantine(key, "JSON list, not an object", "test", "log", b"[]")  # as a dispatcher's sweep does

    record = health.check(f"quarantine-{unique}", f"ghost-{unique}")
    q = record["checks"]["quarantine"]
    assert q["ok"] and q["count"] == 1 and q["alerts_dlq_rejected"] is None, q
    assert any("1 corrupt ledger object(s)" in w and "deliveries quarantine" in w for w in record["warnings"])
    assert not any("quarantine" in p for p in record["problems"])  # the ghost auditor fails it, not this


def test_the_supervisor_pages_the_other_channels_past_a_corrupt_page_record(store, s3_prefix, tmp_path, monkeypatch,
                                                                             unique):
    from aldebaran.platform import supervisor

    for name in ("log", "log2"):
        monkeypatch.setenv(f"AIRFLOW_CONN_ALDEBARAN_{name.upper()}", json.dumps(
            {"conn_type": "log", "extra": {"path": str(tmp_path / f"{name}.jsonl")}}))
    monkeypatch.setenv("ALDEBARAN_CHANNELS", "log,log2")
    monkeypatch.setenv("ALDEBARAN_DELIVERY_PREFIX", f"{s3_prefix}/deliveries")
    monkeypatch.setenv("ALDEBARAN_SUPERVISOR_STATE_PREFIX", f"{s3_prefix}/supervisor")
    monkeypatch.setenv("ALDEBARAN_AUDIT_QUERY_NAME", f"never-{unique}")
    monkeypatch.setenv("ALDEBARAN_AUDIT_CHECKPOINT", f"s3a://aldebaran/{s3_prefix}/checkpoint")
    first = supervisor.assess()
    decision = {**first, "page": True, "incident": {**first["incident"], "restarts": 3}}
    bad = Ledger(store, prefix=f"{s3_prefix}/deliveries").key("log", supervisor.page_alert(decision).alert_id)
    store.put(bad, b"{not json")

    result = supervisor.page_if_needed(decision)
    assert result["paged"] and result["sent"] == {"log2": 1}  # log's record is corrupt: skipped, not re-sent
    assert not (tmp_path / "log.jsonl").exists() and len((tmp_path / "log2.jsonl").read_text().splitlines()) == 1
    store.get(bad)  # named in the log, left for the operator
