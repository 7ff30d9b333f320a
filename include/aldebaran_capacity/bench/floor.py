"""The floor of a latency segment, measured on the JVM (``jvm/FloorConsumer.java``): the segment's trades read
back by a plain Java consumer as they are produced, each record's arrival minus its send stamp.

It is what the bus alone costs on this box under the same load as the lane. The earlier floor was a consumer
thread in the bench's own Python and measured that interpreter's tail (p99 0.3–0.5 s where Kafka's
EndToEndLatency tool measured 6 ms); the lane's ratio to the floor is only meaningful against a floor that is
not the harness's. Usage::

    with JvmFloor(bootstrap, topic, seconds=25) as floor:
        ...produce the segment...
    floor.samples  # [(timestamp_ms, latency_ms), ...]
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from aldebaran.exceptions import AldebaranError
from aldebaran_capacity.bench import paced


class JvmFloor:
    """A FloorConsumer process for the length of one segment (started positioned at the topic's end)."""

    def __init__(self, bootstrap_servers: str, topic: str, seconds: float, ready_timeout: float = 60.0) -> None:
        self.bootstrap_servers, self.topic, self.seconds = bootstrap_servers, topic, seconds
        self.ready_timeout = ready_timeout
        self.samples: list[tuple[int, int]] = []
        self._tmp = tempfile.TemporaryDirectory(prefix="floor-")
        self._out = Path(self._tmp.name) / "lags.tsv"
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> "JvmFloor":
        classes = paced.compiled()
        self._proc = subprocess.Popen(
            ["java", *paced.JVM_FLAGS, "-cp", f"{paced.classpath()}{os.pathsep}{classes}", "FloorConsumer",
             self.bootstrap_servers, self.topic, str(self.seconds), str(self._out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self._proc.stdout.readline().strip()  # "ready": positioned at the end of every partition
        if line != "ready":
            self._proc.kill()
            raise AldebaranError(f"FloorConsumer did not start: {line!r} {self._proc.stderr.read()[-2000:]}")
        return self

    def __exit__(self, *exc) -> None:
        try:
            out, err = self._proc.communicate(timeout=self.seconds + self.ready_timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            raise AldebaranError(f"FloorConsumer on {self.topic} did not finish in {self.seconds:.0f}s") from None
        if self._proc.returncode != 0:
            raise AldebaranError(f"FloorConsumer exited with {self._proc.returncode}: {err[-2000:]}")
        count = json.loads(out.strip().splitlines()[-1])["count"]
        with open(self._out) as fh:
            self.samples = [(int(a), int(b)) for a, b in (line.split("\t") for line in fh)]
        if len(self.samples) != count:
            raise AldebaranError(f"FloorConsumer reported {count} records, wrote {len(self.samples)}")
        self._tmp.cleanup()
