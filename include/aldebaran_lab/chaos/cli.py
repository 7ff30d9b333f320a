"""`aldebaran chaos kill-auditor|failover|kill-dispatch|dispatch-failover|kill-scheduler|kill-triggerer|kill-api-server|under-load|outages|fuzz|poison|ha|all`:
run a campaign, log its verdict, write its table into docs/reliability.md (unless --no-report). Exit status 1
when something was lost, duplicated or crashed. `ha` runs on the HA profile (`make up-ha`, which needs
Postgres): it is not part of `all`; `make chaos-ha` runs it. `poison` runs against the platform `make demo`
left running (not part of `all` either)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys

log = logging.getLogger("aldebaran_lab.chaos")

CAMPAIGNS = ("kill-auditor", "failover", "kill-dispatch", "dispatch-failover", "kill-scheduler", "kill-triggerer", "kill-api-server", "under-load",
             "outages", "fuzz")


# Campaigns that can run on private services (the others bring their own already, or fuzz the shared setup).
PRIVATE_OK = ("kill-auditor", "kill-dispatch", "dispatch-failover", "under-load")


# On the HA profile only (`make setup-ha` installs Postgres for it): never in `all`.
HA_CAMPAIGNS = ("ha",)

# Against the running platform (`make demo`): never in `all`, which brings its own processes.
LIVE_CAMPAIGNS = ("poison",)


DESCRIPTIONS = {
    "kill-auditor": "SIGKILL the streaming auditor under load; every alert once, none lost",
    "failover": "kill the active auditor; the warm standby takes over (detection + takeover time)",
    "kill-dispatch": "SIGKILL dispatchers mid-run; each alert delivered once",
    "dispatch-failover": "kill or freeze a dispatcher; its partitions move to a peer (per session timeout)",
    "kill-scheduler": "kill Airflow's scheduler while alert_dispatch runs",
    "kill-triggerer": "kill Airflow's triggerer while deferred tasks wait",
    "kill-api-server": "kill Airflow's API server while the tasks report",
    "under-load": "kills under a steady load in the original publisher's mix",
    "outages": "stop Kafka, then MinIO, under the running platform",
    "fuzz": "hostile trades, alerts, stored objects and connection extras through their real readers: "
            "nothing crashes, each is dead-lettered, quarantined or refused with its reason",
    "poison": "hostile messages on the running platform's alerts and trades topics, then an ordinary order: "
              "it reaches the log channel, each hostile message is in its dead-letter topic, nothing restarts",
    "ha": "on the HA profile (make up-ha): one kill per component under load; not part of `all`",
    "all": "every campaign but ha, in turn",
}
ALL = ("all",)
KILLS = ("kill-auditor", "failover", "kill-dispatch", "dispatch-failover", "kill-scheduler", "kill-triggerer",
         "kill-api-server", "under-load")
PRIVATE_HELP = ("run on a Kafka and a MinIO of the campaign's own (free ports, own run directory) instead of the shared "
                "ones, so that nothing else restarting the shared services (a `make test` stops them at its end) cuts a "
                "long campaign short")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from aldebaran.runtime.cliparse import add_modes, opt

    modes = {name: DESCRIPTIONS[name] for name in (*CAMPAIGNS, *LIVE_CAMPAIGNS, *HA_CAMPAIGNS, "all")}
    add_modes(p, "campaign", modes, [
        opt("--short", action="store_true", help="small data, few faults (what the test suite runs)"),
        opt("--events", modes=("kill-auditor", "failover", "outages", "fuzz", *ALL), type=int, default=None,
            help={"*": "events in the original mix", "fuzz": "orders in the original mix beside the hostile payloads"}),
        opt("--kills", modes=(*KILLS, *ALL), type=int, default=None,
            help={"*": "SIGKILLs to land", "dispatch-failover": "SIGKILLs to land per session timeout"}),
        opt("--session-timeouts", modes=("dispatch-failover", *ALL), default=None,
            help="comma list of consumer session timeouts in ms, each measured in the same run "
                 "(default 6000,10000,20000; the broker's group.min.session.timeout.ms is the floor)"),
        opt("--stalls", modes=("dispatch-failover", *ALL), default=None,
            help="comma list of freezes (SIGSTOP, seconds) of a dispatcher per session timeout (default 8,15; 'none' for none)"),
        opt("--alerts", modes=("kill-dispatch", "kill-scheduler", "kill-triggerer", "kill-api-server", *ALL), type=int,
            default=None, help="alerts to deliver"),
        opt("--rate", modes=("under-load", "ha", *ALL), type=float, default=None,
            help="trades/s offered (original publisher's mix); `ha` by default finds the highest rate whose "
                 "trade → alert p99 stays ≤ 2 s with no fault, and runs at it"),
        opt("--components", modes="ha", default=None,
            help="comma list of what to kill, in turn (default all: kafka,minio,dispatcher,scheduler,triggerer,"
                 "api-server,spark-master,spark-worker,auditor)"),
        opt("--down-seconds", modes="ha", type=float, default=None, help="seconds a killed member stays dead"),
        opt("--seconds", modes=("under-load", *ALL), type=float, default=None, help="seconds of load"),
        opt("--payloads", modes=("fuzz", *ALL), type=int, default=None, help="hostile trade messages"),
        opt("--inputs", modes=("fuzz", "poison", *ALL), type=int, default=None,
            help={"*": "hostile inputs per target besides trades (each alert topic, stored object kind, channel kind's "
                       "extras; default 10000, --short 200)",
                  "poison": "structure-aware hostile messages per topic, besides the hand-made alert cases "
                            "(default 200, --short 50)"}),
        opt("--kafka-down", modes=("outages", *ALL), type=float, default=None, help="seconds Kafka stays stopped"),
        opt("--minio-down", modes=("outages", *ALL), type=float, default=None, help="seconds MinIO stays stopped"),
        opt("--signal", modes=("outages", *ALL), choices=["term", "kill"], default="term",
            help="stop Kafka/MinIO gracefully (SIGTERM, default) or SIGKILL their process groups"),
        opt("--private-services", modes=(*PRIVATE_OK, *ALL), action="store_true",
            help={"*": PRIVATE_HELP, "all": PRIVATE_HELP + " (for " + ", ".join(PRIVATE_OK) + ")"}),
        opt("--seed", type=int, default=1, help="random seed (default 1)"),
        opt("--no-report", action="store_true", help="do not write docs/reliability.md"),
    ], title="campaigns")


def _pick(value, full, short, is_short: bool):
    return value if value is not None else (short if is_short else full)


def run_one(name: str, args: argparse.Namespace):
    short = args.short
    mode = "short" if short else "full"
    if name == "kill-auditor":
        from aldebaran_lab.chaos import kill_auditor

        return kill_auditor.run(events=_pick(args.events, 1_000_000, 10_000, short),
                                kills=_pick(args.kills, 20, 2, short), seed=args.seed, mode=mode)
    if name == "failover":
        from aldebaran_lab.chaos import failover

        return failover.run(events=_pick(args.events, 300_000, 20_000, short), kills=_pick(args.kills, 4, 1, short),
                            cold=1 if short else 2, seed=args.seed, mode=mode)
    if name == "kill-dispatch":
        from aldebaran_lab.chaos import kill_dispatch

        return kill_dispatch.run(alerts=_pick(args.alerts, 5_000, 300, short), kills=_pick(args.kills, 20, 4, short),
                                 seed=args.seed, mode=mode)
    if name == "dispatch-failover":
        from aldebaran_lab.chaos import dispatch_failover

        timeouts = args.session_timeouts or ("6000" if short else "6000,10000,20000")
        stalls = args.stalls or ("8" if short else "8,15")
        return dispatch_failover.run(timeouts_ms=[int(t) for t in timeouts.split(",")],
                                     stalls_s=[] if stalls == "none" else [float(s) for s in stalls.split(",")],
                                     kills=_pick(args.kills, 4, 1, short), seed=args.seed, mode=mode)
    if name == "kill-scheduler":
        from aldebaran_lab.chaos import kill_scheduler

        return kill_scheduler.run(alerts=_pick(args.alerts, 3_000, 300, short), kills=_pick(args.kills, 3, 1, short),
                                  seed=args.seed, mode=mode, **(kill_scheduler.SHORT if short else {}))
    if name in ("kill-triggerer", "kill-api-server"):
        from aldebaran_lab.chaos import kill_airflow

        component = name.removeprefix("kill-")
        return kill_airflow.run(component, alerts=_pick(args.alerts, 3_000, 300, short),
                                kills=_pick(args.kills, 4, 2, short), seed=args.seed, mode=mode,
                                **(kill_airflow.SHORT[component] if short else {}))
    if name == "under-load":
        from aldebaran_lab.chaos import under_load

        return under_load.run(rate=_pick(args.rate, 20_000, 20_000, short), seconds=_pick(args.seconds, 120.0, 20.0, short),
                              kills=_pick(args.kills, 8, 2, short), seed=args.seed, mode=mode)
    if name == "outages":
        from aldebaran_lab.chaos import outages

        return outages.run(events=_pick(args.events, 200_000, 10_000, short),
                           kafka_down=_pick(args.kafka_down, 30.0, 5.0, short),
                           minio_down=_pick(args.minio_down, 60.0, 5.0, short), seed=args.seed, mode=mode,
                           kill=args.signal == "kill")
    if name == "ha":
        from aldebaran_lab.chaos import ha

        components = args.components.split(",") if args.components else (
            ("kafka", "auditor") if short else ha.COMPONENTS)
        # Full: the rate is found first (ha_load.find_rate); short: a light fixed load.
        return ha.run(rate=_pick(args.rate, None, 1_000, short), components=components,
                      down_s=_pick(args.down_seconds, 10.0, 5.0, short), warmup_s=45.0, baseline_s=20.0,
                      producers=1, seed=args.seed, mode=mode)
    if name == "poison":
        from aldebaran_lab.chaos import poison

        n = _pick(args.inputs, 200, 50, short)
        return poison.run(alerts=n, trades=n, seed=args.seed, mode=mode)
    from aldebaran_lab.chaos import fuzz

    return fuzz.run(payloads=_pick(args.payloads, 10_000, 500, short), orders=_pick(args.events, 2_000, 200, short),
                    big=1 if short else 3, seed=args.seed, mode=mode,
                    inputs=_pick(args.inputs, 10_000, 200, short))


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main(args: argparse.Namespace) -> int:
    from aldebaran.runtime.progress import track
    from aldebaran_lab.chaos.common import write_report

    # SIGTERM (kill, a CI timeout) must unwind like Ctrl-C: the campaigns' `finally` blocks stop the private
    # Kafka/MinIO of `outages` and the auditors they started; Python's default SIGTERM skips them.
    signal.signal(signal.SIGTERM, _terminate)
    names = CAMPAIGNS if args.campaign == "all" else (args.campaign,)
    bad = []
    for name in track(names, "chaos", unit="campaigns", logger=log):
        if args.private_services and name in PRIVATE_OK:
            from aldebaran_lab.chaos.common import private_ports
            from aldebaran_lab.chaos.outages import private_services

            with private_services(ports=private_ports(airflow=False)):
                result = run_one(name, args)
        else:
            result = run_one(name, args)
        command = "aldebaran chaos " + " ".join(sys.argv[2:]).replace(" all", f" {name}").strip()
        verdict = "OK" if result.ok else "FAILED"
        log.info("%s: %s — runs %d, faults %d, lost %s, duplicated %s, resent under the same key %s, %.0f s", name,
                 verdict, result.runs, result.faults, result.lost, result.duplicated, result.resent_same_key,
                 result.seconds)
        from aldebaran.runtime import paths

        full = paths.ROOT / ".run" / "chaos" / f"{name}-details.json"  # every figure, also with --no-report
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(json.dumps({"command": command, **result.details}, indent=1, default=str))
        log.info("%s details (all in %s): %s", name, full, json.dumps(result.details, default=str)[:4000])
        if not args.no_report:
            log.info("table written to %s", write_report(result, command))
            if name == "ha" and "results" in result.details:
                from aldebaran_lab.chaos.ha_measure import write_results

                results = {**result.details["results"], "command": command, "load_average_after": result.load_after}
                log.info("ha results written to %s",
                         write_results(results, paths.ROOT / "docs" / "img" / "reliability-results.json"))
        if not result.ok:
            bad.append(name)
    if bad:
        log.error("campaigns with findings: %s", ", ".join(bad))
        return 1
    return 0
