"""The capacity package's subcommands of `aldebaran`: `loadgen` and `bench MODE` (the ``capacity`` entry
point of the ``aldebaran.commands`` group, read by :mod:`aldebaran.cli.main`).

Each bench mode is a subcommand with its own options (:data:`BENCH_OPTIONS` names the modes of each);
other packages add modes through the ``aldebaran.bench`` entry-point group: a function taking the bench
subparsers (the lab's `deployed` and `steady`). This package never imports them.
"""

from __future__ import annotations

import argparse
import sys

from aldebaran.runtime.cliparse import add_modes, load_entry_points, opt

USAGE = """\
    aldebaran loadgen                                  produce trades in the original publisher's mix
    aldebaran bench dispatch                           deliveries/s and alert→delivered latency
    aldebaran bench e2e [--rates R,...]                trades → auditor → dispatchers → recipients: sustained rate
    aldebaran bench all [--quick]                      drain, latency, books, churn, dispatch, e2e, low_latency → docs/benchmarks.md
    aldebaran bench state-designs                      candidate state designs side by side → docs/benchmarks.md
    aldebaran bench parse-cost                         Kafka read vs parse vs aggregate, batch jobs → docs/benchmarks.md
    aldebaran bench low-latency [--rates R,...]        the real-time-mode lane (Spark 4.3): trade→alert p50/p99, floor, box state
    aldebaran bench lane-tuning [--variants V,...]     the lane's settings A/B, interleaved rounds → docs/benchmarks.md
    aldebaran bench checkpoint-files [--repeats N]     checkpoint writes per batch: rename, abortable, ours
    aldebaran bench metrics-cost [--updates N]         metric update cost: Prometheus client vs StatsD UDP
    aldebaran bench status-commands [--quick]          status commands and health on a long synthetic history
    aldebaran bench http-clients [--repeats N]         the webhook channel on aiohttp (ships) vs httpx, interleaved
    aldebaran bench MODE --help                        each mode's options"""

# The entry-point group of the packages that add bench modes: each a function(bench_subparsers).
BENCH_GROUP = "aldebaran.bench"

BENCH_MODES = {
    "dispatch": "deliveries/s per channel and alert → delivered latency (webhook, bus, log)",
    "all": "the capacity suite: drain, plans, latency, books, churn, dispatch, e2e, low_latency → docs/benchmarks.md",
    "state-designs": "candidate state designs side by side → docs/benchmarks.md",
    "parse-cost": "Kafka read vs parse vs aggregate, batch jobs → docs/benchmarks.md",
    "e2e": "trades → auditor → dispatchers → recipients: the sustained rate",
    "low-latency": "the real-time-mode lane (Spark 4.3): trade → alert p50/p99 against the same-run floor",
    "lane-tuning": "the lane's settings A/B against the shipped lane, interleaved rounds → docs/benchmarks.md",
    "checkpoint-files": "checkpoint writes per batch: rename, abortable, ours",
    "metrics-cost": "per-update cost of a Prometheus counter/gauge/histogram vs a StatsD UDP send, and one scrape",
    "lane-rotation": "the lane's start and a rotation under load beside the running platform: gap, p99, start",
    "reconcile-cost": "the lane keeper's reconciliation, CPU per alert after a long run: shipped vs the scanning "
                      "design, interleaved",
    "shared-jvm": "both lanes in one Spark application vs apart (what ships): start, rest CPU, memory, both "
                  "lanes' p99 under load, interleaved",
    "http-clients": "the webhook channel on aiohttp (what ships) and on httpx, interleaved: deliveries/s and CPU "
                    "per delivery, for the one-HTTP-client question",
    "status-commands": "lanes status, deliveries stats/show, explain and health timed on a long synthetic history "
                       "(a day at 5k events/s by default)",
}

BENCH_OPTIONS = [
    opt("--quick", modes="all,status-commands", action="store_true",
        help={"*": "everything small (< 5 min), correctness only",
              "status-commands": "a small history (seconds to build): proves the mode works, not a figure"}),
    opt("--messages", modes="status-commands", type=int, default=None,
        help="messages on the synthetic alerts topic (default 4000000, --quick 20000)"),
    opt("--run-size", modes="status-commands", type=int, default=None, help="offsets per ledger run (default 100)"),
    opt("--unconfirmed", modes="status-commands", type=int, default=None,
        help="unconfirmed fast-lane records (default 15000, --quick 200)"),
    opt("--out", modes="all,state-designs,parse-cost,low-latency", default=None,
        help={"all": "report directory (default docs/, or .run/bench/quick with --quick)",
              "low-latency": "also write the result to this JSON file", "*": "report directory (default docs/)"}),
    opt("--sections", modes="all", default=None,
        help="comma-separated subset of drain,plans,latency,books,churn,dispatch,e2e,low_latency"),
    opt("--merge", modes="all,lane-tuning", action="store_true",
        help={"all": "keep the previous report's sections (and open-books sizes) this run does not measure",
              "lane-tuning": "with --report: add to the previous tuning table instead of replacing it"}),
    opt("--set", modes="all", action="append", default=None, metavar="KEY=VALUE",
        help="override a size, e.g. drain_orders=100000, rates=5000,20000, book_sizes=100000 (repeatable)"),
    opt("--updates", modes="metrics-cost", type=int, default=200_000, help="operations per run (default 200000)"),
    opt("--alerts", modes="dispatch", type=int, default=5000, help="alerts per channel (default 5000)"),
    opt("--alerts", modes="http-clients", type=int, default=20_000, help="alerts per run (default 20000)"),
    opt("--batches", modes="http-clients", default=None,
        help="comma-separated alerts per POST, each measured (default 1,100)"),
    opt("--concurrency", modes="dispatch", type=int, default=32, help="concurrent sends per channel (default 32)"),
    opt("--channels", modes="dispatch", default=None,
        help="comma-separated subset of webhook,webhook_batch,bus,sms,log,alertmanager,pagerduty,opsgenie,fcm,apns,"
             "fast_markers,fast_log (the fast lane's cross-lane designs on a batched webhook; default all)"),
    opt("--repeats", modes="dispatch,parse-cost,checkpoint-files,lane-tuning,metrics-cost,status-commands,"
                              "reconcile-cost,lane-rotation,shared-jvm,http-clients,low-latency",
        type=int,
        default=3,
        help={"*": "runs; the median is reported (default 3)", "checkpoint-files": "rounds (default 3)",
              "lane-tuning": "rounds, each variant once per round (default 3)",
              "low-latency": "runs, each rate once per run, interleaved; medians and the p99s' spread (default 3)"}),
    opt("--steady-rates", modes="dispatch", default="100,1000",
        help="comma-separated alerts/s: the fast dispatcher's own latency at these paced rates, produced → fast "
             "recipient (`dispatch.fast.paced`; with a fast design among --channels; '' for none; default 100,1000)"),
    opt("--orders", modes="state-designs,parse-cost", default="40000,200000",
        help={"state-designs": "orders preloaded (~5 events each, all open), comma-separated sizes (default 40000,200000)",
              "parse-cost": "orders (~5 events each; the first of a comma-separated list; default 40000)"}),
    opt("--max-offsets", modes="state-designs", type=int, default=100_000, help="maxOffsetsPerTrigger (default 100000)"),
    opt("--buckets", modes="state-designs", type=int, default=32,
        help="hash buckets of applyInPandasWithState (default 32)"),
    opt("--candidates", modes="state-designs", default=None, help="comma-separated subset (default all)"),
    opt("--per-order-seconds", modes="state-designs", type=float, default=60.0,
        help="time allowed to the per-order Python state candidate (default 60)"),
    opt("--rates", modes="e2e,low-latency,lane-tuning,reconcile-cost,lane-rotation,shared-jvm", default=None,
        help={"lane-rotation": "comma-separated paced rates, events/s (default 5000)","shared-jvm": "comma-separated paced rates, events/s (default 1000)","reconcile-cost": "comma-separated alerts/s (default 1000,5000)","e2e": "comma-separated trade rates to ramp through, trades/s (default 5000,10000,20000,50000)",
              "low-latency": "the paced rates, events/s (default 1000,10000,50000)",
              "lane-tuning": "the paced rates of each round, events/s"}),
    opt("--seconds", modes="e2e,low-latency,lane-tuning,reconcile-cost,lane-rotation,shared-jvm", type=float,
        default=20.0,
        help={"*": "how long each rate is produced, seconds (default 20)",
              "lane-tuning": "how long each rate is produced, seconds (default 10)",
              "reconcile-cost": "simulated seconds of each measured window (default 20)",
              "lane-rotation": "how long the load lasts, the rotation inside it, seconds (default 120)"}),
    opt("--rest-seconds", modes="shared-jvm", type=float, default=60.0,
        help="the CPU sample at rest, after both lanes answer and settle, seconds (default 60)"),
    opt("--micro-batch", modes="low-latency", action="store_true",
        help="run the lane's plan as back-to-back micro-batches (the comparison)"),
    opt("--runtime", modes="low-latency", default="4.3", choices=["4.3", "control"],
        help="the Spark runtime (control: the control venv's pyspark 4.2, micro-batch only)"),
    opt("--conf", modes="low-latency", action="append", default=None, metavar="KEY=VALUE",
        help="a Spark setting of the lane's spark-submit (repeatable)"),
    opt("--report", modes="low-latency,lane-tuning,status-commands,reconcile-cost,lane-rotation,shared-jvm,"
                           "http-clients",
        action="store_true",
        help="write its section of docs/benchmarks.md and its key of docs/img/bench-results.json"),
    opt("--rotate-at", modes="lane-rotation", type=float, default=30.0,
        help="seconds into the load when the keeper is told to rotate (default 30)"),
    opt("--overlap", modes="lane-rotation", type=float, default=15.0,
        help="ALDEBARAN_LANES_ROTATION_OVERLAP_SECONDS of the bench's keeper (default 15, the shipped one)"),
    opt("--warmup-seconds", modes="low-latency,lane-tuning", type=float, default=10.0,
        help="a warm-up segment after the lane starts, left out of the figures (default 10)"),
    opt("--fast-webhook", modes="low-latency", action="store_true",
        help="deliver the lane's alerts to a fast webhook channel and measure trade → recipient"),
    opt("--fast-webhook-batch", modes="low-latency", type=int, default=100,
        help="the fast webhook's `batch` extra: alerts per signed POST (1: one POST an alert; default 100)"),
    opt("--variants", modes="lane-tuning", default=None,
        help="comma-separated subset of the variants (default all; `--variants list` names them)"),
    opt("--no-exact", modes="low-latency", action="store_true",
        help="skip the exact lane's run over the same trades (its agreement)"),
    opt("--checkpoint-interval", modes="low-latency", default="5 minutes",
        help="the real-time trigger's duration (a checkpoint interval, not a latency; default '5 minutes')"),
    opt("--mix", modes="e2e", choices=["original", "custom"], default="original",
        help="the original publisher's mix, or the custom mix with --overfill-fraction"),
    opt("--overfill-fraction", modes="e2e", type=float, default=0.5, help="--mix custom: share of overfilled orders"),
    opt("--channels", modes="e2e", default="webhook,bus,sms",
        help="channels to deliver to (webhook and bus decide the sustained rate; sms is reported)"),
    opt("--webhook-batch", modes="e2e", type=int, default=1,
        help="alerts per webhook POST (1: one alert per request, the webhook channel's default)"),
]


def cmd_loadgen(args: argparse.Namespace) -> int:
    from aldebaran_capacity import loadgen

    loadgen.main(args)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import json

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
    if args.which == "metrics-cost":
        from aldebaran_capacity.bench import metrics_cost

        return metrics_cost.main(["--updates", str(args.updates), "--repeats", str(args.repeats)])
    if args.which == "status-commands":
        from aldebaran_capacity.bench import status_commands

        return status_commands.main(args)
    if args.which == "lane-rotation":
        from aldebaran_capacity.bench import lane_rotation

        return lane_rotation.main(args)
    if args.which == "shared-jvm":
        from aldebaran_capacity.bench import shared_jvm

        return shared_jvm.main(args)
    if args.which == "http-clients":
        from aldebaran_capacity.bench import http_clients

        return http_clients.main(args)
    if args.which == "reconcile-cost":
        from aldebaran_capacity.bench import reconcile_cost

        return reconcile_cost.main(args)
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
    channels = tuple(c.strip() for c in args.channels.split(",") if c.strip()) if args.channels else dispatch.CHANNELS
    unknown = sorted(set(channels) - set(dispatch.CHANNELS))
    if unknown:
        raise SystemExit(f"bench dispatch --channels: unknown {', '.join(unknown)} (one of {', '.join(dispatch.CHANNELS)})")
    from aldebaran_capacity.bench import fast_paced

    result["dispatch"] = fast_paced.add_to(
        dispatch.run(alerts=args.alerts, concurrency=args.concurrency, repeats=args.repeats, channels=channels),
        [float(r) for r in args.steady_rates.split(",") if r], args.repeats)
    print(json.dumps(result, indent=2))
    return 0 if result["dispatch"]["all_correct"] else 1


def register(sub) -> None:
    """Add `loadgen` and `bench` to the subparsers of `aldebaran`."""
    lg = sub.add_parser("loadgen", help="produce trades to Kafka",
                        description="Produce trades in the original publisher's mix or a configurable one; writes "
                                    "the reference model's expected alerts.")
    from aldebaran_capacity.loadgen import add_arguments as loadgen_args

    loadgen_args(lg)
    lg.set_defaults(func=cmd_loadgen)

    b = sub.add_parser("bench", help="benchmarks (figures with machine, versions and date)",
                       description="Benchmarks: every figure with its command, the machine, the box's state and "
                                   "the ratio to its ceiling. `aldebaran bench MODE --help` lists a mode's options.")
    modes = add_modes(b, "which", BENCH_MODES, BENCH_OPTIONS, metavar="MODE")
    for mode in modes.choices.values():  # on each mode, not on `bench`: a mode added later brings its own
        mode.set_defaults(func=cmd_bench)
    for add in load_entry_points(BENCH_GROUP):
        add(modes)
