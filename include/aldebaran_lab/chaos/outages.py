"""`aldebaran chaos outages`: stop Kafka (30 s) and MinIO (60 s) in the middle of a stream and restart them.
With `--signal kill` the same outages are injected with SIGKILL to the service's process group instead of a
graceful stop (no controlled shutdown of the broker, no flush by MinIO); that run's table is `outages-sigkill`.

The shared services are never touched: the campaign starts its own Kafka and MinIO (the same service
classes as `aldebaran services up`) under a private run directory on other ports (19092/19093, 19000),
points the auditor at them through ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS / ALDEBARAN_S3_ENDPOINT_URL, and
stops them by PID at the end.

One auditor run (s3a:// checkpoint on the private MinIO) goes through the outages in turn:
    1. a first part of the original mix is produced; the auditor starts and commits a first batch;
    2. per outage: the service is stopped for `down` seconds (MinIO: the next part is produced meanwhile).
       If the auditor dies of it, the campaign acts as its supervisor: restarts it, 5 s back-off;
       the service is started again (Kafka: the next part is produced now); recovery time = from the
       service being healthy again to the auditor's next committed batch; then it catches up;
    3. the auditor stops cleanly and its alerts are compared with the reference.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

from aldebaran.audit import reference
from aldebaran.runtime import paths
from aldebaran.kafka import io as kio
from aldebaran_capacity import loadgen
from aldebaran_lab.chaos.common import (
    AuditorProcess, CampaignResult, ChaosError, Workspace, auditor_args, caught_up, compare_alerts, committed,
    topic_alerts, wait_for,
)

log = logging.getLogger(__name__)

TTL_SECONDS = 86_400.0
PRIVATE_PORTS = {"kafka": 19092, "kafka_controller": 19093, "minio": 19000}


@contextlib.contextmanager
def private_services(run_dir: Path | None = None, ports: dict[str, int] | None = None) -> Iterator[dict]:
    """A Kafka and a MinIO of our own (own run dir, own ports: PRIVATE_PORTS unless `ports` says
    otherwise); this process's environment points at them while the context is open.
    Yields {"kafka": Kafka, "minio": MinIO, "run_dir": Path}."""
    from aldebaran_lab.services.kafka import Kafka
    from aldebaran_lab.services.minio import MinIO

    ports = {**PRIVATE_PORTS, **(ports or {})}
    run_dir = run_dir or Path(tempfile.mkdtemp(prefix="chaos-private-", dir=paths.run_dir()))
    overrides = {
        "ALDEBARAN_RUN_DIR": str(run_dir),
        "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{ports['kafka']}",
        "ALDEBARAN_S3_ENDPOINT_URL": f"http://127.0.0.1:{ports['minio']}",
        "ALDEBARAN_KAFKA_HEAP": "-Xmx512m",
        # Plaintext only: the shared broker's SASL_SSL listener holds its port (9094).
        "ALDEBARAN_KAFKA_SECURE_PORT": "0",
    }
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    started = []
    try:
        kafka, minio = Kafka(), MinIO()
        kafka.controller_port = ports["kafka_controller"]
        for svc in (minio, kafka):
            if svc.healthy() and not svc.running():
                raise ChaosError(f"port {svc.address} is taken by something else: cannot start a private {svc.name}")
            svc.start()
            started.append(svc)
        log.info("private services up under %s: kafka %s, minio %s", run_dir, kafka.address, minio.address)
        yield {"kafka": kafka, "minio": minio, "run_dir": run_dir}
    finally:
        for svc in reversed(started):
            svc.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def scenario(outages: list[tuple[object, float]], events: int, seed: int, kill: bool = False) -> list[dict]:
    """One auditor run through several outages in turn: [(service, seconds down), ...] → a row per outage.
    `kill`: SIGKILL the service's process group instead of stopping it."""
    ws = Workspace.create("outages", s3a=True)
    recs = list(loadgen.records(loadgen.original_mix(max(2, events // 5), seed)))
    parts = len(outages) + 1
    cut = [len(recs) * i // parts // 5 * 5 for i in range(parts)] + [len(recs)]  # whole orders per part
    chunks = [recs[cut[i]:cut[i + 1]] for i in range(parts)]
    values = [r.value for r in recs]
    expected = reference.expected_alerts(values, ttl_ms=int(TTL_SECONDS * 1000))

    def produce(part) -> None:
        kio.produce_all(kio.producer(ws.kafka), ws.kafka.trades_topic, [(r.key, r.value) for r in part])

    auditor = AuditorProcess(ws.env(), auditor_args(ws, max_offsets=max(200, events // 10), ttl_seconds=TTL_SECONDS),
                             ws.logs / "auditor.log")
    deaths: list[str] = []
    last_start = [0.0]

    def supervise() -> None:
        if not auditor.alive() and time.monotonic() - last_start[0] > 5:
            deaths.append(f"rc {auditor.returncode()}")
            log.info("auditor exited (rc %s); supervisor restarts it", auditor.returncode())
            auditor.start()
            last_start[0] = time.monotonic()

    rows = []
    try:
        produce(chunks[0])
        auditor.start()
        last_start[0] = time.monotonic()
        wait_for(lambda: committed(ws)[0] > 0, 600, 0.5, "first batch", on_tick=supervise)
        for (service, down), chunk in zip(outages, chunks[1:]):
            deaths_before = len(deaths)
            if kill:
                service.kill()
            else:
                service.stop()
            t_down = time.monotonic()
            log.info("%s %s for %.0fs", service.name, "SIGKILLed" if kill else "stopped", down)
            if service.name != "kafka":
                produce(chunk)  # the stream goes on while the object store is away
            while time.monotonic() - t_down < down:
                supervise()
                time.sleep(1)
            service.start()
            t_up = time.monotonic()
            n_up = committed(ws)[0]
            if service.name == "kafka":
                produce(chunk)
            recovery = wait_for(lambda: auditor.alive() and committed(ws)[0] > n_up, 600, 0.5,
                                f"a batch after {service.name} came back", on_tick=supervise)
            ends = kio.end_offsets(ws.kafka, ws.kafka.trades_topic)
            wait_for(lambda: caught_up(ws, ends), 600, 1.0, "auditor caught up", on_tick=supervise)
            how = "SIGKILLed, down" if kill else "stopped"
            rows.append({"scenario": f"{service.name} {how} {down:.0f} s", "faults": 1,
                         "recovery": f"{recovery:.1f} s (from {service.name} healthy again, {t_up - t_down:.0f} s "
                                     "after the stop, to the next committed batch)",
                         "recovery_s": recovery, "auditor_restarts": len(deaths) - deaths_before})
        rc = auditor.stop()
        verdict = compare_alerts(topic_alerts(ws.kafka), expected)
        for row in rows:  # one stream through all outages: the alert verdict is the run's
            row.update({"runs": auditor.starts, "lost": len(verdict.missing),
                        "duplicated": f"{verdict.duplicates_raw} repeats on the topic, 0 after dedup by alert id",
                        "auditor_exits": deaths, "final_rc": rc, "alerts_topic": verdict.summary(),
                        "ok": verdict.ok, "events": len(values)})
        return rows
    finally:
        if auditor.alive():
            auditor.kill()
        if all(service.running() for service, _ in outages):
            ws.cleanup()


def run(events: int = 200_000, kafka_down: float = 30.0, minio_down: float = 60.0, seed: int = 1,
        mode: str = "full", which: tuple[str, ...] = ("kafka", "minio"), kill: bool = False) -> CampaignResult:
    t0 = time.monotonic()
    result = CampaignResult("outages-sigkill" if kill else "outages", mode, runs=0, faults=0, lost=0, duplicated=0)
    failures: list[str] = []
    try:
        with private_services() as svcs:
            plan = [(svcs[name], kafka_down if name == "kafka" else minio_down) for name in which]
            for row in scenario(plan, events, seed, kill=kill):
                result.rows.append(row)
                result.faults += 1
                result.recovery_s.append(row["recovery_s"])
                if not row["ok"]:
                    failures.append(f"{row['scenario']}: alerts differ from the reference: {row['alerts_topic']}")
            if result.rows:
                result.runs, result.lost = result.rows[0]["runs"], result.rows[0]["lost"]
    except ChaosError as exc:
        failures.append(str(exc))
        result.lost = -1
    result.details = {"scenarios": [{k: v for k, v in r.items()} for r in result.rows], "failures": failures}
    return result.finish(t0)
