"""The test webhook receiver drops a request whose body is cut short (client killed between writing the
headers and the body, as the kill-dispatch campaign does), instead of judging its signature: a real
HTTP server never hands a truncated body to the application. Local HTTP server only, no services."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import requests

from aldebaran.audit.findings import alert_id
from aldebaran.delivery.channels import alert_body, signed_headers
from aldebaran.model import Alert
from aldebaran_capacity.receivers import WebhookReceiver


def test_truncated_body_is_dropped_not_counted_as_a_bad_signature():
    secret = "s3cr3t-for-the-test"
    alert = {"alert_id": alert_id("OVERFILL", "cut-1"), "kind": "OVERFILL", "order_id": "cut-1"}
    body = alert_body(Alert.from_dict(alert))
    signed = signed_headers(body, secret)
    with WebhookReceiver(secret) as receiver:
        url = urlparse(receiver.url)
        head = (f"POST /alerts HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
                f"Idempotency-Key: {alert['alert_id']}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in signed.items()) +
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        with socket.create_connection((url.hostname, url.port), timeout=5) as sock:
            sock.sendall(head + body[: len(body) // 2])  # the sender dies here
        deadline = time.monotonic() + 5
        while receiver.incomplete_requests == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert receiver.incomplete_requests == 1
        assert receiver.rejected_signatures == 0 and not receiver.accepted
        # The retry of the same delivery, whole, is accepted once.
        resp = requests.post(receiver.url + "/alerts", data=body, timeout=5,
                             headers={"Idempotency-Key": alert["alert_id"], "Content-Type": "application/json",
                                      **signed})
        assert resp.status_code == 201 and list(receiver.accepted) == [alert["alert_id"]]
