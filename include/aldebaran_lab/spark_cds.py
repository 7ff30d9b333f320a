"""Class-data sharing (AppCDS) for the test suite's short-lived Spark drivers.

Every integration test that starts an auditor, a lane or a replay starts a Spark driver JVM, and on 2 cores
most of a driver's first seconds go to loading and verifying Spark's ~20,000 classes. A dynamic CDS archive
(JDK 13+: ``-XX:ArchiveClassesAtExit`` once, then ``-XX:SharedArchiveFile``) maps them in ready-made. The
measurements that justify it are in docs/operations.md ("Notes on the toolchain").

How it is used: ``scripts/test.sh`` runs ``python -m aldebaran_lab.spark_cds`` before the services start. It
builds the archive once per JDK and pyspark (cached under ``~/.cache/aldebaran/cds/<key>.jsa``; ~40 s, with
progress on stderr) and prints the ``SPARK_SUBMIT_OPTS`` for the suite's drivers: the JIT's first tier and
the serial collector (the drivers live a minute or two) and the archive. spark-submit puts
``SPARK_SUBMIT_OPTS`` on the driver's command line in client mode, and pyspark's sessions start through
spark-submit, so every driver the suite starts (tests, the services' tasks) gets them.

What the JDK requires, and why it is done this way:

- The archive is valid only for the classpath it was written with, and refuses a **non-empty directory** on
  it. spark-submit puts ``SPARK_CONF_DIR`` first on the driver's classpath, so the options travel in
  ``SPARK_SUBMIT_OPTS`` and the suite sets no ``SPARK_CONF_DIR``. (The pip-installed pyspark has no
  ``conf/`` directory; one that exists and is not empty only turns the archive off.)
- Only classes of the JDK's own loaders are archived: Spark's jars, not the ``spark.jars`` (Kafka, s3a)
  that Spark loads itself.
- A JVM whose classpath does not match (the lane's Spark 4.3 runtime) runs without the archive: the
  ``-Xlog`` options keep that silent, and ``-Xshare:auto`` (the default) never fails a start over it.

This is the lab's: the product's drivers run with the platform's own JVM options (aldebaran.runtime.spark).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from aldebaran.runtime import paths

# The suite's drivers live a minute or two: C2 compiles for minutes after a start and mostly pays off after
# the JVM has gone (docs/operations.md, "Notes on the toolchain").
SHORT_LIVED = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:class+path=off"
TRAIN = Path(__file__).with_name("spark_cds_train.py")


def _spark_home() -> Path:
    from aldebaran.runtime.spark import spark_home

    return Path(spark_home())


def _java() -> str:
    home = os.environ.get("JAVA_HOME")  # not configuration: the JDK spark-class itself picks
    return str(Path(home) / "bin" / "java") if home else "java"


def archive_key(spark_home: Path) -> str:
    """The JDK's version and the exact jar set of this pyspark (names and sizes): either changing makes a
    new archive, the old one left for ``make clean-cache``."""
    version = subprocess.run([_java(), "-version"], capture_output=True, text=True, check=True).stderr
    jars = sorted((p.name, p.stat().st_size) for p in (spark_home / "jars").glob("*.jar"))
    blob = "\n".join([version, str(spark_home.resolve()), *(f"{n} {s}" for n, s in jars)])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def archive_path(spark_home: Path | None = None) -> Path:
    home = spark_home or _spark_home()
    return paths.cache_dir() / "cds" / f"{archive_key(home)}.jsa"


def submit_opts(archive: Path | None) -> str:
    """``SPARK_SUBMIT_OPTS`` for the suite's drivers: short-lived JIT settings, and the archive if there is
    one."""
    if archive is None or not archive.is_file():
        return SHORT_LIVED
    return f"{SHORT_LIVED} -XX:SharedArchiveFile={archive} {QUIET}"


def _say(message: str) -> None:
    print(f"spark-cds: {message}", file=sys.stderr, flush=True)


def build(archive: Path, timeout: float = 600.0) -> None:
    """Write `archive` by running a small Spark job (batch SQL, a streaming query with foreachBatch and
    mapInArrow) with ``-XX:ArchiveClassesAtExit``. Written to a temporary name, then renamed: a reader never
    maps a half-written file, and two builders do not clash."""
    from aldebaran.runtime.spark import spark_env

    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f"{archive.name}.tmp.{os.getpid()}")
    env = spark_env(master="local[1]")
    env.pop("SPARK_CONF_DIR", None)  # a non-empty one on the classpath refuses the archive (module docstring)
    env["SPARK_SUBMIT_OPTS"] = f"{SHORT_LIVED} -XX:ArchiveClassesAtExit={tmp} {QUIET}"
    cmd = [str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"), "--master", "local[1]",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.driver.bindAddress=127.0.0.1", str(TRAIN)]
    _say(f"writing the class-data archive {archive} (once per JDK and pyspark, ~40 s)")
    started = time.monotonic()
    log = paths.run_dir() / "logs" / "spark-cds.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"spark-cds: the training job exited {proc.returncode} without an archive; see {log}")
    tmp.rename(archive)
    _say(f"archive written in {time.monotonic() - started:.0f} s ({archive.stat().st_size / 1e6:.0f} MB)")


def ensure() -> Path | None:
    """The archive for this JDK and pyspark, built if missing. None (and a warning) when it cannot be built:
    the suite then runs without it, slower but the same."""
    archive = archive_path()
    if archive.is_file():
        return archive
    try:
        build(archive)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        _say(f"no archive, the suite's drivers start without it: {exc}")
        return None
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aldebaran_lab.spark_cds", description=__doc__.split("\n")[0])
    parser.add_argument("--no-build", action="store_true", help="use the archive only if it is already there")
    args = parser.parse_args(argv)
    archive = archive_path() if args.no_build else ensure()
    print(submit_opts(archive))
    return 0


if __name__ == "__main__":
    sys.exit(main())
