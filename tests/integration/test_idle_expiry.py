"""The idle rule on real Kafka, MinIO and Spark: a streaming auditor on a quiet topic runs no micro-batch
between expiry periods (ALDEBARAN_AUDIT_EXPIRY_PERIOD_SECONDS), and still expires a book on time — an
ORPHAN is raised on an idle stream within ttl + idle grace + one period of the book's opening."""

from __future__ import annotations

import json
import re
import threading
import time

from aldebaran.audit import parse
from aldebaran.audit.settings import AuditorSettings
from aldebaran.audit.sparkjob import job
from aldebaran.kafka import io as kio
from aldebaran.settings import load
from aldebaran_capacity import loadgen
from tests.conftest import assert_eventually

PERIOD_S = 4.0
TTL_S, GRACE_S = 2.0, 1.0


def test_an_idle_auditor_runs_one_batch_per_expiry_period_and_still_expires_books(
        spark, kafka_topics, checkpoint, s3_prefix, unique):
    batches: list[tuple[float, dict]] = []
    failed: list[BaseException] = []
    settings = load(AuditorSettings, checkpoint=checkpoint, trigger="processing-time",
                    expiry_period_seconds=PERIOD_S, ttl_seconds=TTL_S, idle_grace_seconds=GRACE_S,
                    archive_prefix=f"{s3_prefix}/archive", query_name=f"idle-{unique}", timeout_seconds=120)

    def run() -> None:
        try:
            job.run(settings, spark=spark, on_batch=lambda figures: batches.append((time.monotonic(), figures)))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
            failed.append(exc)

    thread = threading.Thread(target=run, name="idle-auditor")
    thread.start()
    try:
        # Quiet topic: the first batch comes from the expiry clock, not from data.
        assert_eventually(lambda: bool(failed or batches), 60, interval=0.5,
                          message="the auditor's first (clock) batch")
        assert not failed, failed
        # An order with purchases and no request: an ORPHAN once its book expires (no later event will come).
        recs = list(loadgen.records(iter([parse.purchase("idle-p1", "IDLE", 30)])))
        kio.produce_all(kio.producer(kafka_topics), kafka_topics.trades_topic,
                             [(r.key, r.value) for r in recs])
        sent = time.monotonic()

        def orphan() -> dict:
            assert not failed, failed
            got = [json.loads(m.value()) for m in kio.read_topic(kafka_topics, kafka_topics.alerts_topic)]
            assert [(a["kind"], a["order_id"]) for a in got] == [("ORPHAN", "IDLE")], got
            return got[0]

        assert_eventually(orphan, 60, interval=1.0, message="the idle book's ORPHAN")
        raised_after = time.monotonic() - sent
        # On time: after ttl + grace of processing time, within one more period (+ a batch and the read).
        assert raised_after >= TTL_S + GRACE_S - 0.5
        assert raised_after <= TTL_S + GRACE_S + PERIOD_S + 15, raised_after

        # Now idle: count the batches over three periods. The old 1-row/s tick ran one a second (~12 here);
        # the expiry clock runs one per period (3, or 4 when the window straddles a boundary).
        start = time.monotonic()
        time.sleep(3 * PERIOD_S)
        idle = [f for t, f in batches if t >= start]
        assert 2 <= len(idle) <= 4, [f["batch_id"] for f in idle]
        assert all(f["applied"] == 0 and f["alerts"] == 0 for f in idle)
        # ... and consecutive idle batches are about a period apart, never back to back.
        times = [t for t, _ in batches if t >= start]
        assert all(b - a >= PERIOD_S * 0.5 for a, b in zip(times, times[1:])), times
    finally:
        for active in spark.streams.active:
            if active.name == settings.query_name:
                active.stop()
        thread.join(60)


def test_the_clock_source_ticks_once_per_period_and_resumes_its_checkpoint(spark, tmp_path, unique):
    """The clock alone (io.aldebaran.spark.TickSource, a JVM source): one row per period whose timestamp is the
    period's boundary, no batch without a new period, the offsets written as ``{"tick": N}`` (the text the
    Python source it replaced wrote, as in the demo's checkpoint of 2026-11-29, so such a checkpoint resumes),
    and a restart on the checkpoint ticks on from where it stopped."""
    from aldebaran.audit.sparkjob.ticks import tick_stream

    period = 1.0
    checkpoint = tmp_path / "ticks-checkpoint"
    rows: list[tuple[int, list]] = []

    def collect(df, batch_id: int) -> None:
        rows.append((batch_id, [r.timestamp for r in df.collect()]))

    def run_for(seconds: float) -> None:
        query = (tick_stream(spark, period).writeStream.queryName(f"ticks-{unique}-{len(rows)}")
                 .option("checkpointLocation", str(checkpoint)).foreachBatch(collect)
                 .trigger(processingTime="100 milliseconds").start())
        try:
            time.sleep(seconds)
            assert query.exception() is None, query.exception()
        finally:
            query.stop()

    started = time.time()
    run_for(3.5)
    first_run = list(rows)
    # Batch 0 covers the range from the initial offset to a later tick (or none yet); then one per period.
    assert 2 <= len(first_run) <= 5, first_run
    assert all(len(ts) <= 1 for _, ts in first_run), first_run
    stamps = [ts[0].timestamp() for _, ts in first_run if ts]
    assert stamps and all(abs(s - round(s / period) * period) < 1e-3 for s in stamps), stamps
    assert stamps == sorted(set(stamps)) and all(started - period <= s <= time.time() for s in stamps), stamps
    offsets = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    assert re.fullmatch(r'\{"tick": \d+\}', offsets[-1].read_text().splitlines()[-1])

    run_for(2.5)
    # The same query resumed: on from the last batch (run again if the stop came before its commit).
    last_id = first_run[-1][0]
    assert rows[len(first_run)][0] in (last_id, last_id + 1), rows
    later = [ts[0].timestamp() for batch_id, ts in rows[len(first_run):] if batch_id > last_id and ts]
    assert later and min(later) > max(stamps), (stamps, later)
