"""The platform's own JVM classes (the ``*.java`` beside this file), built into one jar for Spark's classpath.

Two classes: ``io.aldebaran.spark.ObjectStoreCheckpointFileManager``, the checkpoint file manager of a query
whose checkpoint is on an object store, and ``io.aldebaran.spark.TickSource``, the auditor's expiry clock (see
their javadoc). The jar is compiled once per source text into
``<cache>/jars/aldebaran-jvm-<hash>/aldebaran-jvm.jar`` (``make setup`` builds it; a process that finds it
missing builds it then), against the classpath the caller gives (pyspark's jars and the s3a set)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.exceptions import SetupError

SOURCES = Path(__file__).parent
JAR_NAME = "aldebaran-jvm.jar"
CHECKPOINT_MANAGER = "io.aldebaran.spark.ObjectStoreCheckpointFileManager"


def _digest(sources: list[Path]) -> str:
    h = hashlib.sha256()
    for s in sources:
        h.update(s.name.encode() + b"\0" + s.read_bytes())
    return h.hexdigest()[:12]


def platform_jar(classpath: list[Path | str]) -> Path:
    """The jar of this directory's classes, compiled now against `classpath` if these sources never were.
    Concurrent callers are safe: each compiles into a temporary directory and the jar is renamed into place."""
    sources = sorted(SOURCES.glob("*.java"))
    out_dir = paths.cache_dir() / "jars" / f"aldebaran-jvm-{_digest(sources)}"
    jar = out_dir / JAR_NAME
    if jar.is_file():
        return jar
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="aldebaran-jvm-", dir=out_dir) as tmp:
        classes = Path(tmp) / "classes"
        done = subprocess.run(["javac", "--release", "17", "-nowarn", "-d", str(classes),
                               "-cp", os.pathsep.join(str(c) for c in classpath), *map(str, sources)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SetupError(f"javac {SOURCES}/*.java failed (is a JDK 17 on PATH? `make setup` checks):\n"
                             f"{done.stderr[-2000:]}")
        staged = Path(tmp) / JAR_NAME
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: aldebaran\n\n")
            for f in sorted(classes.rglob("*.class")):
                z.write(f, f.relative_to(classes).as_posix())
        os.replace(staged, jar)
    return jar
