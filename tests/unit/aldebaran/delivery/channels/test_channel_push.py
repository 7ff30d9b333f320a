"""What the push channels (fcm, apns) promise without a provider: neither deduplicates, so a run is one
send window; APNs' id from the alert id. Against the providers' fakes (message and key mapping, tokens,
error classification, connections): tests/unit/aldebaran_capacity/receivers/test_push.py."""

from __future__ import annotations

from aldebaran.delivery.channels import ApnsChannel, FcmChannel
from aldebaran.delivery.channels.push import apns_id


def test_neither_push_kind_can_deduplicate_so_runs_are_one_send_window():
    for kind in (FcmChannel, ApnsChannel):
        promise = kind.promise()
        assert promise["dedupe"] is False and promise["dedupe_key"] is None
        assert promise["in_doubt"].startswith("IN_DOUBT for an operator, never re-sent automatically")
        assert not kind.has_lookup and not kind.remembers_sent
    assert apns_id("27000a477e33d864a079857955e85b47") == "27000a47-7e33-d864-a079-857955e85b47"
    assert len(apns_id("not-hex")) == 36
