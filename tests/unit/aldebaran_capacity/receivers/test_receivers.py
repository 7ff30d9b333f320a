"""The capacity package's test receivers: the batched webhook (dedupe per alert), the SMS provider's message lookup,
the stats endpoint and the receiver process. Local HTTP servers on 127.0.0.1 only, no services."""

from __future__ import annotations

import json
import os
import time

import pytest
import requests

from aldebaran.delivery.channels import alert_body, signed_headers
from aldebaran.model import Alert
from aldebaran_capacity.receivers import BATCH_HEADER, ReceiverProcess, SmsProvider, WebhookReceiver

SECRET = "s3cr3t-for-the-receiver-tests"


def alert(n: int) -> dict:
    return {"alert_id": f"alert-{n}", "kind": "OVERFILL", "order_id": f"order-{n}", "requested": 100, "purchased": 120}


def post_batch(url: str, alerts: list[dict], key: str, secret: str = SECRET, count: int | None = None):
    body = json.dumps({"alerts": alerts}).encode()
    headers = {"Content-Type": "application/json", "Idempotency-Key": key, **signed_headers(body, secret),
               BATCH_HEADER: str(len(alerts) if count is None else count)}
    return requests.post(url + "/alerts", data=body, headers=headers, timeout=5)


def post_one(url: str, a: dict, **signing):
    body = alert_body(Alert.from_dict(a))
    headers = {"Content-Type": "application/json", "Idempotency-Key": a["alert_id"], **signed_headers(body, SECRET),
               **signing}
    return requests.post(url + "/alerts", data=body, headers=headers, timeout=5)


@pytest.fixture
def webhook():
    with WebhookReceiver(SECRET) as receiver:
        yield receiver


@pytest.fixture
def sms():
    with SmsProvider() as provider:
        yield provider


# --- batched webhook ----------------------------------------------------------------------------------
def test_a_batch_is_deduplicated_per_alert_across_batches(webhook):
    before = time.time()
    first = post_batch(webhook.url, [alert(1), alert(2)], key="batch-1")
    second = post_batch(webhook.url, [alert(2), alert(3), alert(1)], key="batch-2")

    assert first.status_code == 200 and second.status_code == 200
    assert first.json() == {"accepted": 2, "duplicates": [], "id": first.headers["X-Request-Id"]}
    assert second.json() == {"accepted": 1, "duplicates": ["alert-2", "alert-1"], "id": second.headers["X-Request-Id"]}
    assert first.json()["id"] != second.json()["id"]
    assert sorted(webhook.accepted) == ["alert-1", "alert-2", "alert-3"]
    assert webhook.accepted["alert-3"].alert == alert(3) and webhook.accepted["alert-3"].batch_key == "batch-2"
    assert webhook.repeats == {"alert-1": 1, "alert-2": 1}
    assert webhook.requests_per_key == {"alert-1": 2, "alert-2": 2, "alert-3": 1}
    assert webhook.requests_per_batch_key == {"batch-1": 1, "batch-2": 1}
    assert sorted(webhook.received_at) == ["alert-1", "alert-2", "alert-3"]
    assert before <= webhook.received_at["alert-1"] <= webhook.received_at["alert-3"] <= time.time()
    assert webhook.statuses == {200: 2}


def test_a_batch_and_single_posts_share_the_dedupe(webhook):
    assert post_one(webhook.url, alert(1)).status_code == 201
    batch = post_batch(webhook.url, [alert(1), alert(2)], key="batch-1")
    assert batch.json()["accepted"] == 1 and batch.json()["duplicates"] == ["alert-1"]
    again = post_one(webhook.url, alert(2))  # accepted in the batch: the single POST is a repeat
    assert again.status_code == 409 and again.headers["X-Request-Id"] == batch.headers["X-Request-Id"]
    assert webhook.stats(summary=True) == {"received": 2, "duplicates": 2, "requests": 3, "incomplete_requests": 0}


def test_a_batch_with_a_bad_signature_is_401_and_accepts_nothing(webhook):
    response = post_batch(webhook.url, [alert(1), alert(2)], key="batch-1", secret="not-the-" + SECRET)
    assert response.status_code == 401
    assert webhook.rejected_signatures == 1 and not webhook.accepted and not webhook.received_at
    assert webhook.requests_per_batch_key == {"batch-1": 1} and not webhook.requests_per_key
    # the same batch, signed right, is accepted whole
    assert post_batch(webhook.url, [alert(1), alert(2)], key="batch-1").json()["accepted"] == 2


def test_the_signature_covers_the_timestamp(webhook):
    body = alert_body(Alert.from_dict(alert(1)))
    signed = signed_headers(body, SECRET)
    later = str(int(signed["X-Aldebaran-Timestamp"]) + 1)
    # the same signature with another timestamp (a replay made to look fresh) is refused, as is none
    assert post_one(webhook.url, alert(1), **{"X-Aldebaran-Timestamp": later,
                                               "X-Aldebaran-Signature": signed["X-Aldebaran-Signature"]}).status_code == 401
    no_stamp = requests.post(webhook.url + "/alerts", data=body, timeout=5,
                             headers={"Idempotency-Key": "alert-1", "X-Aldebaran-Signature": signed["X-Aldebaran-Signature"]})
    assert no_stamp.status_code == 401
    assert webhook.rejected_signatures == 2 and not webhook.accepted
    assert post_one(webhook.url, alert(1), **signed).status_code == 201


def test_a_correctly_signed_old_request_is_refused_as_a_replay(webhook):
    body = alert_body(Alert.from_dict(alert(1)))
    old = signed_headers(body, SECRET, now=time.time() - webhook.max_age - 60)
    assert post_one(webhook.url, alert(1), **old).status_code == 401
    assert webhook.rejected_stale == 1 and webhook.rejected_signatures == 0 and not webhook.accepted
    assert post_one(webhook.url, alert(1)).status_code == 201  # the channel's resend is stamped anew


@pytest.mark.parametrize("count", [1, 3, "two"])
def test_a_batch_whose_count_does_not_match_is_400_and_accepts_nothing(webhook, count):
    assert post_batch(webhook.url, [alert(1), alert(2)], key="b", count=count).status_code == 400
    assert not webhook.accepted


def test_a_batch_without_alert_ids_is_400(webhook):
    assert post_batch(webhook.url, [alert(1), {"kind": "OVERFILL"}], key="b").status_code == 400
    assert not webhook.accepted


def test_an_injected_failure_answers_a_batch_without_accepting_it(webhook):
    webhook.fail_next(1, 503)
    assert post_batch(webhook.url, [alert(1)], key="b").status_code == 503
    assert not webhook.accepted
    assert post_batch(webhook.url, [alert(1)], key="b").status_code == 200


# --- SMS message lookup --------------------------------------------------------------------------------
def send_sms(provider: SmsProvider, body: str, reference: str | None = None, auth=None):
    form = {"To": "+15552223333", "From": "+15550001111", "Body": body}
    if reference is not None:
        form["Reference"] = reference
    return requests.post(provider.url + provider.path, data=form,
                         auth=auth or (provider.account_sid, provider.auth_token), timeout=5)


def lookup(provider: SmsProvider, reference: str, auth=None):
    return requests.get(provider.url + provider.path, params={"Reference": reference},
                        auth=auth or (provider.account_sid, provider.auth_token), timeout=5)


def test_sms_lookup_finds_the_messages_sent_with_a_reference(sms):
    sent = send_sms(sms, "Aldebaran OVERFILL order 1", reference="alert-1").json()
    send_sms(sms, "Aldebaran OVERFILL order 2", reference="alert-2")
    send_sms(sms, "no reference")

    found = lookup(sms, "alert-1")
    assert found.status_code == 200
    (message,) = found.json()["messages"]
    assert message == {"sid": sent["sid"], "status": "queued", "to": "+15552223333", "from": "+15550001111",
                       "body": "Aldebaran OVERFILL order 1", "reference": "alert-1",
                       "date_created": sent["date_created"]}
    assert message["sid"].startswith("SM") and len(message["sid"]) == 34
    assert sms.sends_by_reference == {"alert-1": 1, "alert-2": 1}
    assert sum(sms.sends.values()) == 3 and len(sms.messages) == 3


def test_sms_lookup_lists_every_send_of_a_reference(sms):
    send_sms(sms, "text", reference="alert-1")
    send_sms(sms, "text", reference="alert-1")
    assert len(lookup(sms, "alert-1").json()["messages"]) == 2
    assert sms.sends_by_reference == {"alert-1": 2} and sms.sends[("+15552223333", "text")] == 2
    assert sms.repeats == {"alert-1": 1}


def test_sms_lookup_of_an_unknown_reference_is_an_empty_list(sms):
    send_sms(sms, "text", reference="alert-1")
    response = lookup(sms, "alert-404")
    assert response.status_code == 200 and response.json() == {"messages": []}


def test_sms_lookup_needs_the_credentials(sms):
    send_sms(sms, "text", reference="alert-1")
    response = lookup(sms, "alert-1", auth=(sms.account_sid, "wrong-token"))
    assert response.status_code == 401 and response.json()["code"] == 20003
    assert "messages" not in response.json() and sms.unauthorized == 1


def test_sms_lookup_takes_injected_failures(sms):
    send_sms(sms, "text", reference="alert-1")
    sms.fail_next(1, 503)
    assert lookup(sms, "alert-1").status_code == 503
    assert len(lookup(sms, "alert-1").json()["messages"]) == 1


# --- stats, outage, process mode -----------------------------------------------------------------------
def test_stats_endpoint(webhook):
    before = time.time()
    post_batch(webhook.url, [alert(1), alert(2)], key="b1")
    post_batch(webhook.url, [alert(2)], key="b2")
    after = time.time()
    full = requests.get(webhook.url + "/_stats", timeout=5).json()
    received_at = full.pop("received_at")
    assert full.pop("repeats") == {"alert-2": 1}  # the receipts after the first, per alert id
    assert full == {"received": 2, "duplicates": 1, "requests": 2, "incomplete_requests": 0}
    assert sorted(received_at) == ["alert-1", "alert-2"]
    assert all(before <= t <= after for t in received_at.values())
    summary = requests.get(webhook.url + "/_stats?summary=1", timeout=5).json()
    assert summary == {"received": 2, "duplicates": 1, "requests": 2, "incomplete_requests": 0}


def test_down_refuses_connections_and_drops_open_ones(webhook):
    with requests.Session() as session:
        assert session.get(webhook.url + "/_stats", timeout=5).status_code == 200  # a keep-alive connection
        with webhook.down():
            with pytest.raises(requests.ConnectionError):
                session.get(webhook.url + "/_stats", timeout=5)
        assert session.get(webhook.url + "/_stats", timeout=5).status_code == 200


@pytest.mark.parametrize("kind", ["webhook", "sms"])
def test_a_receiver_in_its_own_process(kind):
    with ReceiverProcess(kind, secret=SECRET) as receiver:
        if kind == "webhook":
            assert post_one(receiver.url, alert(1)).status_code == 201
            assert post_one(receiver.url, alert(1)).status_code == 409
        else:
            form = {"To": "+15552223333", "From": "+15550001111", "Body": "text", "Reference": "alert-1"}
            auth = (receiver.account_sid, receiver.auth_token)
            for _ in range(2):
                assert requests.post(receiver.url + receiver.path, data=form, auth=auth, timeout=5).status_code == 201
        stats = receiver.stats(summary=False)
        assert (stats["received"], stats["duplicates"], stats["requests"]) == (1, 1, 2)
        assert list(stats["received_at"]) == ["alert-1"] and stats["repeats"] == {"alert-1": 1}
        pid = receiver.pid
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(pid, 0)


def test_the_ceiling_benchmark_runs_and_checks_what_the_receiver_got():
    from aldebaran_capacity.bench.receiver_ceiling import ceiling

    result = ceiling("webhook", seconds=0.5, concurrency=4, batch=10)
    assert result["correct"] is True and result["requests"] > 0 and result["errors"] == 0
    assert result["alerts"] == 10 * result["requests"] and result["statuses"] == {"200": result["requests"]}
    assert {"requests_per_s", "alerts_per_s", "receiver_cpu_s", "requests_per_receiver_cpu_s"} <= set(result)


@pytest.mark.parametrize("batch", [1, 2])
def test_the_webhook_channels_signature_passes_the_receivers_check(webhook, batch):
    from aldebaran.delivery.channels import WebhookChannel

    alerts = [Alert.from_dict(alert(n)) for n in range(3)]
    channel = WebhookChannel("hook", webhook.url + "/alerts", SECRET, timeout=5, batch=batch, concurrency=2)
    try:
        assert [o.status for o in channel.send_many(alerts)] == ["delivered"] * 3
        channel.close()  # a closed channel starts a new loop, and new request slots on it
        assert channel.send_many(alerts[:1])[0].receipt["already_delivered"] is True
    finally:
        channel.close()
    assert webhook.rejected_signatures == 0 and webhook.rejected_stale == 0
    assert sorted(webhook.accepted) == ["alert-0", "alert-1", "alert-2"]
