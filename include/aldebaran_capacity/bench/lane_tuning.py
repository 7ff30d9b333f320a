"""`aldebaran bench lane-tuning`: the low-latency lane's settings, each A/B against the lane as shipped, in
interleaved rounds on one box.

    aldebaran bench lane-tuning [--variants baseline,flush-10,...] [--repeats 3] [--rates 10000,1000]
                                [--seconds 10] [--warmup-seconds 8] [--report [--merge]]

A round starts the lane once per variant, in a new order each round, and measures each rate after a warm-up
(aldebaran_capacity.bench.low_latency.measure: the same segment, floor and box state as the lane's own
bench). Interleaving is the point: the box drifts over minutes (a task wakes, the page cache fills), and a
variant measured in a block of its own would carry that drift as its effect. Each variant differs from the
baseline in one setting; the medians over the rounds and every round's figure go to ``low_latency.tuning``
of docs/img/bench-results.json and a table in docs/benchmarks.md (``--report``; ``--merge`` adds the run to
the day's earlier ones instead of replacing them).
"""

from __future__ import annotations

import json
import logging
import random
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.runtime import spark as sparkmod
from aldebaran.exceptions import AldebaranError
from aldebaran.lanes.launch import MASTER, Lane
from aldebaran_capacity.bench.low_latency import JVM_OPTS

log = logging.getLogger(__name__)

FLUSH = "spark.shuffle.streaming.networkBufferMaxWaitTimeMs"


@dataclass(frozen=True)
class Variant:
    name: str
    setting: str  # what differs from the baseline, for the table
    conf: dict = field(default_factory=dict)
    master: str = MASTER
    shuffle_partitions: int = 1
    source_options: dict = field(default_factory=dict)
    driver_memory: str = "1g"
    plan: str | None = None  # a plan variant of bench/lane_app.py
    producer_linger_ms: int | None = None  # the bench's paced producer (None: bench/paced.LINGER_MS), not the lane

    def lane(self, checkpoint: str, trades: str, alerts: str) -> Lane:
        app = (str(Path(__file__).with_name("lane_app.py")), "--variant", self.plan) if self.plan else None
        return Lane(checkpoint=checkpoint, trades_topic=trades, alerts_topic=alerts, master=self.master,
                    driver_memory=self.driver_memory, conf=dict(self.conf), shuffle_partitions=self.shuffle_partitions,
                    source_options=dict(self.source_options), **({"app": app} if app else {}))


VARIANTS = (
    Variant("baseline", "as shipped: local[4], 1 shuffle partition, flush 1 ms, G1, 1 GiB"),
    Variant("flush-10", f"{FLUSH}=10", conf={FLUSH: "10"}),
    Variant("flush-50", f"{FLUSH}=50 (Spark's default)", conf={FLUSH: "50"}),
    Variant("track-rows-off", "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows=false",
            conf={"spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false"}),
    Variant("fetch-wait-10", "Kafka source kafka.fetch.max.wait.ms=10 (default 500)",
            source_options={"kafka.fetch.max.wait.ms": "10"}),
    # The broker answers a fetch as soon as one byte is there (fetch.min.bytes=1): at a trickle, one fetch per
    # record or two. These hold a fetch for 64 KiB or a few ms, whichever comes first (not adopted: design.md §5).
    Variant("fetch-batch-5ms", "Kafka source kafka.fetch.min.bytes=65536, kafka.fetch.max.wait.ms=5",
            source_options={"kafka.fetch.min.bytes": "65536", "kafka.fetch.max.wait.ms": "5"}),
    Variant("fetch-batch-20ms", "Kafka source kafka.fetch.min.bytes=65536, kafka.fetch.max.wait.ms=20",
            source_options={"kafka.fetch.min.bytes": "65536", "kafka.fetch.max.wait.ms": "20"}),
    Variant("one-operator", "no dropDuplicates: the aggregation alone (bench/lane_app.py; the most folding "
                            "the dedupe into it could gain)", plan="no-dedupe"),
    Variant("shuffle-2", "2 shuffle partitions per stateful operator, local[6] (6 long-running tasks)",
            master="local[6]", shuffle_partitions=2),
    Variant("local-8", "local[8]: more slots than the plan's 4 tasks", master="local[8]"),
    Variant("gc-parallel", "-XX:+UseParallelGC (default G1)",
            conf={JVM_OPTS: f"{sparkmod.JVM_OPTIONS} -XX:+UseParallelGC"}),
    Variant("c1-only", "-XX:TieredStopAtLevel=1: the C1 compiler only (default: tiered up to C2)",
            conf={JVM_OPTS: f"{sparkmod.JVM_OPTIONS} -XX:TieredStopAtLevel=1"}),
    Variant("c1-serial", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC: C1 only and the serial collector",
            conf={JVM_OPTS: f"{sparkmod.JVM_OPTIONS} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}),
    Variant("producer-linger-0", "the bench's producer with linger.ms=0 (default 5, the client's): every trade a "
                                 "request of its own; the bench, not the lane", producer_linger_ms=0),
    Variant("heap-2g", "--driver-memory 2g (default 1g; the driver is the executor in local mode)",
            driver_memory="2g"),
)
BY_NAME = {v.name: v for v in VARIANTS}
DEFAULT_RATES = (10_000, 1_000)


def _median(values: list, digits: int = 1) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), digits) if values else None


def aggregate(variant: Variant, runs: list[dict], rates) -> dict:
    """A variant's runs → medians per rate, with every run's figure kept."""
    by_rate = {}
    for rate in rates:
        segs = [s for r in runs for s in r["segments"] if s["rate"] == rate]
        by_rate[str(rate)] = {
            "p50_ms": _median([s["p50_ms"] for s in segs]), "p99_ms": _median([s["p99_ms"] for s in segs]),
            "p50_runs": [s["p50_ms"] for s in segs], "p99_runs": [s["p99_ms"] for s in segs],
            "floor_p99_runs": [s["floor_p99_ms"] for s in segs],
            "correct": all(s["missing"] == 0 and s["extra"] == 0 for s in segs),
        }
    top = str(max(rates))
    return {
        "name": variant.name, "setting": variant.setting, "runs": len(runs),
        "quiet_runs": sum(1 for r in runs if all(s["quiet"] for s in r["segments"])),
        "by_rate": by_rate, "floor_p99_ms": _median(by_rate[top]["floor_p99_runs"]),
        "lane_cores": _median([s["lane_cores"] for r in runs for s in r["segments"] if str(s["rate"]) == top]),
        # Per rate: the lane's cores and the broker's (each fetch is work on both sides).
        "cores_by_rate": {str(rate): {
            "lane": _median([s["lane_cores"] for r in runs for s in r["segments"] if s["rate"] == rate], 2),
            "kafka": _median([((s.get("box") or {}).get("cores_by_role") or {}).get("kafka")
                              for r in runs for s in r["segments"] if s["rate"] == rate], 2),
        } for rate in rates},
        "started_seconds": [r["started_seconds"] for r in runs],
    }


def run(variants=VARIANTS, rounds: int = 3, rates=DEFAULT_RATES, seconds: float = 10.0,
        warmup_seconds: float = 8.0, seed: int = 7) -> dict:
    from aldebaran.kafka.admin import delete_topics, ensure_topics
    from aldebaran.settings import KafkaSettings, load
    from aldebaran_capacity.bench import low_latency

    kafka = load(KafkaSettings)
    out_dir = paths.run_dir() / "bench" / "lane-tuning"
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {v.name: [] for v in variants}
    failed: list[dict] = []
    order_rng = random.Random(seed)
    t0 = time.monotonic()
    total = rounds * len(variants)
    done = 0
    for rnd in range(rounds):
        order = list(variants)
        order_rng.shuffle(order)
        for v in order:
            done += 1
            tag = uuid.uuid4().hex[:8]
            trades, alerts = f"rtm-tune-trades-{tag}", f"rtm-tune-alerts-{tag}"
            ensure_topics(kafka, [trades, alerts])
            try:
                with tempfile.TemporaryDirectory(prefix="rtm-tune-") as ck:
                    got = low_latency.measure(v.lane(str(Path(ck) / "lane"), trades, alerts), kafka, trades, alerts,
                                              rates, seconds, warmup_seconds, out_dir / f"{v.name}-{tag}.log",
                                              seed=1_000 + 10 * rnd, linger_ms=v.producer_linger_ms)
                got.pop("seen")
                for s in [got["warmup"], *got["segments"]]:
                    if s:
                        s.pop("series", None)
                runs[v.name].append({"round": rnd + 1, **got})
                summary = ", ".join(f"{s['rate']:,}/s p50 {s['p50_ms']} p99 {s['p99_ms']}" for s in got["segments"])
                log.info("lane-tuning [%d/%d, %.0f min] round %d %s: %s", done, total, (time.monotonic() - t0) / 60,
                         rnd + 1, v.name, summary)
            except (TimeoutError, AldebaranError, OSError) as exc:  # a variant Spark refuses is a result too
                log.error("lane-tuning: %s (round %d) failed: %s", v.name, rnd + 1, exc)
                failed.append({"name": v.name, "round": rnd + 1, "error": str(exc)[:300]})
            finally:
                delete_topics(kafka, [trades, alerts])
    return {"rates": list(rates), "seconds": seconds, "warmup_seconds": warmup_seconds, "rounds": rounds,
            "variants": [aggregate(v, runs[v.name], rates) for v in variants if runs[v.name]],
            "failed": failed, "raw": runs, "minutes": round((time.monotonic() - t0) / 60, 1)}


def main(args) -> int:
    from aldebaran_capacity.bench import lane_report, machine

    if args.variants == "list":
        for v in VARIANTS:
            print(f"{v.name:16} {v.setting}")
        return 0
    names = [n.strip() for n in args.variants.split(",")] if args.variants else [v.name for v in VARIANTS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(unknown)}; one of {', '.join(BY_NAME)}")
    if "baseline" not in names:
        names.insert(0, "baseline")
    rates = [int(r) for r in args.rates.split(",") if r] if args.rates else list(DEFAULT_RATES)
    seconds = args.seconds if args.seconds != 20.0 else 10.0  # the CLI's shared default is the lane bench's
    command = (f"aldebaran bench lane-tuning --variants {','.join(names)} --repeats {args.repeats} "
               f"--rates {','.join(map(str, rates))} --seconds {seconds:g} --warmup-seconds {args.warmup_seconds:g}")
    result = {"machine": machine.describe(), "command": command,
              "tuning": run([BY_NAME[n] for n in names], args.repeats, rates, seconds, args.warmup_seconds)}
    raw = paths.run_dir() / "bench" / "lane-tuning" / f"tuning-{time.strftime('%Y%m%dT%H%M%S')}.json"
    raw.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: v for k, v in result["tuning"].items() if k != "raw"}, indent=1, default=str))
    log.info("lane-tuning: every run in %s", raw)
    if args.report:
        lane_report.write_tuning(result, paths.ROOT / "docs", append=args.merge)
    return 0 if not result["tuning"]["failed"] else 1
