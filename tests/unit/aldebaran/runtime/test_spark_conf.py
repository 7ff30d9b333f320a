"""The precedence of Spark settings (aldebaran.runtime.spark.resolve_conf): the caller's explicit values, then the
user's (--conf, spark-defaults.conf, the Spark connection), then the platform's defaults."""

from __future__ import annotations

import pytest

from aldebaran.runtime import spark as sparkmod
from aldebaran.exceptions import ConfigError

DEFAULTS = {"spark.sql.session.timeZone": "UTC", "spark.jars": "/c/kafka.jar,/c/pool.jar",
            "spark.driver.extraJavaOptions": "-XX:-DontCompileHugeMethods", **sparkmod.REQUIRED_CONF}


def test_a_user_value_wins_over_a_default_and_unset_defaults_apply():
    out = sparkmod.resolve_conf(DEFAULTS, {"spark.sql.session.timeZone": "Asia/Tokyo"}, {})
    assert "spark.sql.session.timeZone" not in out  # left to the user's value
    assert out["spark.jars"] == "/c/kafka.jar,/c/pool.jar"


def test_lists_are_merged_with_the_users_first_and_no_duplicates():
    user = {"spark.jars": "/site/udf.jar,/c/pool.jar", "spark.driver.extraJavaOptions": "-Xss4m"}
    out = sparkmod.resolve_conf(DEFAULTS, user, {})
    assert out["spark.jars"] == "/site/udf.jar,/c/pool.jar,/c/kafka.jar"
    assert out["spark.driver.extraJavaOptions"] == "-Xss4m -XX:-DontCompileHugeMethods"


def test_the_callers_explicit_values_win_over_everything():
    out = sparkmod.resolve_conf(DEFAULTS, {"spark.sql.shuffle.partitions": "7"}, {"spark.sql.shuffle.partitions": "2"})
    assert out["spark.sql.shuffle.partitions"] == "2"


def test_a_required_setting_the_user_contradicts_fails_named():
    with pytest.raises(ConfigError, match=r"spark.sql.adaptive.coalescePartitions.enabled='true'.*needs 'false'"):
        sparkmod.resolve_conf(DEFAULTS, {"spark.sql.adaptive.coalescePartitions.enabled": "true"}, {})


def test_a_required_setting_the_user_repeats_is_fine():
    sparkmod.resolve_conf(DEFAULTS, dict(sparkmod.REQUIRED_CONF), {})


@pytest.mark.parametrize("master, pinned", [("local[2]", True), ("local[*]", True),
                                            ("spark://10.0.0.5:7077", False), ("yarn", False)])
def test_the_driver_address_is_pinned_only_for_a_local_master(master, pinned):
    conf = sparkmod.base_conf(2, False, master)
    assert ("spark.driver.host" in conf) is pinned
    assert ("spark.driver.bindAddress" in conf) is pinned
    # on a cluster, a dead executor host is found within seconds (its heartbeats), not Spark's 120 s
    assert (conf.get("spark.storage.blockManagerHeartbeatTimeoutMs") == "6000") is not pinned
    assert (conf.get("spark.network.timeoutInterval") == "1s") is not pinned


def test_spark_defaults_are_read_as_spark_submit_reads_them(tmp_path, monkeypatch):
    (tmp_path / "spark-defaults.conf").write_text("# cluster defaults\nspark.a 1\nspark.b=2\n! a comment\n"
                                                  "spark.c: x y\n\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert sparkmod.user_conf() == {"spark.a": "1", "spark.b": "2", "spark.c": "x y"}


def test_no_spark_defaults_file_means_nothing_set(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert sparkmod.user_conf() == {}


def test_a_submit_keeps_the_users_jvm_options_and_adds_the_jit_flag_and_the_log_config(tmp_path, monkeypatch):
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Xss4m -Dsite=1\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.setattr(sparkmod.paths, "run_dir", lambda: tmp_path)
    conf = sparkmod.submit_conf({"spark.sql.shuffle.partitions": "4"})
    log4j2 = f"-Dlog4j2.configurationFile={tmp_path / 'spark-log4j2.properties'}"  # aldebaran.runtime.logs: ISO-8601 UTC
    assert conf["spark.driver.extraJavaOptions"] == f"-Xss4m -Dsite=1 {sparkmod.JVM_OPTIONS} {log4j2}"
    assert conf["spark.executor.extraJavaOptions"] == sparkmod.JVM_OPTIONS
    assert conf["spark.sql.shuffle.partitions"] == "4"


def test_the_callers_submit_conf_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    conf = sparkmod.submit_conf({"spark.driver.extraJavaOptions": "-Xmx1g"})
    assert conf["spark.driver.extraJavaOptions"] == "-Xmx1g"
