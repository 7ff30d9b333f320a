"""The cache prune (aldebaran_lab.cache_prune): what no live checkout uses goes, everything a live checkout
uses stays, on a cache and work trees laid out as scripts/setup.sh lays them out."""

from __future__ import annotations

import os
import subprocess

from aldebaran_lab import cache_prune


def make_tree(path, pom=b"<project/>", java=b"class A {}"):
    (path / "setup" / "maven").mkdir(parents=True)
    (path / "setup" / "runtimes").mkdir()
    (path / "include" / "aldebaran" / "jvm").mkdir(parents=True)
    (path / "requirements.txt").write_text("x==1\n")
    (path / "constraints.txt").write_text("y==2\n")
    (path / "setup" / "maven" / "spark-s3a.xml").write_bytes(pom)
    (path / "setup" / "maven" / "settings.xml").write_text("<settings/>")
    (path / "setup" / "runtimes" / "spark-4.3.txt").write_text("pyspark==4.3.0\n")
    (path / "setup" / "versions.env").write_text("MINIO_VERSION=v2\nALERTMANAGER_VERSION=v0.31.1\n")
    (path / "include" / "aldebaran" / "jvm" / "A.java").write_bytes(java)
    return path


def entry(cache, rel, complete=True, tree=None):
    d = cache / rel
    d.mkdir(parents=True)
    (d / "payload").write_bytes(b"x" * 2048)
    if complete:
        (d / ".complete").touch()
    if tree is not None:
        (d / ".tree").write_text(str(tree))
    return d


def test_prunes_what_no_live_checkout_uses_and_keeps_the_rest(tmp_path):
    cache = tmp_path / "cache"
    here = make_tree(tmp_path / "here")
    other = make_tree(tmp_path / "other", pom=b"<project>old</project>")  # a live clone on older pins
    gone = tmp_path / "gone"  # a CI clone since deleted
    keep = set()
    for tree in (here, other):
        venv = entry(cache, f"venv/{cache_prune.venv_key(tree)}", tree=tree)
        (tree / ".venv").symlink_to(venv)
        keep |= {cache / rel for rel in cache_prune.wanted(tree)}
        keep.add(venv)
    for rel in keep - {v for v in keep if v.parent.name == "venv"}:
        entry(cache, rel.relative_to(cache))
    gone_venv = entry(cache, "venv/aaaaaaaaaaaa", tree=gone)
    stale_venv = entry(cache, "venv/bbbbbbbbbbbb", tree=here)  # here's .venv links to its newer venv
    building = entry(cache, "venv/cccccccccccc", complete=False, tree=here)  # another setup making it now
    unknown = entry(cache, "venv/dddddddddddd")  # no .tree, no editable install: whose is unknown
    old = [entry(cache, p) for p in ("jars/spark-s3a-000000000000", "runtimes/spark-4.3-000000000000",
                                      "wheels/000000000000", "minio/v1", "alertmanager/v0.30.0",
                                      "jars/aldebaran-jvm-000000000000")]
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = entry(cache, f"jars/spark-s3a-111111111111.tmp.{dead.pid}", complete=False)
    staging = entry(cache, f"jars/spark-s3a-222222222222.tmp.{os.getpid()}", complete=False)

    pruned, live = cache_prune.plan(cache, root=here)
    assert {p for p, _ in pruned} == {gone_venv, stale_venv, left, *old}
    assert set(live) == {here.resolve(), other.resolve()}

    assert cache_prune.main(["--cache", str(cache)]) == 0
    for path in (gone_venv, stale_venv, left, *old):
        assert not path.exists(), path
    for path in (*keep, building, unknown, staging):
        assert (path / "payload").exists(), path
    assert cache_prune.plan(cache, root=here)[0] == []


def test_dry_run_deletes_nothing_and_says_how_much(tmp_path, capsys):
    cache = tmp_path / "cache"
    old = entry(cache, "jars/spark-s3a-000000000000")
    assert cache_prune.main(["--cache", str(cache), "--dry-run"]) == 0
    assert old.exists()
    out = capsys.readouterr().out
    assert f"would prune {old}" in out and "1 entries would free" in out


def test_bench_shared_python_goes_with_its_runtime(tmp_path):
    cache = tmp_path / "cache"
    here = make_tree(tmp_path / "here")
    venv = entry(cache, f"venv/{cache_prune.venv_key(here)}", tree=here)
    (here / ".venv").symlink_to(venv)
    runtime = next(rel for rel in cache_prune.wanted(here) if rel.startswith("runtimes/"))
    entry(cache, runtime)
    current = entry(cache, f"bench-shared/{runtime.removeprefix('runtimes/')}")
    stale = entry(cache, "bench-shared/spark-4.3-000000000000")  # built on a runtime no pin names any more

    pruned, _ = cache_prune.plan(cache, root=here)
    assert {p for p, _ in pruned} == {stale}
    assert cache_prune.main(["--cache", str(cache)]) == 0
    assert not stale.exists() and (current / "payload").exists()


def test_a_class_data_archive_goes_with_the_pyspark_it_maps(tmp_path):
    from aldebaran_lab.spark_cds import archive_key

    cache = tmp_path / "cache"
    here = make_tree(tmp_path / "here")
    venv = entry(cache, f"venv/{cache_prune.venv_key(here)}", tree=here)
    (here / ".venv").symlink_to(venv)
    jars = venv / "lib" / "python3.11" / "site-packages" / "pyspark" / "jars"
    jars.mkdir(parents=True)
    (jars / "spark-core.jar").write_bytes(b"x" * 10)
    (cache / "cds").mkdir()
    current = cache / "cds" / f"{archive_key(jars.parent)}.jsa"
    current.write_bytes(b"a" * 100)
    (jars / "spark-core.jar").write_bytes(b"x" * 11)  # the jar set changed: a new key
    newer = cache / "cds" / f"{archive_key(jars.parent)}.jsa"
    newer.write_bytes(b"b" * 100)
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = cache / "cds" / f"{newer.name}.tmp.{dead.pid}"
    left.write_bytes(b"c")

    pruned, _ = cache_prune.plan(cache, root=here)
    assert {p for p, _ in pruned} == {current, left}
    assert cache_prune.main(["--cache", str(cache)]) == 0
    assert not current.exists() and not left.exists() and newer.read_bytes() == b"b" * 100
