"""The lab's subcommands of `aldebaran` (the ``lab`` entry point of the ``aldebaran.commands`` group, read by
:mod:`aldebaran.cli.main`), and its bench modes `deployed` and `steady` (the ``lab`` entry point of the capacity
package's ``aldebaran.bench`` group: :func:`add_bench_modes`)."""

from __future__ import annotations

import argparse

from aldebaran.runtime import envfile

USAGE = """\
    aldebaran services up|down|status|kill [NAME ...]   local Kafka, MinIO, Airflow (+ Spark cluster)
    aldebaran services up|down|status|kill --ha [MEMBER ...]  the HA profile (make up-ha), per member
    aldebaran demo [--stop]                            the platform end to end through Airflow (make demo)
    aldebaran chaos kill-auditor|failover|kill-dispatch|kill-scheduler|kill-triggerer|kill-api-server|under-load|outages|fuzz|all
                                                       reliability campaigns (make chaos)
    aldebaran docs config [--check]                    the configuration reference in docs/operations.md
    aldebaran bench deployed [--rates R,...] [--runs 3] [--with-lane [--fast-webhook]] [--report]
                                                       the platform as `make demo` leaves it: at rest, trade → alert →
                                                       log, webhook, bus beside the hand-rolled loop, its capacity
    aldebaran bench batch-cost [--rates 1000,5000] [--runs 3]  the exact auditor's cost per batch, Spark settings A/B
    aldebaran bench steady [--rates 5000] [--seconds 300] steady load on it: 0 restarts, each alert once in the log
    aldebaran chaos CAMPAIGN --help                    each campaign's options"""


def cmd_services(args: argparse.Namespace) -> int:
    from aldebaran_lab import services

    if args.ha:
        return _services_ha(args)
    names = tuple(args.names) or None
    if args.action == "up":
        envfile.load_env(create=True)
        wanted = names or services.CORE + services.optional() + (services.CLUSTER if args.cluster else ())
        services.up(wanted)
        _print_status(services.status(wanted))
    elif args.action == "down":
        if not names:  # the whole platform: first what its supervisors started outside Airflow
            from aldebaran_lab import demo_platform

            demo_platform.shut_down()
        services.down(names or services.CORE + services.CLUSTER + services.OPTIONAL)
    elif args.action == "kill":
        for name in names or ():
            services.get(name).kill()
    else:
        _print_status(services.status(names or services.CORE + services.CLUSTER))
    return 0


def _services_ha(args: argparse.Namespace) -> int:
    from aldebaran_lab.services import ha

    names = tuple(args.names)
    if args.action == "up":
        seconds = ha.up(names)
        _print_status(ha.status(names))
        print(f"\nHA profile up in {seconds:.0f} s. Point any aldebaran command at it with\n"
              f"  ALDEBARAN_ENV_FILE={ha.env_path()} aldebaran ...\n"
              f"Airflow: http://127.0.0.1:{ha.LAYOUT.airflow_port} (admin, password in {ha.env_path().name})")
    elif args.action == "down":
        ha.down(names)
    elif args.action == "kill":
        if not names:
            raise SystemExit("services kill --ha: name the members to kill (services status --ha lists them)")
        for name in names:
            ha.kill(name)
    else:
        rows = ha.status(names)
        _print_status(rows)
        usage = ha.usage()
        rss, pss = (sum(u[i] for u in usage.values()) / 2**20 for i in (0, 1))
        print(f"\n{sum(r.running for r in rows)}/{len(rows)} running, {sum(r.healthy for r in rows)} healthy; "
              f"memory: RSS {rss:,.0f} MiB summed over processes, PSS {pss:,.0f} MiB (shared pages counted once)")
    return 0


def _print_status(rows) -> None:
    header = f"{'service':<22} {'pid':>7}  {'running':<8} {'healthy':<8} {'address':<24} log"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.name:<22} {r.pid or '-':>7}  {'yes' if r.running else 'no':<8} "
            f"{'yes' if r.healthy else 'no':<8} {r.address:<24} {r.log}"
        )


def cmd_chaos(args: argparse.Namespace) -> int:
    from aldebaran_lab.chaos import cli as chaos_cli

    return chaos_cli.main(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from aldebaran_lab import demo

    return demo.main(args)


def cmd_docs(args: argparse.Namespace) -> int:
    from aldebaran_lab import docsgen

    return docsgen.main(args)


def cmd_bench_deployed(args: argparse.Namespace) -> int:
    from aldebaran_lab import deployed

    return deployed.main(args)


def cmd_bench_batch_cost(args: argparse.Namespace) -> int:
    from aldebaran_lab import batch_cost

    return batch_cost.main(args)


def cmd_bench_steady(args: argparse.Namespace) -> int:
    from aldebaran_lab import steady

    return steady.main(args)


WEBHOOK_BATCH = 100  # the bench's webhook: the batch mode, the one that keeps up at 10k alerts/s on this box


def add_bench_modes(bench) -> None:
    """Add `deployed` and `steady` to the subparsers of `aldebaran bench` (the capacity package's)."""
    dp = bench.add_parser("deployed", help="the platform as `make demo` leaves it: trade → alert → log, webhook, bus",
                          description="The figure we publish: the running platform (Airflow supervising the auditor "
                                      "and the dispatchers) fed by a plain confluent-kafka producer.")
    dp.add_argument("--rates", default=None, help="comma-separated paced rates, trades/s (default 1000,5000,10000,20000)")
    dp.add_argument("--runs", type=int, default=3,
                    help="runs of every rate, interleaved (run 1: all rates, run 2: all rates, ...); the figure is "
                         "their median, with the spread of their p99 (default 3)")
    dp.add_argument("--seconds", type=float, default=20.0, help="how long each rate is produced, seconds (default 30)")
    dp.add_argument("--drain-seconds", type=float, default=60.0,
                    help="after each rate, how long to wait for its alerts and deliveries (default 60)")
    dp.add_argument("--rest-seconds", type=float, default=60.0,
                    help="the platform at rest: CPU per role over this long with no load (default 60)")
    dp.add_argument("--no-rest", action="store_true", help="skip the measurement at rest")
    dp.add_argument("--rest-runs", type=int, default=1,
                    help="the rest right after the demo this many times, each after its own `aldebaran demo`: the "
                         "median and the spread (default 1: the platform as it is, no demo run)")
    dp.add_argument("--rest-only", action="store_true",
                    help="only the rest right after the demo (with --report: `deployed.rest` is replaced, the other "
                         "figures kept as they were, marked with their run)")
    dp.add_argument("--capacity-rates", default=None,
                    help="the capacity ladder's offered rates, events/s (default 5000,10000,20000,30000,40000,60000,80000)")
    dp.add_argument("--rung-seconds", type=float, default=60.0, help="how long each capacity rung lasts (default 60)")
    dp.add_argument("--no-capacity", action="store_true", help="skip the capacity ladders")
    dp.add_argument("--webhook-batch", type=int, default=WEBHOOK_BATCH,
                    help=f"alerts per webhook POST (the connection extra `batch`; 1: one alert per request, which "
                         f"peaks near 600 deliveries/s on 2 cores: docs/benchmarks.md, dispatch; default {WEBHOOK_BATCH})")
    dp.add_argument("--with-lane", action="store_true",
                    help="also with the fast lane switched on (lane_supervisor through Airflow): its rest and the "
                         "segments reading both lanes; the lane is put back as it was")
    dp.add_argument("--lane-only", action="store_true",
                    help="only the figures beside the lane (`deployed.with_lane`): the exact-lane figures already in "
                         "docs/img/bench-results.json are kept, marked with the run they came from")
    dp.add_argument("--fast-webhook", action="store_true",
                    help="with the lane: the webhook opts in to the fast lane (\"fast\": true), so its recipient's "
                         "figures are trade → fast recipient (`with_lane.segments[].fast_delivery_*`); Airflow must "
                         "run with ALDEBARAN_LANES_ENABLED=true (the dispatch_supervisor then starts the fast dispatcher)")
    dp.add_argument("--exact-nice", default=None,
                    help="with the lane: comma-separated nice levels of the exact auditor (e.g. 0,10), each run measures "
                         "every rate at each in turn (`with_lane.exact_nice_ab`); the headline is the shipped "
                         "ALDEBARAN_SUPERVISOR_NICE's")
    dp.add_argument("--start", action="store_true", help="run `aldebaran demo` first when the platform is not running")
    dp.add_argument("--report", action="store_true",
                    help="write its section of docs/benchmarks.md and its key of docs/img/bench-results.json")
    dp.set_defaults(func=cmd_bench_deployed)

    bc = bench.add_parser("batch-cost", help="the exact auditor's cost per batch: Spark settings A/B on the demo platform",
                          description="The exact auditor's fixed cost of a micro-batch, variants of its Spark settings "
                                      "side by side on the running demo platform (aldebaran_lab.batch_cost).")
    bc.add_argument("--rates", default="1000,5000", help="comma-separated paced rates, trades/s (default 1000,5000)")
    bc.add_argument("--seconds", type=float, default=30.0, help="how long each rate is produced (default 30)")
    bc.add_argument("--runs", type=int, default=3, help="runs of every variant, interleaved (default 3)")
    bc.add_argument("--variants", default=None,
                    help="comma-separated: spark-delete, bulk-delete, interpreted, c1-only, c1-serial (Spark and JVM "
                         "settings), per-batch-udf (the shard tasks' function built every batch): the default set; "
                         "or interval-0, interval-500ms, interval-1s (the trigger interval)")
    bc.add_argument("--out", default=None, help="also write the result's JSON to this file (as it goes)")
    bc.add_argument("--render-from", default=None, help="a finished run's --out file: report it, do not run")
    bc.add_argument("--report", action="store_true",
                    help="write its section of docs/benchmarks.md and `batch_cost` in docs/img/bench-results.json")
    bc.set_defaults(func=cmd_bench_batch_cost)

    st = bench.add_parser("steady", help="steady load on the running platform: 0 restarts, each alert once in the log",
                          description="Steady load on the platform as `make demo` leaves it: no supervisor restart, "
                                      "each alert once in the log channel.")
    st.add_argument("--rates", default=None, help="the paced rate, trades/s (the first of a list; default 5000)")
    st.add_argument("--seconds", type=float, default=20.0, help="how long the load lasts, seconds (default 300)")
    st.set_defaults(func=cmd_bench_steady)


def register(sub) -> None:
    """Add `services`, `demo`, `chaos` and `docs` to the subparsers of `aldebaran`."""
    s = sub.add_parser("services", help="start/stop/inspect the local services",
                       description="The local services: Kafka, MinIO, Airflow (+ a Spark cluster), or with --ha "
                                   "the members of the HA profile.")
    from aldebaran.runtime.cliparse import add_modes, opt

    add_modes(s, "action", {"up": "start them (default: minio kafka airflow) and wait until healthy",
                            "down": "stop them (default: all, and what the platform's supervisors started)",
                            "status": "one line per service (default: all)",
                            "kill": "SIGKILL the named services' process groups"}, [
        opt("names", nargs="*", metavar="NAME", help="services (HA members with --ha)"),
        opt("--cluster", modes="up", action="store_true", help="also a Spark master and two workers"),
        opt("--ha", action="store_true",
            help="the HA profile (3 Kafka brokers, 4 MinIO nodes, Airflow on Postgres with 2 schedulers and 2 "
                 "triggerers, Spark master + 2 workers) under <run dir>/ha; NAMEs are its members"),
    ], title="actions")
    s.set_defaults(func=cmd_services)

    dm = sub.add_parser("demo", help="the platform end to end through Airflow, on the running local services")
    dm.add_argument("--orders", type=int, default=300, help="random orders in the original publisher's mix")
    dm.add_argument("--seed", type=int, default=7)
    dm.add_argument("--timeout", type=float, default=600.0,
                    help="seconds each step may take (a DAG run, the auditor's alerts) before the demo fails")
    dm.add_argument("--stop", action="store_true",
                    help="instead: pause the demo's DAGs and stop the auditor and dispatchers it left running")
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
