"""A paced producer on the JVM for latency benchmarks (``jvm/PacedProducer.java``).

Why a hand-written producer: trades paced from Python (confluent-kafka, :func:`aldebaran_capacity.loadgen.send`)
reached a plain consumer with a p99 of 221–813 ms at 1k–50k events/s on this box, where Kafka's own
end-to-end tool measured 6 ms in the same session (docs/design.md, "The low-latency lane"): the tail was the
harness's. The Java client paces from one thread with ``parkNanos`` and stamps each record as it sends it.
``aldebaran bench low-latency`` measures both producers' floors side by side (``--producer``).

It is compiled once per source into ``<cache>/bench-jvm/<hash>/`` with the JDK ``make setup`` checks,
against the Kafka jars ``make setup`` resolves (the broker's set includes kafka-clients).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.exceptions import AldebaranError
from aldebaran_capacity import loadgen

JVM_DIR = Path(__file__).with_name("jvm")
# The bench's JVMs share the 2-core box with the lane they measure: the client compiler only (the C2 compiler's
# threads took most of a core over a 10 s segment), a small heap, the serial collector (no GC threads).
# The Java client's default since Kafka 4.0 (and librdkafka's): a user's producer. With 0, every record was a
# request of its own: the producer and the broker took ~1.2 cores at 10k events/s where 5 ms takes ~0.3
# (docs/design.md, "The low-latency lane"), CPU the lane under test did not have.
LINGER_MS = 5
JVM_FLAGS = ("-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:CICompilerCount=1")


def classpath() -> str:
    jars = paths.jars("kafka-broker")
    if not any(j.name.startswith("kafka-clients-") for j in jars):
        raise AldebaranError(f"no kafka-clients jar in {paths.jar_dir('kafka-broker')}: run `make setup`")
    return os.pathsep.join(str(j) for j in jars)


def compiled() -> Path:
    """The directory holding the bench's Java classes (jvm/*.java), compiled now if these sources were not
    compiled before."""
    sources = sorted(JVM_DIR.glob("*.java"))
    digest = hashlib.sha256(b"".join(s.read_bytes() for s in sources)).hexdigest()[:12]
    out = paths.cache_dir() / "bench-jvm" / digest
    if not all((out / f"{s.stem}.class").exists() for s in sources):
        out.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["javac", "-d", str(out), "-cp", classpath(), *map(str, sources)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise AldebaranError(f"javac {JVM_DIR}/*.java failed:\n{done.stderr[-2000:]}")
    return out


def send(recs: list[loadgen.Record], topic: str, rate: float, bootstrap_servers: str,
         linger_ms: int = LINGER_MS) -> loadgen.Sent:
    """Produce `recs` to `topic` at `rate` records/s from a JVM; their send stamps come back in the result."""
    classes = compiled()
    with tempfile.TemporaryDirectory(prefix="paced-") as tmp:
        records, stamps = Path(tmp) / "records.tsv", Path(tmp) / "stamps.txt"
        with open(records, "wb") as fh:
            for r in recs:
                fh.write(r.key + b"\t" + r.value + b"\n")
        done = subprocess.run(
            ["java", *JVM_FLAGS, "-cp", f"{classpath()}{os.pathsep}{classes}", "PacedProducer", bootstrap_servers,
             topic, str(rate), str(records), str(stamps), str(linger_ms)],
            capture_output=True, text=True)
        if done.returncode != 0:
            raise AldebaranError(f"PacedProducer exited with {done.returncode}:\n{done.stderr[-2000:]}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        if summary["errors"]:
            raise AldebaranError(f"PacedProducer: {summary['errors']} of {summary['count']} sends failed")
        times = [int(line) for line in stamps.read_text().split()]
    return loadgen.Sent(summary["count"], summary["seconds"], times)
