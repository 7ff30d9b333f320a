"""The settings that used to be raw environment reads (paths, Spark): defaults, overrides, and an
invalid value failing at start with a ConfigError naming its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from aldebaran import paths, spark
from aldebaran.exceptions import ConfigError
from aldebaran.settings import SparkSettings, load


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("ALDEBARAN_RUN_DIR", "ALDEBARAN_CACHE", "ALDEBARAN_ENV_FILE", "ALDEBARAN_SPARK_MASTER",
                 "ALDEBARAN_SPARK_LOG_LEVEL", "ALDEBARAN_SPARK_UI"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_paths_default_to_the_work_tree_and_the_home_cache(clean_env):
    assert paths.run_dir() == paths.ROOT / ".run"
    assert paths.env_file() == paths.ROOT / ".env"
    assert paths.cache_dir() == Path.home() / ".cache" / "aldebaran"


def test_paths_follow_their_variables(clean_env, tmp_path):
    clean_env.setenv("ALDEBARAN_RUN_DIR", str(tmp_path / "run"))
    clean_env.setenv("ALDEBARAN_CACHE", str(tmp_path / "cache"))
    clean_env.setenv("ALDEBARAN_ENV_FILE", str(tmp_path / "my.env"))
    assert paths.run_dir() == tmp_path / "run"
    assert paths.cache_dir() == tmp_path / "cache"
    assert paths.env_file() == tmp_path / "my.env"


def test_an_empty_path_variable_means_the_default_not_the_current_directory(clean_env):
    clean_env.setenv("ALDEBARAN_RUN_DIR", "")
    assert paths.run_dir() == paths.ROOT / ".run"


def test_spark_settings_defaults(clean_env):
    settings = load(SparkSettings)
    assert (settings.master, settings.log_level, settings.ui) == ("local[2]", "WARN", False)


def test_spark_log_level_is_case_insensitive(clean_env):
    clean_env.setenv("ALDEBARAN_SPARK_LOG_LEVEL", "info")
    assert load(SparkSettings).log_level == "INFO"


def test_an_unknown_spark_log_level_names_the_variable(clean_env):
    clean_env.setenv("ALDEBARAN_SPARK_LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigError, match=r"^invalid settings: ALDEBARAN_SPARK_LOG_LEVEL: .*\(got 'LOUD'\)$"):
        load(SparkSettings)


def test_a_spark_ui_that_is_not_a_boolean_names_the_variable(clean_env):
    clean_env.setenv("ALDEBARAN_SPARK_UI", "sometimes")
    with pytest.raises(ConfigError, match=r"^invalid settings: ALDEBARAN_SPARK_UI: .*\(got 'sometimes'\)$"):
        load(SparkSettings)


def test_an_empty_spark_master_names_the_variable(clean_env):
    clean_env.setenv("ALDEBARAN_SPARK_MASTER", "")
    with pytest.raises(ConfigError, match=r"^invalid settings: ALDEBARAN_SPARK_MASTER: "):
        load(SparkSettings)


def test_session_fails_on_an_invalid_setting_before_spark_starts(clean_env):
    # The check runs before pyspark is imported or a JVM launched: no session is built here.
    clean_env.setenv("ALDEBARAN_SPARK_LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigError, match="ALDEBARAN_SPARK_LOG_LEVEL"):
        spark.session("never-started")


def test_the_spark_ui_setting_reaches_the_session_conf(clean_env):
    assert spark.base_conf()["spark.ui.enabled"] == "false"
    clean_env.setenv("ALDEBARAN_SPARK_UI", "true")
    assert spark.base_conf()["spark.ui.enabled"] == "true"
