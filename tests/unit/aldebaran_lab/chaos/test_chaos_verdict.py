"""The kill-dispatch / kill-scheduler end-of-campaign delivery verdict (chaos.common.delivery_verdict):
hand-written receiver counts and ledger states, hand-written expected figures. No services. The receipts
(duplicated against the promise, resent_same_key) on their own: tests/unit/aldebaran_lab/chaos/test_chaos_receipts.py."""

from __future__ import annotations

import collections
from types import SimpleNamespace

from aldebaran_lab.chaos.common import (
    DeliveryVerdict, delivery_verdict, first_receipt_after, longest_pause, settled, sms_verdict, sms_verdict_of,
)

ALERTS = [
    {"alert_id": "a1", "kind": "OVERFILL", "order_id": "o1", "stock": "AAPL", "requested": 100, "purchased": 101},
    {"alert_id": "a2", "kind": "OVERFILL", "order_id": "o2", "stock": "AAPL", "requested": 100, "purchased": 102},
    {"alert_id": "a3", "kind": "OVERFILL", "order_id": "o3", "stock": "MSFT", "requested": 50, "purchased": 60},
]
# what channels.sms_text makes of them
TEXT = {"a1": "Aldebaran OVERFILL order o1: bought 101/100 AAPL",
        "a2": "Aldebaran OVERFILL order o2: bought 102/100 AAPL",
        "a3": "Aldebaran OVERFILL order o3: bought 60/50 MSFT"}
TO = "+15552223333"


def verdict(accepted=("a1", "a2", "a3"), statuses=None, requests_per_key=None, sms_bodies=None, sms_sends=None,
            webhook_states=None, sms_states=None) -> DeliveryVerdict:
    """Defaults: every alert delivered exactly once on both channels."""
    bodies = [TEXT[i] for i in ("a1", "a2", "a3")] if sms_bodies is None else sms_bodies
    return delivery_verdict(
        ALERTS, webhook_accepted=accepted, webhook_statuses={201: 3} if statuses is None else statuses,
        webhook_requests_per_key={"a1": 1, "a2": 1, "a3": 1} if requests_per_key is None else requests_per_key,
        webhook_bad_signatures=0, webhook_incomplete_requests=0, sms_bodies=bodies,
        sms_sends={(TO, b): 1 for b in bodies} if sms_sends is None else sms_sends,
        ledger_states={"webhook": {"a1": "DELIVERED", "a2": "DELIVERED", "a3": "DELIVERED"}
                       if webhook_states is None else webhook_states,
                       "sms": {"a1": "DELIVERED", "a2": "DELIVERED", "a3": "DELIVERED"}
                       if sms_states is None else sms_states})


def test_everything_delivered_once_gives_zero_lost_and_duplicated():
    v = verdict()
    assert (v.lost, v.duplicated, v.failures()) == (0, 0, [])
    assert v.details() == {
        "webhook": {"accepted": 3, "statuses": {201: 3}, "resent_same_key_deduplicated": 0, "lost": 0,
                    "bad_signatures": 0, "incomplete_requests_dropped": 0, "receipts": 3, "duplicated": 0,
                    "resent_same_key": 0},
        "sms": {"messages": 3, "texts_sent_twice": 0, "delivered": 3, "in_doubt": 0, "in_doubt_actually_sent": 0,
                "lost": 0, "receipts": 3, "duplicated": 0, "resent_same_key": None},
    }
    assert v.rows(5, 2, "1.0 s") == [
        {"scenario": "webhook (idempotent)", "runs": 5, "faults": 2, "lost": 0, "duplicated": 0,
         "resent_same_key": 0, "recovery": "1.0 s"},
        {"scenario": "sms (cannot dedupe; 0 IN_DOUBT)", "runs": 5, "faults": 2, "lost": 0, "duplicated": 0,
         "resent_same_key": None, "recovery": "1.0 s"},
    ]


def test_an_alert_the_webhook_never_accepted_is_lost_even_if_its_record_says_delivered():
    v = verdict(accepted=("a1", "a3"), statuses={201: 2})
    assert v.lost_webhook == {"a2"}
    assert (v.lost, v.duplicated) == (1, 0)
    assert v.details()["webhook"]["lost"] == 1 and v.details()["webhook"]["accepted"] == 2


def test_a_webhook_record_not_delivered_is_lost_once_even_when_also_never_accepted():
    # a2: RETRY and never accepted (one loss, not two); a3: accepted but no record at all
    v = verdict(accepted=("a1", "a3"), statuses={201: 2}, webhook_states={"a1": "DELIVERED", "a2": "RETRY"})
    assert v.lost_webhook == {"a2", "a3"}
    assert v.lost == 2
    assert v.details()["webhook"]["lost"] == 2
    assert v.rows(1, 1, "-")[0]["lost"] == 2


def test_a_second_201_for_an_accepted_key_is_one_duplicate():
    v = verdict(statuses={201: 4, 409: 2}, requests_per_key={"a1": 3, "a2": 2, "a3": 1})
    assert v.webhook_delivered_twice == 1
    assert (v.lost, v.duplicated) == (0, 1)
    assert v.details()["webhook"]["statuses"] == {201: 4, 409: 2}
    assert v.details()["webhook"]["resent_same_key_deduplicated"] == 3  # a1: 2 more, a2: 1 more
    assert v.rows(1, 1, "-")[0]["duplicated"] == 1 and v.rows(1, 1, "-")[1]["duplicated"] == 0


def test_same_key_resends_at_the_webhook_are_reported_apart_not_as_duplicates():
    # a1 sent 3 times, a2 twice, all under their own key: the webhook's promise (at least once under a
    # stable key) allows it; 409 for every repeat
    v = verdict(statuses={201: 3, 409: 3}, requests_per_key={"a1": 3, "a2": 2, "a3": 1})
    assert (v.lost, v.duplicated, v.resent_same_key) == (0, 0, 3)
    web = v.details()["webhook"]
    assert (web["receipts"], web["duplicated"], web["resent_same_key"]) == (6, 0, 3)
    assert web["resent_same_key_deduplicated"] == 3  # the same count under its old name
    row = v.rows(1, 1, "-")[0]
    assert (row["duplicated"], row["resent_same_key"]) == (0, 3)


def test_an_sms_text_sent_twice_is_one_duplicate():
    bodies = [TEXT["a1"], TEXT["a2"], TEXT["a2"], TEXT["a3"]]
    v = verdict(sms_bodies=bodies, sms_sends={(TO, TEXT["a1"]): 1, (TO, TEXT["a2"]): 2, (TO, TEXT["a3"]): 1})
    assert v.sms_sent_twice == 1
    assert (v.lost, v.duplicated) == (0, 1)
    assert v.details()["sms"]["messages"] == 4 and v.details()["sms"]["texts_sent_twice"] == 1
    assert (v.details()["sms"]["receipts"], v.details()["sms"]["duplicated"]) == (4, 1)
    assert v.rows(1, 1, "-")[1]["duplicated"] == 1
    assert v.rows(1, 1, "-")[1]["resent_same_key"] is None and v.resent_same_key == 0  # SMS allows no resend


def test_in_doubt_records_are_not_lost_and_those_whose_text_arrived_are_counted():
    # a1 IN_DOUBT and the provider got its text; a2 IN_DOUBT, the provider never got it
    v = verdict(sms_bodies=[TEXT["a1"], TEXT["a3"]], sms_states={"a1": "IN_DOUBT", "a2": "IN_DOUBT", "a3": "DELIVERED"})
    assert v.sms_in_doubt == {"a1", "a2"}
    assert (v.lost, v.duplicated) == (0, 0)
    assert v.details()["sms"] == {"messages": 2, "texts_sent_twice": 0, "delivered": 1, "in_doubt": 2,
                                  "in_doubt_actually_sent": 1, "lost": 0, "receipts": 2, "duplicated": 0,
                                  "resent_same_key": None}
    assert v.rows(1, 1, "-")[1]["scenario"] == "sms (cannot dedupe; 2 IN_DOUBT)"


def test_sms_lost_when_delivered_without_the_text_or_in_any_other_state_or_without_record():
    # a1 DELIVERED but the provider never got its text; a2 DEAD (its text did arrive); a3 no record;
    # a text that belongs to no alert changes nothing
    v = verdict(sms_bodies=[TEXT["a2"], "something else"], sms_states={"a1": "DELIVERED", "a2": "DEAD"})
    assert v.lost_sms == {"a1", "a2", "a3"}
    assert v.lost == 3
    assert v.details()["sms"]["lost"] == 3 and v.details()["sms"]["delivered"] == 1


def test_a_webhook_key_outside_the_batch_is_a_failure_not_a_loss():
    v = verdict(accepted=("a1", "a2", "a3", "zz", "yy"), statuses={201: 5})
    assert v.unexpected_webhook == ("yy", "zz")
    assert v.failures() == ["2 unexpected webhook deliveries"]
    assert (v.lost, v.duplicated) == (0, 0)
    assert v.details()["webhook"]["accepted"] == 5


def test_from_receivers_reads_the_test_receivers_and_ledger_states():
    statuses = collections.Counter({409: 1, 201: 4})  # order as the receiver counted: 409 first
    webhook = SimpleNamespace(accepted={"a1": object(), "a3": object()}, statuses=statuses,
                              requests_per_key=collections.Counter({"a1": 2, "a3": 1}),
                              rejected_signatures=1, incomplete_requests=2)
    sms = SimpleNamespace(messages=[SimpleNamespace(body=TEXT["a1"]), SimpleNamespace(body=TEXT["a1"])],
                          sends=collections.Counter({(TO, TEXT["a1"]): 2}))
    states = {"webhook": {"a1": "DELIVERED", "a2": "CLAIMED", "a3": "DELIVERED"},
              "sms": {"a1": "DELIVERED", "a2": "IN_DOUBT"}}  # as Ledger.states(channel)
    v = DeliveryVerdict.from_receivers(ALERTS, webhook, sms, states)
    # webhook: a2 lost; 4 x 201 for 2 keys: 2 duplicates. sms: a1 twice; a3 no record: lost
    assert (v.lost, v.duplicated) == (2, 3)
    details = v.details()
    assert details == {
        "webhook": {"accepted": 2, "statuses": {409: 1, 201: 4}, "resent_same_key_deduplicated": 1, "lost": 1,
                    "bad_signatures": 1, "incomplete_requests_dropped": 2, "receipts": 3, "duplicated": 2,
                    "resent_same_key": 1},
        "sms": {"messages": 2, "texts_sent_twice": 1, "delivered": 1, "in_doubt": 1, "in_doubt_actually_sent": 0,
                "lost": 1, "receipts": 2, "duplicated": 1, "resent_same_key": None},
    }
    # key order as written into docs/reliability.md's JSON: the old keys first, as before, then the receipts
    assert list(details["webhook"]) == ["accepted", "statuses", "resent_same_key_deduplicated", "lost",
                                        "bad_signatures", "incomplete_requests_dropped", "receipts", "duplicated",
                                        "resent_same_key"]
    assert list(details["webhook"]["statuses"]) == [409, 201]
    assert list(details["sms"]) == ["messages", "texts_sent_twice", "delivered", "in_doubt",
                                    "in_doubt_actually_sent", "lost", "receipts", "duplicated", "resent_same_key"]
    assert v.rows(3, 2, "x") == [
        {"scenario": "webhook (idempotent)", "runs": 3, "faults": 2, "lost": 1, "duplicated": 2,
         "resent_same_key": 1, "recovery": "x"},
        {"scenario": "sms (cannot dedupe; 1 IN_DOUBT)", "runs": 3, "faults": 2, "lost": 1, "duplicated": 1,
         "resent_same_key": None, "recovery": "x"},
    ]


def test_sms_verdict_of_a_second_sms_channel_with_its_own_provider_and_name():
    provider = SimpleNamespace(messages=[SimpleNamespace(body=TEXT["a1"]), SimpleNamespace(body=TEXT["a2"])],
                               sends=collections.Counter({(TO, TEXT["a1"]): 1, (TO, TEXT["a2"]): 1}))
    # a1 settled by the lookup (DELIVERED, text there); a2 IN_DOUBT though sent; a3 RETRY: not yet settled
    v = sms_verdict_of(ALERTS, provider, {"a1": "DELIVERED", "a2": "IN_DOUBT", "a3": "RETRY"}, "sms_lookup")
    assert v.lost == {"a3"} and v.in_doubt == {"a2"} and v.in_doubt_actually_sent == 1
    assert v.row(2, 1, "r") == {"scenario": "sms_lookup (cannot dedupe; 1 IN_DOUBT)", "runs": 2, "faults": 1,
                                "lost": 1, "duplicated": 0, "resent_same_key": None, "recovery": "r"}
    assert v.row(2, 1, "r", "label")["scenario"] == "label"
    assert sms_verdict(ALERTS, [], {}, {}).lost == {"a1", "a2", "a3"}


def test_settled_counts_the_alerts_not_yet_in_a_wanted_state_per_channel():
    states = {"webhook": {"a1": "DELIVERED", "a2": "DELIVERED", "a3": "CLAIMED"},
              "sms": {"a1": "IN_DOUBT", "a2": "DELIVERED"}}
    wanted = {"webhook": ("DELIVERED",), "sms": ("DELIVERED", "IN_DOUBT")}
    assert settled(states, ["a1", "a2", "a3"], wanted) == {"webhook": 1, "sms": 1}
    assert settled(states, ["a1", "a2"], wanted) == {}
    assert settled(states, ["a1"], {"sms": ("DELIVERED",)}) == {"sms": 1}
    assert settled({}, ["a1"], {"bus": ("DELIVERED",)}) == {"bus": 1}


def test_first_receipt_after_a_kill_and_the_longest_pause():
    received = [10.0, 10.5, 11.0, 17.5, 18.0]
    assert first_receipt_after(received, 11.2) == 6.3
    assert first_receipt_after(received, 10.5) == 0.0  # a receipt at the very moment counts
    assert first_receipt_after(received, 18.5) is None
    assert longest_pause(received, 10.0, 20.0) == (6.5, 11.0)
    assert longest_pause(received, 9.0, 10.2) == (1.0, 9.0)
    assert longest_pause([], 0.0, 3.0) == (3.0, 0.0)
