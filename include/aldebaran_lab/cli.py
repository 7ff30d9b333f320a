"""The lab's subcommands of `aldebaran` (registered by :mod:`aldebaran.cli`)."""

from __future__ import annotations

import argparse

from aldebaran import envfile

USAGE = """\
    aldebaran services up|down|status|kill [NAME ...]   local Kafka, MinIO, Airflow (+ Spark cluster)
    aldebaran services up|down|status|kill --ha [MEMBER ...]  the HA profile (make up-ha), per member
    aldebaran demo [--stop]                            the platform end to end through Airflow (make demo)
    aldebaran chaos kill-auditor|failover|kill-dispatch|kill-scheduler|kill-triggerer|kill-api-server|under-load|outages|fuzz|all
                                                       reliability campaigns (make chaos)
    aldebaran docs config [--check]                    the configuration reference in docs/operations.md
    aldebaran bench deployed [--rates R,...] [--report] the platform as `make demo` leaves it: trade → alert → log, webhook, bus
    aldebaran bench steady [--rates 5000] [--seconds 300] steady load on it: 0 restarts, each alert once in the log"""


def cmd_services(args: argparse.Namespace) -> int:
    from aldebaran_lab import services

    if args.ha:
        return _services_ha(args)
    names = tuple(args.names) or None
    if args.action == "up":
        envfile.load_env(create=True)
        wanted = names or services.CORE + (services.CLUSTER if args.cluster else ())
        services.up(wanted)
        _print_status(services.status(wanted))
    elif args.action == "down":
        if not names:  # the whole platform: first what its supervisors started outside Airflow
            from aldebaran_lab import demo_platform

            demo_platform.shut_down()
        services.down(names or services.CORE + services.CLUSTER)
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


def cmd_bench_steady(args: argparse.Namespace) -> int:
    from aldebaran_lab import steady

    return steady.main(args)


def register(sub) -> None:
    """Add `services`, `demo`, `chaos` and `docs` to the subparsers of `aldebaran`, and `bench deployed` to
    the capacity package's `bench`."""
    from aldebaran_capacity.cli import add_bench_mode

    add_bench_mode("deployed", cmd_bench_deployed)
    add_bench_mode("steady", cmd_bench_steady)
    s = sub.add_parser("services", help="start/stop/inspect the local services")
    s.add_argument("action", choices=["up", "down", "status", "kill"])
    s.add_argument("names", nargs="*", help="services (default: minio kafka airflow; down/status: all)")
    s.add_argument("--cluster", action="store_true", help="with `up`: also a Spark master and two workers")
    s.add_argument("--ha", action="store_true",
                   help="the HA profile (3 Kafka brokers, 4 MinIO nodes, Airflow on Postgres with 2 schedulers and 2 "
                        "triggerers, Spark master + 2 workers) under <run dir>/ha; NAMEs are its members")
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
