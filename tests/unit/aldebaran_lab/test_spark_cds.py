"""The test suite's class-data archive (aldebaran_lab.spark_cds): which options a driver gets, and when an
archive is stale. That a driver maps it, and what it saves, is measured (docs/operations.md), not tested."""

from __future__ import annotations

from aldebaran_lab import spark_cds


def test_without_an_archive_the_drivers_get_only_the_short_lived_jit_settings(tmp_path):
    assert spark_cds.submit_opts(None) == spark_cds.SHORT_LIVED
    assert spark_cds.submit_opts(tmp_path / "missing.jsa") == spark_cds.SHORT_LIVED


def test_with_an_archive_the_drivers_map_it_and_a_mismatch_stays_quiet(tmp_path):
    archive = tmp_path / "a.jsa"
    archive.write_bytes(b"x")
    opts = spark_cds.submit_opts(archive).split()
    assert opts[:2] == spark_cds.SHORT_LIVED.split()
    assert f"-XX:SharedArchiveFile={archive}" in opts
    assert "-Xlog:cds=off" in opts  # another runtime's driver (the lane's) runs without it, silently
    assert not any(o.startswith("-XX:ArchiveClassesAtExit") or o == "-Xshare:on" for o in opts)


def test_the_key_follows_the_jar_set(tmp_path):
    home = tmp_path / "pyspark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "a.jar").write_bytes(b"1")
    first = spark_cds.archive_key(home)
    assert spark_cds.archive_key(home) == first
    (home / "jars" / "b.jar").write_bytes(b"2")
    assert spark_cds.archive_key(home) != first
    (home / "jars" / "b.jar").unlink()
    (home / "jars" / "a.jar").write_bytes(b"11")  # same name, another build
    assert spark_cds.archive_key(home) not in (first,)


def test_a_failed_build_leaves_no_archive_and_the_suite_runs_without_one(tmp_path, monkeypatch, capsys):
    from aldebaran.runtime import paths

    monkeypatch.setattr(paths, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(paths, "run_dir", lambda: tmp_path / "run")
    monkeypatch.setattr(spark_cds, "TRAIN", tmp_path / "no-such-job.py")  # spark-submit fails on it
    assert spark_cds.ensure() is None
    assert not list((tmp_path / "cache" / "cds").glob("*"))
    assert "no archive" in capsys.readouterr().err
