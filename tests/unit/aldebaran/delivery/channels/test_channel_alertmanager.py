"""The alertmanager channel without Alertmanager: its payload and label mapping, its connection, and how it
classifies answers (a local HTTP server that answers what a test injects). Against the real Alertmanager:
tests/integration/test_channel_alertmanager.py."""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from aldebaran.delivery.channels import (
    AlertmanagerChannel,
    Connection,
    OutcomeUnknown,
    PermanentError,
    RetryableError,
    channel_from_connection,
)
from aldebaran.delivery.channels.alertmanager import alertname, payload
from aldebaran.exceptions import ConfigError

from tests.unit.support.alerts import make_alert


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # the channel opens up to 64 connections at once; the default backlog of 5 drops some


class FakeAlertmanagerAnswers:
    """Failure injection: answers ``POST /api/v2/alerts`` with 200 unless a failure or a delay is queued, keeps
    bodies and headers; ``down()`` refuses connections for a block. Test-local (stdlib HTTP, one thread per
    request, HTTP/1.0 so no connection outlives its answer), so the product's tests need no test receiver."""

    def __init__(self) -> None:
        self.bodies: list = []
        self.headers: list = []
        self.failures: collections.deque = collections.deque()
        self.delays: collections.deque = collections.deque()
        self.port = 0
        self.server: ThreadingHTTPServer | None = None

    def fail_next(self, n: int, status: int) -> None:
        self.failures.extend([status] * n)

    def delay_next(self, n: int, seconds: float) -> None:
        self.delays.extend([seconds] * n)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeAlertmanagerAnswers":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if fake.delays:
                    time.sleep(fake.delays.popleft())
                status = fake.failures.popleft() if fake.failures else 200
                if status == 200:
                    fake.bodies.append(json.loads(body))
                    fake.headers.append(dict(self.headers))
                answer = b"" if status == 200 else b'"injected"'
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "7")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:  # quiet: the test reads what was recorded
                pass

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_port  # the same port again after down()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @contextlib.contextmanager
    def down(self):
        self.stop()
        try:
            yield self
        finally:
            self.start()


@pytest.fixture
def fake():
    server = FakeAlertmanagerAnswers().start()
    yield server
    server.stop()


def test_labels_are_the_alert_identity_and_annotations_carry_the_text():
    alert = make_alert()
    item = payload(alert, {"severity": "page", "team": "risk"}, "am")
    assert item["labels"] == {"alertname": "AldebaranOverfill", "alert_id": alert.alert_id, "kind": "OVERFILL",
                              "order_id": "1", "client": "Sendence", "stock": "AAPL", "severity": "page",
                              "team": "risk"}
    assert item["annotations"]["summary"] == "Aldebaran OVERFILL order 1: bought 120/100 AAPL"
    description = item["annotations"]["description"]
    assert "Purchased:      120 shares in 3 purchases (20 over the request)" in description
    assert "e-mail" not in description and f"--alert-id {alert.alert_id}" in description
    assert item["startsAt"] == "2023-11-14T22:13:20.500Z"
    # A resend is the same label set (the identity Alertmanager merges by), whatever else changed.
    again = payload(make_alert(purchased=130, detected_at=1_700_000_009_000), {"severity": "page", "team": "risk"}, "am")
    assert again["labels"] == item["labels"]


def test_an_absent_field_is_no_label_and_a_kind_is_an_alertname():
    item = payload(make_alert(client=None, stock=None, detected_at=None), {}, "am")
    assert "client" not in item["labels"] and "stock" not in item["labels"] and "startsAt" not in item
    assert alertname("ORPHAN") == "AldebaranOrphan" and alertname("AUDITOR_DOWN") == "AldebaranAuditorDown"


def test_connection_and_its_checks():
    conn = Connection("AIRFLOW_CONN_ALDEBARAN_AM", conn_type="alertmanager", host="127.0.0.1", port=9093,
                      extra={"labels": {"severity": "page"}, "batch": 50})
    channel = channel_from_connection("am", conn)
    assert isinstance(channel, AlertmanagerChannel) and channel.url == "http://127.0.0.1:9093/api/v2/alerts"
    assert (channel.batch, channel.extra_labels, channel.can_dedupe) == (50, {"severity": "page"}, True)
    assert channel.max_run > channel.concurrency  # deduplicates: long runs cost no doubt
    with pytest.raises(ConfigError, match="extra.labels has invalid label names: bad-name"):
        channel_from_connection("am", Connection("X", conn_type="alertmanager", host="h",
                                                 extra={"labels": {"bad-name": "x"}}))
    with pytest.raises(ConfigError, match="may not set the alert's own labels: alert_id"):
        channel_from_connection("am", Connection("X", conn_type="alertmanager", host="h",
                                                 extra={"labels": {"alert_id": "x"}}))
    promise = AlertmanagerChannel.promise()
    assert promise["dedupe"] and promise["dedupe_key"].startswith("label set (alert_id, kind, order_id, client, stock)")


def test_a_run_goes_out_in_batches_and_every_alert_is_delivered(fake):
    channel = AlertmanagerChannel("am", fake.url, batch=2, login="ops", password="s3cret")
    alerts = [make_alert(str(i)) for i in range(5)]
    try:
        outcomes = channel.send_many(alerts)
    finally:
        channel.close()
    assert [o.status for o in outcomes] == ["delivered"] * 5 and [o.alert_id for o in outcomes] == [a.alert_id for a in alerts]
    assert sorted(len(b) for b in fake.bodies) == [1, 2, 2]
    assert sorted(i["labels"]["order_id"] for b in fake.bodies for i in b) == ["0", "1", "2", "3", "4"]
    assert all(h["Authorization"].startswith("Basic ") for h in fake.headers)


@pytest.mark.parametrize(("status", "error"), [(500, RetryableError), (503, RetryableError), (429, RetryableError),
                                               (408, RetryableError), (400, PermanentError), (401, PermanentError),
                                               (404, PermanentError)])
def test_answers_are_classified(fake, status, error):
    channel = AlertmanagerChannel("am", fake.url, password="s3cret", login="ops")
    fake.fail_next(1, status)
    try:
        with pytest.raises(error) as exc:
            channel.send(make_alert(), make_alert().alert_id)
        assert type(exc.value) is error and f"HTTP {status}" in str(exc.value) and "s3cret" not in str(exc.value)
        if status == 429:
            assert "Retry-After: 7" in str(exc.value)
        assert channel.send(make_alert(), make_alert().alert_id)["status"] == 200
    finally:
        channel.close()


def test_a_timeout_after_sending_is_unknown_and_refused_is_a_plain_retry(fake):
    channel = AlertmanagerChannel("am", fake.url, timeout=0.3)
    fake.delay_next(1, 1.0)
    try:
        with pytest.raises(OutcomeUnknown):
            channel.send(make_alert(), make_alert().alert_id)
        with fake.down():
            with pytest.raises(RetryableError) as exc:
                channel.send(make_alert(), make_alert().alert_id)
            assert not isinstance(exc.value, OutcomeUnknown)
    finally:
        channel.close()
