"""`aldebaran` — the platform's one command line.

The core commands are the product's; the capacity and lab packages add theirs when they are importable
(:data:`EXTENSIONS`). A deployment that leaves them out (the image: .dockerignore) still has these:
each extension is a ``<package>.cli`` module with ``USAGE`` (its lines of the overview below) and
``register(subparsers)``. Found by import, not by entry points: `make setup` installs the work tree
editable once (include/ on sys.path), so a package added or left out is seen without reinstalling.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys

from aldebaran import envfile
from aldebaran.exceptions import AldebaranError

log = logging.getLogger("aldebaran")

# Packages that may add subcommands, in the order their commands are listed. The lab comes after the
# capacity package it builds on; neither is imported by anything else in the product.
EXTENSIONS = ("aldebaran_capacity", "aldebaran_lab")

CORE_USAGE = """\
    aldebaran auditor run|status                       the streaming auditor
    aldebaran dispatch [--channel NAME] [--follow]     deliver alerts to the configured channels (once, or streaming)
    aldebaran dispatch --fast [--follow]               deliver the fast lane's alerts to the channels that opted in
    aldebaran deliveries stats|list|show|retry|resolve inspect and settle the delivery ledger
    aldebaran explain ALERT_ID [--json]                one alert's story: its trades, trigger and deliveries
    aldebaran lanes run|status|stop|resolve            the low-latency lane (real-time mode) and its reconciliation"""

DESCRIPTION = """`aldebaran` — the platform's one command line.

{usage}

Every subcommand loads the git-ignored .env first (generated credentials); real environment
variables win over it. `aldebaran SUBCOMMAND --help` documents each.
"""


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("botocore", "boto3", "urllib3", "py4j", "s3transfer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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

        return service.follow(args.channel or None, args.name, fast=args.fast)
    if args.fast:
        from aldebaran.delivery import fast

        stats = fast.run_once(channels=args.channel or None, max_alerts=args.max_alerts, idle_timeout=args.idle_timeout)
    else:
        stats = dispatcher.run_once(
            channels=args.channel or None, max_alerts=args.max_alerts, idle_timeout=args.idle_timeout
        )
    print(json.dumps(stats.summary()))
    return 0


def cmd_deliveries(args: argparse.Namespace) -> int:
    from aldebaran.delivery import tools

    return tools.main(args)


def cmd_explain(args: argparse.Namespace) -> int:
    from aldebaran import explain

    return explain.main(args)


def cmd_lanes(args: argparse.Namespace) -> int:
    if args.action == "stop":
        # Stopping the keeper is the lane supervisor's step (its launch record, its process group).
        import json

        from aldebaran.platform.lane_supervisor import stop

        print(json.dumps({"stopped_pids": stop()}))
        return 0
    from aldebaran.lanes import status

    return status.main(args)


def extensions() -> list:
    """The ``cli`` modules of the extension packages that are importable here."""
    return [importlib.import_module(f"{name}.cli") for name in EXTENSIONS if importlib.util.find_spec(name)]


def build_parser() -> argparse.ArgumentParser:
    found = extensions()
    usage = "\n".join([CORE_USAGE, *(ext.USAGE for ext in found)])
    p = argparse.ArgumentParser(prog="aldebaran", description=DESCRIPTION.format(usage=usage),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

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
    d.add_argument("--fast", action="store_true",
                   help="deliver the low-latency lane's alerts (ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC) to the channels "
                        'whose connection says "fast": true (heartbeat name fast-lane)')
    d.add_argument("--max-alerts", type=int, default=None, help="stop after this many alerts")
    d.add_argument("--idle-timeout", type=float, default=None,
                   help="stop after this many seconds without alerts (default ALDEBARAN_DELIVERY_IDLE_SECONDS)")
    d.set_defaults(func=cmd_dispatch)

    dl = sub.add_parser("deliveries", help="inspect the delivery ledger")
    from aldebaran.delivery.tools import add_arguments

    add_arguments(dl)
    dl.set_defaults(func=cmd_deliveries)

    ex = sub.add_parser("explain", help="one alert: the trades that built its book, its trigger, its deliveries")
    from aldebaran.explain import add_arguments as explain_arguments

    explain_arguments(ex)
    ex.set_defaults(func=cmd_explain)

    ln = sub.add_parser("lanes", help="both alert lanes; run, stop or settle the low-latency lane")
    from aldebaran.lanes.status import add_arguments as lanes_arguments

    lanes_arguments(ln)
    ln.set_defaults(func=cmd_lanes)

    for ext in found:
        ext.register(sub)
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
