"""The settings that used to be raw environment reads (paths, Spark): defaults, overrides, and an
invalid value failing at start with a ConfigError naming its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from aldebaran.runtime import paths, spark
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


# --- no configuration read around the settings classes -------------------------------------------------
ROOT = paths.ROOT
# Product code whose raw reads are still to move into settings (none left).
PENDING: tuple[str, ...] = ()


def _environment_reads(path: Path) -> list[int]:
    """Lines that read os.environ / os.getenv (setting a variable, os.environ.setdefault, is no read)."""
    import ast

    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
                and isinstance(node.value, ast.Name) and node.value.id == "os"):
            parent = parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.attr == "setdefault":
                continue
            if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, (ast.Store, ast.Del)):
                continue
            lines.append(node.lineno)
    return lines


def test_product_code_reads_the_environment_only_where_it_says_it_is_not_configuration():
    files = [p for pattern in ("include/aldebaran/**/*.py", "dags/*.py", "plugins/*.py", "spark_apps/*.py")
             for p in ROOT.glob(pattern)]
    assert len(files) > 30  # the scan itself found the package
    unexplained = []
    for path in sorted(files):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(PENDING):
            continue
        source = path.read_text().splitlines()
        for line in _environment_reads(path):
            said = " ".join(source[max(0, line - 2):line]).lower()
            if "not configuration" not in said:
                unexplained.append(f"{rel}:{line}: {source[line - 1].strip()}")
    assert not unexplained, ("configuration belongs in a pydantic-settings class (aldebaran.settings); another "
                             "environment read says '# not configuration: why' on its line or the one above: "
                             + "; ".join(unexplained))


def test_a_bad_wakeup_interval_names_its_setting(monkeypatch):
    from aldebaran.delivery import wakeup

    monkeypatch.setattr(wakeup, "_interval", None)
    monkeypatch.setenv("ALDEBARAN_DISPATCH_WAKEUP_SECONDS", "soon")
    with pytest.raises(ConfigError, match="ALDEBARAN_DISPATCH_WAKEUP_SECONDS"):
        wakeup.interval()
    monkeypatch.setenv("ALDEBARAN_DISPATCH_WAKEUP_SECONDS", "0.5")
    assert wakeup.interval() == 0.5


def test_expire_at_end_without_a_bounded_trigger_names_both_settings(clean_env):
    from aldebaran.audit.settings import AuditorSettings

    clean_env.setenv("ALDEBARAN_AUDIT_EXPIRE_AT_END", "true")
    with pytest.raises(ConfigError, match=r"ALDEBARAN_AUDIT_EXPIRE_AT_END needs ALDEBARAN_AUDIT_TRIGGER=available-now"):
        load(AuditorSettings)
    clean_env.setenv("ALDEBARAN_AUDIT_TRIGGER", "available-now")
    assert load(AuditorSettings).expire_at_end is True
