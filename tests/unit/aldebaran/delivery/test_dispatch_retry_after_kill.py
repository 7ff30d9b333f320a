"""What the Airflow scheduler-kill campaign (`aldebaran chaos kill-scheduler`, a `campaign` that `make chaos-short`
runs) proves of our code, at unit size: a dispatch try killed between its sends and its record (the scheduler's
tree kill takes the task process with it), then the task's next try (Airflow's retry: a new owner of the
partition at a higher epoch, reading from the last committed offset) delivers every alert, each accepted once
by a recipient that deduplicates, and adopts the killed try's run at once, without waiting for its lease.

Real parts: the webhook channel over HTTP to a deduplicating recipient (below: a small local server that
checks the signature and keeps the first POST per Idempotency-Key), the ledger on the local-directory store,
the run settler. The kill is the failure-injection fake below. The same kill on a
channel that cannot deduplicate (SMS, the log file) is in test_dispatch_runs.py."""

from __future__ import annotations

import collections
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from aldebaran.delivery.channels import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify_signature
from aldebaran.delivery.channels.webhook import WebhookChannel
from aldebaran.delivery.ledger import Ledger
from aldebaran.delivery.records import RetryPolicy
from aldebaran.delivery.runs import CLAIMED, RECORDED
from aldebaran.storage.store import LocalStore
from tests.unit.aldebaran.delivery.test_dispatch_runs import SimulatedCrash, partition, runs, settler

SECRET = "retry-after-kill-" + "s" * 24
ALERTS = 100


class KilledAfterSendsWebhookFake(WebhookChannel):
    """Failure injection: the real webhook channel, which sends the first `sent` alerts of its first run and
    then dies (a SIGKILL: nothing is recorded)."""

    def __init__(self, url: str, sent: int) -> None:
        super().__init__("hook", url, SECRET)
        self.sent = sent

    def send_many(self, alerts):
        super().send_many(alerts[: self.sent])
        raise SimulatedCrash()


@pytest.fixture
def ledger(tmp_path):
    # A lease far longer than the test: the retry must adopt the killed try's run without waiting it out.
    return Ledger(LocalStore(tmp_path / "ledger"), prefix="deliveries", lease_seconds=3600,
                  policy=RetryPolicy(3, 1, 1))


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # the channel opens up to 64 connections at once; the default backlog of 5 drops some


class DeduplicatingRecipient:
    """A webhook recipient that honours Idempotency-Key, as the channel's promise assumes: the first signed POST
    of a key is accepted (201), a later one refused (409) and counted in `repeats` (by alert id)."""

    def __init__(self) -> None:
        self.accepted: dict[str, dict] = {}
        self.statuses: collections.Counter = collections.Counter()
        self.repeats: collections.Counter = collections.Counter()
        lock = threading.Lock()
        recipient = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                key = self.headers.get("Idempotency-Key")
                signed = verify_signature(body, self.headers.get(SIGNATURE_HEADER), SECRET,
                                          self.headers.get(TIMESTAMP_HEADER))
                with lock:
                    if not signed or not key:
                        status = 401 if not signed else 400
                    elif key in recipient.accepted:
                        recipient.repeats[json.loads(body)["alert_id"]] += 1
                        status = 409
                    else:
                        recipient.accepted[key] = json.loads(body)
                        status = 201
                    recipient.statuses[status] += 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:  # quiet: the test reads what was recorded
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    recipient = DeduplicatingRecipient()
    yield recipient
    recipient.close()


def test_a_try_killed_mid_run_then_retried_delivers_each_alert_once_to_a_deduplicating_recipient(ledger, webhook):
    url = webhook.url + "/alerts"
    with pytest.raises(SimulatedCrash):
        settler(ledger, KilledAfterSendsWebhookFake(url, sent=30), "try-1").settle(
            partition(1, range(ALERTS)), threading.Event())
    killed = [r for r in runs(ledger, "hook") if r.state == CLAIMED]
    assert len(killed) == 1 and killed[0].owner == "try-1"
    sent_before_the_kill = set(webhook.accepted)
    assert 0 < len(sent_before_the_kill) < ALERTS

    retry = settler(ledger, WebhookChannel("hook", url, SECRET), "try-2")
    assert retry.settle(partition(2, range(ALERTS)), threading.Event()) == ALERTS  # nothing was committed

    every = {f"a-{i}" for i in range(ALERTS)}
    assert set(webhook.accepted) == every  # none lost
    assert webhook.statuses[201] == ALERTS  # each accepted once; a resend of the killed run is refused, not taken
    assert set(webhook.repeats) <= sent_before_the_kill
    assert all(r.state == RECORDED for r in runs(ledger, "hook"))
    adopted = next(r for r in runs(ledger, "hook") if r.start == killed[0].start)
    assert adopted.owner == "try-2"
