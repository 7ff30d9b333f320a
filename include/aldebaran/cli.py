"""`aldebaran` — the platform's one command line.

    aldebaran services up|down|status|kill [NAME ...]   local Kafka, MinIO, Airflow (+ Spark cluster)
    aldebaran auditor run|status                       the streaming auditor
    aldebaran dispatch [--channel NAME] [--follow]     deliver alerts to the configured channels (once, or streaming)
    aldebaran deliveries stats|list|show|retry|resolve inspect and settle the delivery ledger
    aldebaran loadgen                                  produce trades in the original publisher's mix
    aldebaran bench dispatch                           deliveries/s and alert→delivered latency
    aldebaran bench e2e [--rates R,...]                trades → auditor → dispatchers → recipients: sustained rate
    aldebaran bench all [--quick]                      drain, latency, books, churn, dispatch, e2e → docs/benchmarks.md
    aldebaran bench state-designs                      candidate state designs side by side → docs/benchmarks.md
    aldebaran bench parse-cost                         Kafka read vs parse vs aggregate, batch jobs → docs/benchmarks.md
    aldebaran demo                                     the end-to-end demo (make demo)
    aldebaran chaos kill-auditor|kill-dispatch|kill-scheduler|kill-triggerer|kill-api-server|under-load|outages|fuzz|all
                                                       reliability campaigns (make chaos)
    aldebaran docs config [--check]                    the configuration reference in docs/operations.md

Every subcommand loads the git-ignored .env first (generated credentials); real environment
variables win over it. `aldebaran SUBCOMMAND --help` documents each.
"""

from __future__ import annotations

import argparse
import logging
import sys

from aldebaran import envfile
from aldebaran.exceptions import AldebaranError

log = logging.getLogger("aldebaran")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("botocore", "boto3", "urllib3", "py4j", "s3transfer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# --- services ----------------------------------------------------------------------------
def cmd_services(args: argparse.Namespace) -> int:
    from aldebaran_lab import services

    names = tuple(args.names) or None
    if args.action == "up":
        envfile.load_env(create=True)
        wanted = names or services.CORE + (services.CLUSTER if args.cluster else ())
        services.up(wanted)
        _print_status(services.status(wanted))
    elif args.action == "down":
        services.down(names or services.CORE + services.CLUSTER)
    elif args.action == "kill":
        for name in names or ():
            services.get(name).kill()
    else:
        _print_status(services.status(names or services.CORE + services.CLUSTER))
    return 0


def _print_status(rows) -> None:
    header = f"{'service':<16} {'pid':>7}  {'running':<8} {'healthy':<8} {'address':<24} log"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.name:<16} {r.pid or '-':>7}  {'yes' if r.running else 'no':<8} "
            f"{'yes' if r.healthy else 'no':<8} {r.address:<24} {r.log}"
        )


# --- auditor -----------------------------------------------------------------------------
def cmd_auditor(args: argparse.Namespace) -> int:
    from aldebaran.audit.sparkjob import job
    from aldebaran.audit.settings import AuditorSettings
    from aldebaran.settings import load

    overrides = {k: v for k, v in vars(args).items() if k in AuditorSettings.model_fields and v is not None}
    settings = load(AuditorSettings, **overrides)
    if args.action == "run":
        job.run(settings, kafka=auditor_kafka_settings(args))
    else:
        job.print_status(settings)
    return 0


# The auditor's topic flags: each overrides its ALDEBARAN_KAFKA_* setting and is validated like it.
AUDITOR_TOPIC_FLAGS = ("trades_topic", "alerts_topic", "dlq_topic")


def auditor_kafka_settings(args: argparse.Namespace):
    """KafkaSettings from the environment, with the auditor's topic flags over it."""
    from aldebaran.settings import KafkaSettings, load

    return load(KafkaSettings, **{name: getattr(args, name, None) for name in AUDITOR_TOPIC_FLAGS})


# --- dispatch ----------------------------------------------------------------------------
def cmd_dispatch(args: argparse.Namespace) -> int:
    import json

    from aldebaran.delivery import dispatcher

    if args.follow:
        from aldebaran.delivery import service

        return service.follow(args.channel or None, args.name)
    stats = dispatcher.run_once(
        channels=args.channel or None, max_alerts=args.max_alerts, idle_timeout=args.idle_timeout
    )
    print(json.dumps(stats.summary()))
    return 0


def cmd_deliveries(args: argparse.Namespace) -> int:
    from aldebaran.delivery import tools

    return tools.main(args)


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
    if args.which == "e2e":
        from aldebaran_capacity.bench import e2e

        return e2e.main(args)
    from aldebaran_capacity.bench import dispatch, machine

    result = {"machine": machine.describe(),
              "command": "aldebaran bench dispatch " + " ".join(sys.argv[3:])}
    result["dispatch"] = dispatch.run(alerts=args.alerts, concurrency=args.concurrency, repeats=args.repeats,
                                      steady_rates=tuple(float(r) for r in args.steady_rates.split(",") if r))
    print(json.dumps(result, indent=2))
    return 0 if result["dispatch"]["all_correct"] else 1


def cmd_chaos(args: argparse.Namespace) -> int:
    from aldebaran_lab.chaos import cli as chaos_cli

    return chaos_cli.main(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from aldebaran_lab import demo

    return demo.main(args)


def cmd_docs(args: argparse.Namespace) -> int:
    from aldebaran_lab import docsgen

    return docsgen.main(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aldebaran", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("services", help="start/stop/inspect the local services")
    s.add_argument("action", choices=["up", "down", "status", "kill"])
    s.add_argument("names", nargs="*", help="services (default: minio kafka airflow; down/status: all)")
    s.add_argument("--cluster", action="store_true", help="with `up`: also a Spark master and two workers")
    s.set_defaults(func=cmd_services)

    a = sub.add_parser("auditor", help="run the streaming auditor or show its heartbeat")
    a.add_argument("action", choices=["run", "status"])
    from aldebaran.audit.settings import add_cli_flags

    add_cli_flags(a)
    from aldebaran.settings import KafkaSettings, env_var_of

    for name in AUDITOR_TOPIC_FLAGS:
        field = KafkaSettings.model_fields[name]
        a.add_argument("--" + name.replace("_", "-"), dest=name, default=None,
                       help=f"{field.description.split(': ', 1)[-1]} [env {env_var_of(KafkaSettings, name)}; default {field.default}]")
    a.set_defaults(func=cmd_auditor)

    d = sub.add_parser("dispatch", help="deliver alerts to the configured channels (once, or --follow)")
    d.add_argument("--channel", action="append", help="channel name (repeatable; default: all configured)")
    d.add_argument("--follow", action="store_true",
                   help="stream: deliver until SIGTERM/SIGINT, with a heartbeat (what dispatch_supervisor starts)")
    d.add_argument("--name", default=None, help="--follow: the dispatcher's name in its heartbeat (default: its channels)")
    d.add_argument("--max-alerts", type=int, default=None, help="stop after this many alerts")
    d.add_argument("--idle-timeout", type=float, default=None,
                   help="stop after this many seconds without alerts (default ALDEBARAN_DELIVERY_IDLE_SECONDS)")
    d.set_defaults(func=cmd_dispatch)

    dl = sub.add_parser("deliveries", help="inspect the delivery ledger")
    from aldebaran.delivery.tools import add_arguments

    add_arguments(dl)
    dl.set_defaults(func=cmd_deliveries)

    lg = sub.add_parser("loadgen", help="produce trades to Kafka")
    from aldebaran_capacity.loadgen import add_arguments as loadgen_args

    loadgen_args(lg)
    lg.set_defaults(func=cmd_loadgen)

    b = sub.add_parser("bench", help="benchmarks (figures with machine, versions and date)")
    b.add_argument("which", choices=["dispatch", "all", "state-designs", "parse-cost", "e2e"])
    b.add_argument("--quick", action="store_true", help="all: everything small (< 5 min), correctness only")
    b.add_argument("--out", default=None, help="all: report directory (default docs/, or .run/bench/quick with --quick)")
    b.add_argument("--sections", default=None,
                   help="all: comma-separated subset of drain,latency,books,churn,dispatch,e2e")
    b.add_argument("--merge", action="store_true",
                   help="all: keep the previous report's sections (and open-books sizes) this run does not measure")
    b.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                   help="all: override a size, e.g. drain_orders=100000, rates=5000,20000, book_sizes=100000 (repeatable)")
    b.add_argument("--alerts", type=int, default=5000)
    b.add_argument("--concurrency", type=int, default=32, help="concurrent sends per channel")
    b.add_argument("--repeats", type=int, default=3, help="runs; the median is reported")
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
                   help="e2e: comma-separated trade rates to ramp through, trades/s (default 5000,10000,20000,50000)")
    b.add_argument("--seconds", type=float, default=20.0, help="e2e: how long each rate is produced, seconds")
    b.add_argument("--mix", choices=["original", "custom"], default="original",
                   help="e2e: the original publisher's mix, or the custom mix with --overfill-fraction")
    b.add_argument("--overfill-fraction", type=float, default=0.5, help="e2e --mix custom: share of overfilled orders")
    b.add_argument("--channels", default="webhook,bus,sms",
                   help="e2e: channels to deliver to (webhook and bus decide the sustained rate; sms is reported)")
    b.add_argument("--webhook-batch", type=int, default=1,
                   help="e2e: alerts per webhook POST (1: one alert per request, the webhook channel's default)")
    b.set_defaults(func=cmd_bench)

    dm = sub.add_parser("demo", help="run the end-to-end demo on the running services")
    dm.add_argument("--orders", type=int, default=300, help="random orders in the original publisher's mix")
    dm.add_argument("--seed", type=int, default=7)
    dm.set_defaults(func=cmd_demo)

    ch = sub.add_parser("chaos", help="reliability campaigns: kill, outage and bad-input (make chaos)")
    from aldebaran_lab.chaos.cli import add_arguments as chaos_args

    chaos_args(ch)
    ch.set_defaults(func=cmd_chaos)

    dc = sub.add_parser("docs", help="generated documentation: the configuration reference")
    dc.add_argument("which", choices=["config"])
    dc.add_argument("--check", action="store_true", help="exit 1 if the generated section is stale; write nothing")
    dc.add_argument("--file", default=None, help="markdown file with the config:begin/end markers (default docs/operations.md)")
    dc.set_defaults(func=cmd_docs)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    envfile.load_env()
    try:
        return args.func(args) or 0
    except AldebaranError as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
