"""`aldebaran` — the platform's one command line.

The core commands are the product's; other packages add theirs through the ``aldebaran.commands``
entry-point group (importlib.metadata): the capacity package (`loadgen`, `bench`) and the lab
(`services`, `demo`, `chaos`, `docs`, and `bench deployed|steady` through ``aldebaran.bench``). Each
entry point names a ``cli`` module with ``USAGE`` (its lines of the overview below) and
``register(subparsers)``. setup.py declares an entry point only for the packages present in the tree it
installs, so a deployment that leaves one out (the image: .dockerignore drops the lab) has no entry
point for it, and the product never imports those packages by name.

Entry points are package metadata, written when the tree is installed: `make setup` installs this work
tree editable (the code under include/ is live), and reinstalls it when pyproject.toml or setup.py change;
a package added to include/ gets its commands after that reinstall (`pip install -e .`). An entry point
whose package is not importable here (metadata older than the tree) is skipped (a debug message).

Modes are nested subcommands (aldebaran.runtime.cliparse): `aldebaran bench deployed --help` shows only that
bench's options.
"""

from __future__ import annotations

import argparse
import logging
import sys
from types import ModuleType

from aldebaran.runtime import envfile, logs
from aldebaran.runtime.cliparse import Parser, add_modes, load_entry_points, opt
from aldebaran.exceptions import AldebaranError

log = logging.getLogger("aldebaran")

# The entry-point group of the packages that add commands, listed by entry-point name.
COMMANDS_GROUP = "aldebaran.commands"

CORE_USAGE = """\
    aldebaran auditor run|status                       the streaming auditor
    aldebaran dispatch [--channel NAME] [--follow]     deliver alerts to the configured channels (once, or streaming)
    aldebaran dispatch --fast [--follow]               deliver the fast lane's alerts to the channels that opted in
    aldebaran deliveries channels|stats|list|runs|show|retry|resolve  the channels' promises; the ledger
    aldebaran explain ALERT_ID [--json]                one alert's story: its trades, trigger and deliveries
    aldebaran lanes run|status|stop|resolve            the low-latency lane (real-time mode) and its reconciliation"""

DESCRIPTION = """`aldebaran` — the platform's one command line.

{usage}

Every subcommand loads the git-ignored .env first (generated credentials); real environment
variables win over it. `aldebaran SUBCOMMAND --help` documents each (and `aldebaran bench MODE --help`
each mode).
"""


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
    from aldebaran.cli import explain

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


def extensions() -> list[ModuleType]:
    """The ``cli`` modules of the ``aldebaran.commands`` entry points, by entry-point name; one whose
    package is not importable here is skipped (a debug message names it)."""
    return load_entry_points(COMMANDS_GROUP)


def build_parser() -> argparse.ArgumentParser:
    found = extensions()
    usage = "\n".join([CORE_USAGE, *(ext.USAGE for ext in found)])
    p = Parser(prog="aldebaran", description=DESCRIPTION.format(usage=usage))
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    a = sub.add_parser("auditor", help="run the streaming auditor or show its heartbeat",
                       description="The streaming auditor: `run` it, or show its `status` (heartbeat, progress).")
    from aldebaran.audit.settings import add_cli_flags
    from aldebaran.settings import KafkaSettings, env_var_of

    topic_flags = [
        opt("--" + name.replace("_", "-"), modes="run", dest=name, default=None,
            help=f"{KafkaSettings.model_fields[name].description.split(': ', 1)[-1]} "
                 f"[env {env_var_of(KafkaSettings, name)}; default {KafkaSettings.model_fields[name].default}]")
        for name in AUDITOR_TOPIC_FLAGS]
    modes = add_modes(a, "action", {"run": "run the streaming auditor (what auditor_supervisor starts)",
                                    "status": "the auditor's heartbeat and progress from its checkpoint"}, topic_flags)
    for mode in modes.choices.values():
        add_cli_flags(mode)
    a.set_defaults(func=cmd_auditor)

    d = sub.add_parser("dispatch", help="deliver alerts to the configured channels (once, or --follow)",
                       description="Deliver the alerts waiting on the alerts topic to the configured channels, then "
                                   "exit; --follow: a streaming dispatcher with a heartbeat.")
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

    dl = sub.add_parser("deliveries", help="inspect and settle the delivery ledger",
                        description="The channels and their promises; look into the delivery ledger and settle "
                                    "IN_DOUBT/DEAD deliveries by hand.")
    from aldebaran.delivery.tools import add_arguments

    add_arguments(dl)
    dl.set_defaults(func=cmd_deliveries)

    ex = sub.add_parser("explain", help="one alert: the trades that built its book, its trigger, its deliveries",
                        description="One alert's whole story: the alert, the trades that built its book (read back "
                                    "from Kafka), the trigger event and every channel's delivery state.")
    from aldebaran.cli.explain import add_arguments as explain_arguments

    explain_arguments(ex)
    ex.set_defaults(func=cmd_explain)

    ln = sub.add_parser("lanes", help="both alert lanes; run, stop or settle the low-latency lane",
                        description="The low-latency lane (Spark real-time mode) beside the exact lane.")
    from aldebaran.lanes.status import add_arguments as lanes_arguments

    lanes_arguments(ln)
    ln.set_defaults(func=cmd_lanes)

    for ext in found:
        ext.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    envfile.load_env()  # first: ALDEBARAN_LOG_FORMAT may be set there
    try:
        logs.setup(args.command, verbose=args.verbose)  # the role of a JSON line: auditor, dispatch, lanes...
        return args.func(args) or 0
    except AldebaranError as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
