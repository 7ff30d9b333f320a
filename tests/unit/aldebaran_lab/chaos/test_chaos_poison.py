"""`aldebaran chaos poison`'s verdict on dead letters (aldebaran_lab.chaos.poison._dead_letters), without
services: which hostile messages count as dead-lettered, by whom, and which do not."""

from aldebaran.settings import KafkaSettings
from aldebaran_lab.chaos.poison import _dead_letters, _rows

KAFKA = KafkaSettings()


def letter(topic, partition, offset, consumer=None, reason="not JSON"):
    h = {"aldebaran.source.topic": topic, "aldebaran.source.partition": str(partition),
         "aldebaran.source.offset": str(offset), "aldebaran.reason_code": "invalid_json"}
    if reason:
        h["aldebaran.reason"] = reason
    if consumer:
        h["aldebaran.consumer"] = consumer
    return h


def test_an_alert_needs_a_dead_letter_from_every_running_dispatcher():
    sent = {"alerts": {"at": [(0, 10), (1, 4)]}, "trades": {"at": []}}
    letters = {"alerts.dlq": [letter("alerts", 0, 10, "dispatcher:log"), letter("alerts", 0, 10, "dispatcher:bus"),
                              letter("alerts", 1, 4, "dispatcher:log")]}
    v = _dead_letters(sent, letters, ["log", "bus"], KAFKA)
    assert v["missing"] == {"alerts": 1}  # (1, 4): the bus dispatcher has not dead-lettered it
    assert v["by_consumer"] == {"dispatcher:log": 2, "dispatcher:bus": 1}


def test_a_dispatcher_whose_name_contains_another_does_not_stand_in_for_it():
    sent = {"alerts": {"at": [(0, 1)]}, "trades": {"at": []}}
    letters = {"alerts.dlq": [letter("alerts", 0, 1, "dispatcher:log2")]}
    assert _dead_letters(sent, letters, ["log"], KAFKA)["missing"] == {"alerts": 1}


def test_a_trade_needs_the_auditors_dead_letter_and_a_letter_without_reason_is_counted():
    sent = {"alerts": {"at": []}, "trades": {"at": [(2, 7), (2, 8)]}}
    letters = {"trades.dlq": [letter("trades", 2, 7), letter("trades", 2, 8, reason="")]}
    v = _dead_letters(sent, letters, ["log"], KAFKA)
    assert v["missing"] == {}
    assert v["without_reason"] == 1


def test_letters_for_other_offsets_or_topics_do_not_count():
    sent = {"alerts": {"at": [(0, 5)]}, "trades": {"at": [(0, 5)]}}
    letters = {"alerts.dlq": [letter("alerts", 0, 6, "dispatcher:log"), letter("alerts.fast", 0, 5, "dispatcher:log")],
               "trades.dlq": [letter("trades", 1, 5), {"aldebaran.source.partition": "x"}]}
    assert _dead_letters(sent, letters, ["log"], KAFKA)["missing"] == {"alerts": 1, "trades": 1}


def test_the_report_rows_carry_the_missing_and_the_orders_times():
    details = {"dispatchers": ["log", "bus"], "before": {"log_ms": 900.0}, "after": {"log_ms": 1200.0},
               "hostile": {"alerts": {"sent": 250, "refused_by_broker": {}},
                           "trades": {"sent": 200, "refused_by_broker": {"MSG_SIZE_TOO_LARGE": 1}}},
               "dead_letters": {"missing": {"trades": 3}}}
    rows = {r["scenario"].split("`")[1]: r for r in _rows(details)}
    assert (rows["alerts"]["runs"], rows["alerts"]["faults"], rows["alerts"]["lost"]) == (2, 250, 0)
    assert (rows["trades"]["runs"], rows["trades"]["faults"], rows["trades"]["lost"]) == (1, 200, 3)
    assert "MSG_SIZE_TOO_LARGE" in rows["trades"]["scenario"]
    assert rows["trades"]["recovery"] == "order after: log 1200.0 ms (before: 900.0 ms)"
