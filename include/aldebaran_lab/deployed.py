"""``aldebaran bench deployed``: the figure we publish — the platform as ``make demo`` leaves it, fed by a
plain confluent-kafka producer.

What runs: the Airflow-supervised auditor on its s3a checkpoint in MinIO, the streaming dispatchers the
``dispatch_supervisor`` DAG starts, and three channels — ``log`` (the demo's), ``webhook`` (a receiver
in a process of its own) and ``bus`` (a Kafka topic). The bench configures the last two the way a user
does, through Airflow (the Variable ``aldebaran_channels`` and the connections ``aldebaran_webhook`` /
``aldebaran_bus``), and takes them away again at the end.

Per rate, a producer process with confluent-kafka's defaults (librdkafka's partitioner) sends paced
orders keyed by order id: a request for 100 shares, then two purchases of 60 — one OVERFILL per order,
tipped by the second purchase, whose Kafka timestamp is the trade's time. Taps (aldebaran_capacity.taps)
see each alert on the alerts topic, in the log file, at the webhook receiver and on the bus topic:

    trade (producer) ─▶ detected_at (the book step) ─▶ produced to `alerts` ─▶ seen on `alerts`
                                                                            ─▶ log / webhook / bus

It also samples the auditor's batches (its heartbeat: batch time and its steps), counts restarts (a new
pid behind a heartbeat), and records the box (aldebaran_capacity.bench.boxstate): a segment where other
processes took more than 0.2 core is flagged. A short warm-up segment runs first and is not reported.

The whole bench (:func:`run`), as BRIEF §4 takes a figure: the platform at rest (aldebaran_lab.deployed_rest),
each rate ``--runs`` times interleaved with the hand-rolled loop after each segment (aldebaran_lab.deployed_runs),
the capacity ladders (aldebaran_lab.deployed_capacity) and, with ``--with-lane``, the same beside the fast lane
(aldebaran_lab.deployed_lane). Progress: a log line per segment and rung.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

from aldebaran_lab.deployed_parts import (  # noqa: F401 - re-exported: the bench's names as before
    CHANNELS, DEFAULT_RATES, WARMUP, Channels, DeployedError, Watcher, auditor_running, produce, produce_in_process,
    segment,
)

log = logging.getLogger(__name__)

REST_QUIET_S = 60.0  # after the last load, before the steady rest sample: the dispatchers' and Kafka's tails end


def run(rates=DEFAULT_RATES, seconds: float = 30.0, drain_s: float = 60.0, start: bool = False, runs: int = 3,
        rest_s: float | None = 60.0, capacity_rates=None, rung_s: float = 60.0, with_lane: bool = False,
        webhook_batch: int = 1, lane_only: bool = False, exact_nice: list[int] | None = None, rest_runs: int = 1,
        rest_only: bool = False, fast_webhook: bool = False) -> dict:
    """The whole bench: the platform at rest (before the bench's channels: as `make demo` leaves it), the
    interleaved segments with their hand-rolled anchor, the capacity ladders (`capacity_rates` None: none),
    and with `with_lane` the same again beside the fast lane (aldebaran_lab.deployed_lane). `rest_runs` > 1:
    the rest right after the demo that many times, each after its own `aldebaran demo` (the median and spread);
    `rest_only`: that and nothing else."""
    from aldebaran.delivery.channels import configured_channels
    from aldebaran.settings import KafkaSettings, load
    from aldebaran_lab import deployed_capacity, deployed_rest, deployed_runs
    from aldebaran_lab.demo_platform import Platform, api_from_env

    platform = Platform.load()
    platform.require_local()
    if not auditor_running(platform.query):
        if not start:
            raise DeployedError(f"the auditor {platform.query!r} is not running: run `make demo` first (or pass "
                                "--start)")
        log.info("deployed: the platform is not running; `aldebaran demo` first")
        subprocess.run([sys.executable, "-m", "aldebaran.cli.main", "demo"], check=True)
    kafka = load(KafkaSettings)
    api = api_from_env()
    log_path = configured_channels(["log"])[0].path
    out = {"rates": list(rates), "seconds": seconds, "runs": runs, "channels": list(CHANNELS), "segments": [],
           "producer": "confluent-kafka Producer, default settings (librdkafka consistent_random partitioner)",
           "order": "request 100 shares, then 2 purchases of 60: one OVERFILL per order",
           "peer": "the hand-rolled confluent-kafka loop (aldebaran_capacity.bench.peer), same box, same run",
           "webhook_batch": webhook_batch}
    if rest_s and not lane_only:
        out["rest"] = deployed_rest.repeated(rest_runs, rest_s, kafka, platform.query,
                                             before_each=_demo if rest_runs > 1 else None)
    if rest_only:
        return out
    with deployed_runs.peer_topic(kafka):
        if lane_only:
            from aldebaran_lab import deployed_lane

            out["with_lane"] = deployed_lane.run(api, kafka, log_path, platform.query, rates, runs, seconds, drain_s,
                                                 rest_s, webhook_batch, exact_nice, fast_webhook)
            return out
        with Channels(api, kafka, webhook_batch) as channels:
            log.info("deployed: waiting for the log, webhook and bus dispatchers")
            channels.wait_dispatchers()
            ctx = deployed_runs.Context(kafka, channels.receiver, log_path, platform.query, drain_s)
            log.info("deployed: warm-up %d events/s for %.0f s (not reported)", *WARMUP)
            segment(kafka, channels.receiver, log_path, platform.query, WARMUP[0], WARMUP[1], drain_s)
            out["segments"] = deployed_runs.segments(ctx, rates, runs, seconds)
            if capacity_rates:
                out["capacity_rates"], out["rung_seconds"] = list(capacity_rates), rung_s
                out["capacity"], out["capacity_eps"] = deployed_capacity.run(
                    ctx, capacity_rates, rung_s, settle=lambda: deployed_runs.settle(ctx))
        if rest_s:
            # The same platform at rest again once it has run for a while: the first sample, right after the
            # demo, includes the JVMs' warm-up (the JIT compiles the idle loop for minutes); this one does not.
            log.info("deployed: quiet for %.0f s before the steady rest sample", REST_QUIET_S)
            time.sleep(REST_QUIET_S)
            out["rest_steady"] = deployed_rest.measure(rest_s, label="rest, steady", kafka=kafka,
                                                       query=platform.query)
        if with_lane:
            from aldebaran_lab import deployed_lane

            out["with_lane"] = deployed_lane.run(api, kafka, log_path, platform.query, rates, runs, seconds, drain_s,
                                                 rest_s, webhook_batch, exact_nice, fast_webhook)
    return out


def _demo(k: int) -> None:
    """`aldebaran demo` before rest run k: the platform reset and started again, as a user's `make demo` leaves it."""
    log.info("deployed: rest run %d: `aldebaran demo` first", k + 1)
    subprocess.run([sys.executable, "-m", "aldebaran.cli.main", "demo"], check=True, stdout=subprocess.DEVNULL)


def _ints(text: str | None, default) -> list[int]:
    return [int(r) for r in text.split(",") if r.strip()] if text else list(default)


def main(args) -> int:
    from aldebaran.runtime import paths
    from aldebaran_capacity.bench import machine
    from aldebaran_lab import deployed_capacity, deployed_report

    rates = _ints(args.rates, DEFAULT_RATES)
    capacity_rates = [] if args.no_capacity else _ints(args.capacity_rates, deployed_capacity.DEFAULT_RATES)
    seconds = args.seconds if args.seconds != 20.0 else 30.0  # the bench parser's shared default is e2e's
    rest_s = None if args.no_rest else args.rest_seconds
    if args.rest_runs < 1:
        raise DeployedError(f"--rest-runs must be at least 1, not {args.rest_runs}")
    if args.fast_webhook and not (args.with_lane or args.lane_only):
        raise DeployedError("--fast-webhook measures the fast lane's deliveries: only with --with-lane or --lane-only")
    if args.rest_only and (args.no_rest or args.with_lane or args.lane_only):
        raise DeployedError("--rest-only measures the rest right after the demo: not with --no-rest, --with-lane "
                            "or --lane-only")
    if args.rest_only:
        command = "aldebaran bench deployed --rest-only"
    else:
        command = (f"aldebaran bench deployed --rates {','.join(map(str, rates))} --seconds {seconds:g} "
                   f"--drain-seconds {args.drain_seconds:g} --runs {args.runs}")
    command += " --no-rest" if args.no_rest else f" --rest-seconds {args.rest_seconds:g}"
    command += f" --rest-runs {args.rest_runs}" if args.rest_runs > 1 else ""
    if not args.rest_only:
        command += (" --no-capacity" if args.no_capacity else
                    f" --capacity-rates {','.join(map(str, capacity_rates))} --rung-seconds {args.rung_seconds:g}")
        command += (f" --webhook-batch {args.webhook_batch}" + (" --with-lane" if args.with_lane else "")
                    + (" --lane-only" if args.lane_only else "")
                    + (" --fast-webhook" if args.fast_webhook else "")
                    + (f" --exact-nice {args.exact_nice}" if args.exact_nice else ""))
    result = {"machine": machine.describe(), "command": command}
    result["deployed"] = run(rates, seconds, args.drain_seconds, start=args.start, runs=args.runs, rest_s=rest_s,
                             capacity_rates=capacity_rates, rung_s=args.rung_seconds, with_lane=args.with_lane,
                             webhook_batch=args.webhook_batch, lane_only=args.lane_only,
                             exact_nice=_ints(args.exact_nice, []) or None, rest_runs=args.rest_runs,
                             rest_only=args.rest_only, fast_webhook=args.fast_webhook)
    print(json.dumps(result, indent=1, default=str))
    if args.report:
        deployed_report.write(result, paths.ROOT / "docs", lane_only=args.lane_only, rest_only=args.rest_only)
    return 0
