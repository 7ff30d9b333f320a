"""The JVMs the lab starts (its Kafka broker, its Spark daemons) log as the product's JVMs do: the product's
log4j2 date (aldebaran.runtime.logs.LOG4J2_DATE) and its Spark config file (aldebaran.runtime.spark)."""

from __future__ import annotations

import pytest

from aldebaran.runtime import logs
from aldebaran.runtime import spark as sparkmod


@pytest.fixture
def log4j2(tmp_path, monkeypatch):
    monkeypatch.setattr(sparkmod.paths, "run_dir", lambda: tmp_path)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    return f"-Dlog4j2.configurationFile={tmp_path / 'spark-log4j2.properties'}"


def test_the_spark_and_kafka_log4j2_configs_use_the_date():
    from aldebaran_lab.services.kafka import LOG4J2

    for config in (sparkmod.SPARK_LOG4J2, LOG4J2):
        patterns = [line for line in config.splitlines() if line.startswith("appender.console.layout.pattern")]
        assert patterns and all(logs.LOG4J2_DATE in p for p in patterns)
        assert "{date}" not in config


def test_the_lab_spark_daemons_get_the_config(log4j2):
    from aldebaran_lab.services.spark_cluster import daemon_logging

    assert daemon_logging({"SPARK_DAEMON_JAVA_OPTS": "-Xmx1g"})["SPARK_DAEMON_JAVA_OPTS"] == f"-Xmx1g {log4j2}"
    assert daemon_logging({"SPARK_DAEMON_JAVA_OPTS": "-Dlog4j2.configurationFile=/x"}) == {
        "SPARK_DAEMON_JAVA_OPTS": "-Dlog4j2.configurationFile=/x"}
