"""`aldebaran auditor run --trades-topic/--alerts-topic/--dlq-topic`: flags over the ALDEBARAN_KAFKA_* settings."""

from __future__ import annotations

import pytest

from aldebaran.cli import main as cli
from aldebaran.settings import ConfigError


def kafka_for(argv, monkeypatch, **env):
    for name in cli.AUDITOR_TOPIC_FLAGS:
        monkeypatch.delenv(f"ALDEBARAN_KAFKA_{name.upper()}", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return cli.auditor_kafka_settings(cli.build_parser().parse_args(["auditor", "run", *argv]))


def test_without_flags_the_topics_come_from_the_environment(monkeypatch):
    kafka = kafka_for([], monkeypatch, ALDEBARAN_KAFKA_ALERTS_TOPIC="alerts-env")
    assert (kafka.trades_topic, kafka.alerts_topic, kafka.dlq_topic) == ("trades", "alerts-env", "trades.dlq")


def test_each_flag_overrides_its_setting(monkeypatch):
    kafka = kafka_for(
        ["--trades-topic", "t2", "--alerts-topic", "a2", "--dlq-topic", "t2.dlq"], monkeypatch,
        ALDEBARAN_KAFKA_TRADES_TOPIC="t-env", ALDEBARAN_KAFKA_ALERTS_TOPIC="a-env", ALDEBARAN_KAFKA_DLQ_TOPIC="d-env",
    )
    assert kafka.topics() == ["t2", "a2", "t2.dlq"]


def test_one_flag_leaves_the_other_topics_alone(monkeypatch):
    kafka = kafka_for(["--dlq-topic", "bad-input"], monkeypatch, ALDEBARAN_KAFKA_TRADES_TOPIC="t-env")
    assert kafka.topics() == ["t-env", "alerts", "bad-input"]


@pytest.mark.parametrize("flag, setting", [
    ("--trades-topic", "ALDEBARAN_KAFKA_TRADES_TOPIC"),
    ("--alerts-topic", "ALDEBARAN_KAFKA_ALERTS_TOPIC"),
    ("--dlq-topic", "ALDEBARAN_KAFKA_DLQ_TOPIC"),
])
def test_an_invalid_topic_name_fails_naming_the_setting(monkeypatch, flag, setting):
    with pytest.raises(ConfigError, match=setting):
        kafka_for([flag, "no spaces/or slashes"], monkeypatch)


def test_help_lists_the_topic_flags_with_their_settings(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["auditor", "run", "--help"])
    out = capsys.readouterr().out
    for flag in ("--trades-topic", "--alerts-topic", "--dlq-topic"):
        assert flag in out
    assert "ALDEBARAN_KAFKA_DLQ_TOPIC" in out
