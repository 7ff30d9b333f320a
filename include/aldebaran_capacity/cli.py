"""The capacity package's subcommands of `aldebaran` (registered by :mod:`aldebaran.cli`)."""

from __future__ import annotations

import argparse
import sys

USAGE = """\
    aldebaran loadgen                                  produce trades in the original publisher's mix
    aldebaran bench dispatch                           deliveries/s and alert→delivered latency
    aldebaran bench e2e [--rates R,...]                trades → auditor → dispatchers → recipients: sustained rate
    aldebaran bench all [--quick]                      drain, latency, books, churn, dispatch, e2e, low_latency → docs/benchmarks.md
    aldebaran bench state-designs                      candidate state designs side by side → docs/benchmarks.md
    aldebaran bench parse-cost                         Kafka read vs parse vs aggregate, batch jobs → docs/benchmarks.md
    aldebaran bench low-latency [--rates R,...]        the real-time-mode lane (Spark 4.3): trade→alert p50/p99, floor, box state
    aldebaran bench lane-tuning [--variants V,...]     the lane's settings A/B, interleaved rounds → docs/benchmarks.md
    aldebaran bench alerts-from [--rates R] [--repeats N] alerts produced by the shard tasks vs the driver, A/B"""


# Bench modes that other packages add (the lab's `deployed`, which drives the local platform through
# Airflow): name → handler(args). This package never imports them.
EXTRA_BENCH_MODES: dict = {}
BENCH_MODES = ["dispatch", "all", "state-designs", "parse-cost", "e2e", "low-latency", "lane-tuning",
               "checkpoint-files", "alerts-from"]


def add_bench_mode(name: str, handler) -> None:
    """Register `aldebaran bench <name>` (called from another package's ``register``)."""
    EXTRA_BENCH_MODES[name] = handler
    if name not in BENCH_MODES:
        BENCH_MODES.append(name)


def cmd_loadgen(args: argparse.Namespace) -> int:
    from aldebaran_capacity import loadgen

    loadgen.main(args)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    if args.which in EXTRA_BENCH_MODES:
        return EXTRA_BENCH_MODES[args.which](args)
    if args.which == "all":
        from aldebaran_capacity.bench import suite

        return suite.main(args)
    if args.which == "state-designs":
        from aldebaran_capacity.bench import state_designs

        return state_designs.main(args)
    if args.which == "parse-cost":
        from aldebaran_capacity.bench import parse_cost

        return parse_cost.main(args)
    if args.which == "low-latency":
        from aldebaran_capacity.bench import low_latency

        return low_latency.main(args)
    if args.which == "lane-tuning":
        from aldebaran_capacity.bench import lane_tuning

        return lane_tuning.main(args)
    if args.which == "alerts-from":
        from aldebaran_capacity.bench import alerts_from

        return alerts_from.main(args)
    if args.which == "e2e":
        from aldebaran_capacity.bench import e2e

        return e2e.main(args)
    if args.which == "checkpoint-files":
        from aldebaran_capacity.bench import checkpoint_files, machine

        result = {"machine": machine.describe(), "command": "aldebaran bench checkpoint-files " + " ".join(sys.argv[3:]),
                  "checkpoint_files": checkpoint_files.run(rounds=args.repeats)}
        print(json.dumps(result, indent=2))
        return 0
    from aldebaran_capacity.bench import dispatch, machine

    result = {"machine": machine.describe(),
              "command": "aldebaran bench dispatch " + " ".join(sys.argv[3:])}
    result["dispatch"] = dispatch.run(alerts=args.alerts, concurrency=args.concurrency, repeats=args.repeats,
                                      steady_rates=tuple(float(r) for r in args.steady_rates.split(",") if r))
    print(json.dumps(result, indent=2))
    return 0 if result["dispatch"]["all_correct"] else 1


def register(sub) -> None:
    """Add `loadgen` and `bench` to the subparsers of `aldebaran`."""
    lg = sub.add_parser("loadgen", help="produce trades to Kafka")
    from aldebaran_capacity.loadgen import add_arguments as loadgen_args

    loadgen_args(lg)
    lg.set_defaults(func=cmd_loadgen)

    b = sub.add_parser("bench", help="benchmarks (figures with machine, versions and date)")
    b.add_argument("which", choices=BENCH_MODES)  # a list: modes added later are accepted too
    b.add_argument("--quick", action="store_true", help="all: everything small (< 5 min), correctness only")
    b.add_argument("--out", default=None, help="all: report directory (default docs/, or .run/bench/quick with --quick); low-latency: a JSON file")
    b.add_argument("--sections", default=None,
                   help="all: comma-separated subset of drain,plans,latency,books,churn,dispatch,e2e,low_latency")
    b.add_argument("--merge", action="store_true",
                   help="all: keep the previous report's sections (and open-books sizes) this run does not measure")
    b.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                   help="all: override a size, e.g. drain_orders=100000, rates=5000,20000, book_sizes=100000 (repeatable)")
    b.add_argument("--alerts", type=int, default=5000)
    b.add_argument("--concurrency", type=int, default=32, help="concurrent sends per channel")
    b.add_argument("--repeats", type=int, default=3,
                   help="runs; the median is reported (checkpoint-files, lane-tuning: rounds)")
    b.add_argument("--steady-rates", default="50", help="dispatch: comma-separated alerts/s for the latency runs")
    b.add_argument("--orders", default="40000,200000",
                   help="state-designs: orders preloaded (~5 events each, all open), comma-separated sizes; "
                   "parse-cost: the first size")
    b.add_argument("--max-offsets", type=int, default=100_000, help="state-designs: maxOffsetsPerTrigger")
    b.add_argument("--buckets", type=int, default=32, help="state-designs: hash buckets of applyInPandasWithState")
    b.add_argument("--candidates", default=None, help="state-designs: comma-separated subset (default all)")
    b.add_argument("--per-order-seconds", type=float, default=60.0,
                   help="state-designs: time allowed to the per-order Python state candidate")
    b.add_argument("--rates", default=None,
                   help="e2e: comma-separated trade rates to ramp through, trades/s (default 5000,10000,20000,50000); "
                   "low-latency: the paced rates (default 1000,10000,50000); deployed: default 1000,5000,20000,50000")
    b.add_argument("--seconds", type=float, default=20.0, help="e2e, low-latency: how long each rate is produced, seconds")
    b.add_argument("--micro-batch", action="store_true",
                   help="low-latency: run the lane's plan as back-to-back micro-batches (the comparison)")
    b.add_argument("--runtime", default="4.3", choices=["4.3", "control"],
                   help="low-latency: the Spark runtime (control: the control venv's pyspark 4.2, micro-batch only)")
    b.add_argument("--conf", action="append", default=None, metavar="KEY=VALUE",
                   help="low-latency: a Spark setting of the lane's spark-submit (repeatable)")
    b.add_argument("--report", action="store_true",
                   help="low-latency, deployed: write its section of docs/benchmarks.md and its key of "
                   "docs/img/bench-results.json")
    b.add_argument("--start", action="store_true",
                   help="deployed: run `aldebaran demo` first when the platform is not running")
    b.add_argument("--drain-seconds", type=float, default=60.0,
                   help="deployed: after each rate, how long to wait for its alerts and deliveries")
    b.add_argument("--warmup-seconds", type=float, default=10.0,
                   help="low-latency, lane-tuning: a warm-up segment after the lane starts, left out of the figures")
    b.add_argument("--fast-webhook", action="store_true",
                   help="low-latency: deliver the lane's alerts to a fast webhook channel and measure trade → recipient")
    b.add_argument("--variants", default=None,
                   help="lane-tuning: comma-separated subset of the variants (default all; `--variants list` names them)")
    b.add_argument("--no-exact", action="store_true",
                   help="low-latency: skip the exact lane's run over the same trades (its agreement)")
    b.add_argument("--checkpoint-interval", default="5 minutes",
                   help="low-latency: the real-time trigger's duration (a checkpoint interval, not a latency)")
    b.add_argument("--mix", choices=["original", "custom"], default="original",
                   help="e2e: the original publisher's mix, or the custom mix with --overfill-fraction")
    b.add_argument("--overfill-fraction", type=float, default=0.5, help="e2e --mix custom: share of overfilled orders")
    b.add_argument("--channels", default="webhook,bus,sms",
                   help="e2e: channels to deliver to (webhook and bus decide the sustained rate; sms is reported)")
    b.add_argument("--webhook-batch", type=int, default=1,
                   help="e2e: alerts per webhook POST (1: one alert per request, the webhook channel's default)")
    b.set_defaults(func=cmd_bench)
