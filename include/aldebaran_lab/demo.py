"""`make demo`: the platform end to end, run by Airflow the way production runs it.

1. the local platform reset: its DAGs paused, the auditor and dispatchers this host runs stopped, fresh
   topics (trades, alerts, trades.dlq), consumer groups and object-store state (demo_platform.py);
2. the challenge's example (request 1 for 100 shares; purchases 90, 30, then 10) and a few hundred orders
   in the original publisher's mix (~2 % of its purchases are for 0 shares: valid input, audited and
   counting 0), plus two malformed messages, produced to Kafka;
3. ``auditor_supervisor`` (triggered through Airflow's REST API) starts the streaming auditor with
   spark-submit, its checkpoint in MinIO; the demo waits for its alerts;
4. ``alert_dispatch`` delivers them to every configured channel (``log`` by default) through the
   delivery ledger in MinIO (``deliveries/``, what Browse → Deliveries reads);
5. ``dispatch_supervisor`` starts the streaming dispatchers; with ``ALDEBARAN_LANES_ENABLED=true``
   ``lane_supervisor`` starts the low-latency lane (the demo waits until it runs); ``platform_health`` checks
   it all;
6. alerts, DLQ reasons and deliveries, checked against the reference model.

The DAGs stay unpaused and the auditor and dispatchers keep running, as in production: produce more
trades (``aldebaran loadgen``) and watch them flow. ``aldebaran demo --stop`` pauses the DAGs and stops
the processes; ``make down`` stops everything.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

from aldebaran.audit import parse as events
from aldebaran.exceptions import AldebaranError
from aldebaran.kafka import io as kio
from aldebaran_capacity import loadgen
from aldebaran_lab import demo_platform
from aldebaran_lab.airflow_api import AirflowApi
from aldebaran_lab.demo_platform import (DAGS, DISPATCH, DISPATCH_SUPERVISOR, HEALTH, LANE_SUPERVISOR, SUPERVISOR,
                                         DemoError, Platform, api_from_env)

log = logging.getLogger(__name__)

MALFORMED = [b"this is not json", b'{"id": "x1", "#shares": "100", "client": "Sendence", "stock": "AAPL"}']
SHOWN = 12  # alerts printed in the summary


def main(args: argparse.Namespace) -> int:
    api = api_from_env()
    if args.stop:
        return stop(api)
    try:
        return Demo(api, Platform.load(), args).run()
    except AldebaranError as exc:
        print(f"demo failed: {exc}")
        return 1


def stop(api: AirflowApi) -> int:
    paused = _pause_all(api)
    stopped = demo_platform.stop(reason="aldebaran demo --stop")
    print(f"paused {', '.join(paused)}; stopped {', '.join(stopped) or 'nothing (none running)'}")
    return 0


def _pause_all(api: AirflowApi) -> list[str]:
    """Pause the demo's DAGs, and lane_supervisor too if it runs (the demo unpauses it when the lane is
    enabled; its next run would start the lane again)."""
    lane = api.dag(LANE_SUPERVISOR)
    paused = [*DAGS, *([LANE_SUPERVISOR] if lane is not None and not lane.get("is_paused") else [])]
    for dag_id in paused:
        api.set_paused(dag_id, True)
    return paused


def lane_enabled() -> bool:
    """ALDEBARAN_LANES_ENABLED: the low-latency lane is part of this platform (platform_health checks it)."""
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.settings import load

    return load(LaneSettings).enabled


class Demo:
    def __init__(self, api: AirflowApi, platform: Platform, args: argparse.Namespace) -> None:
        self.api, self.platform, self.args = api, platform, args
        self.t0 = time.monotonic()
        self.runs: dict[str, list[dict]] = {}

    def step(self, text: str) -> None:
        print(f"== [{time.monotonic() - self.t0:5.0f}s] {text}", flush=True)

    def run(self) -> int:
        kafka = self.platform.kafka
        self.platform.require_local()

        self.step("1. reset the local platform (its DAGs paused, its processes stopped, fresh topics and state)")
        self.api.wait_registered(list(DAGS), timeout=self.args.timeout)
        _pause_all(self.api)
        stopped = demo_platform.stop(self.platform)
        reset = demo_platform.reset(self.platform)
        channels = self._channels()
        for channel in channels.values():
            if getattr(channel, "path", None):
                channel.path.unlink(missing_ok=True)
        print(f"   stopped: {', '.join(stopped) or 'nothing was running'}; topics {', '.join(reset['topics'])}; "
              f"{reset['objects_removed']} old objects removed; channels: {', '.join(channels)}")

        self.step(f"2. produce the challenge example + {self.args.orders} orders (publisher's mix, seed {self.args.seed})")
        evts = list(loadgen.CHALLENGE_EXAMPLE) + list(loadgen.original_mix(self.args.orders, self.args.seed))
        recs = list(loadgen.records(iter(evts))) + [loadgen.Record(b"malformed", m) for m in MALFORMED]
        loadgen.produce(recs, kafka.trades_topic, progress_every=0)
        messages = [events.encode(e) for e in evts]
        zero_share = [events.encode(e) for e in evts if "initial_order_id" in e and e["#shares"] == 0]
        print(f"   {len(recs)} messages to {kafka.trades_topic}: {len(MALFORMED)} malformed, "
              f"{len(zero_share)} purchases of 0 shares (valid)")

        from aldebaran.audit import reference

        expected = [a for a in reference.expected_alerts(messages + MALFORMED) if a["kind"] == "OVERFILL"]

        self.step(f"3. {SUPERVISOR}: starts the streaming auditor (spark-submit, checkpoint {self.platform.checkpoint})")
        self.dag_run(SUPERVISOR)
        alerts = self.wait_alerts(len(expected))

        self.step(f"4. {DISPATCH}: delivers the alerts to {', '.join(channels)} (ledger under "
                  f"{self.platform.ledger_prefix}/)")
        self.dag_run(DISPATCH)
        lane = lane_enabled()
        self.step(f"5. {DISPATCH_SUPERVISOR} starts the streaming dispatchers; "
                  + (f"{LANE_SUPERVISOR} the low-latency lane (ALDEBARAN_LANES_ENABLED); " if lane else "")
                  + f"{HEALTH} checks the platform")
        self.dag_run(DISPATCH_SUPERVISOR)
        if lane:  # platform_health checks the lane where it is enabled: it must run first
            self.dag_run(LANE_SUPERVISOR)
            demo_platform.wait_lane_running(self.args.timeout, say=lambda msg, *a: print("   " + msg % a, flush=True))
        self.dag_run(HEALTH, must_succeed=False)
        return self.report(alerts, expected, messages, zero_share, channels)

    # --- Airflow ----------------------------------------------------------------------------------
    def dag_run(self, dag_id: str, must_succeed: bool = True) -> dict:
        """Unpause the DAG (its production state), trigger a run now and wait for it. Unpausing may also
        start the DAG's scheduled run: with max_active_runs=1 the two run one after the other, and both
        are waited for and shown (e.g. the scheduled supervisor run starts the auditor, the manual one
        finds it healthy)."""
        since = datetime.now(timezone.utc) - timedelta(seconds=1)
        self.api.set_paused(dag_id, False)
        run_id = self.api.trigger(dag_id)
        t0 = time.monotonic()
        seen: dict[str, str] = {}
        runs: list[dict] = []

        def progress(run: dict) -> None:
            if seen.get(run["dag_run_id"]) != run.get("state"):
                seen[run["dag_run_id"]] = run.get("state")
                print(f"   {dag_id} {run['dag_run_id']}: {run.get('state')} after {time.monotonic() - t0:.0f}s",
                      flush=True)

        mine = self.api.wait_run(dag_id, run_id, self.args.timeout, progress)
        # The runs the unpause and the trigger made (not the next minute's scheduled one).
        until = datetime.fromisoformat(mine["queued_at"]) + timedelta(seconds=5)
        for run in self.api.runs_since(dag_id, since):
            if datetime.fromisoformat(run["queued_at"]) > until:
                continue
            run = self.api.wait_run(dag_id, run["dag_run_id"], self.args.timeout, progress)
            tasks = self.api.task_states(dag_id, run["dag_run_id"])
            print(f"   {run['dag_run_id']} ({run.get('run_type')}) tasks: "
                  f"{', '.join(f'{t} {s}' for t, s in sorted(tasks.items()))}")
            runs.append({"run_id": run["dag_run_id"], "state": run["state"], "tasks": tasks})
        self.runs[dag_id] = runs
        failed = [r for r in runs if r["state"] != "success"]
        if must_succeed and failed:
            raise DemoError(f"{dag_id} run {failed[0]['run_id']} {failed[0]['state']}: tasks {failed[0]['tasks']}; "
                            f"its logs are in the Airflow UI (Dags → {dag_id} → Runs)")
        return runs[-1]

    def wait_alerts(self, expected: int) -> list[dict]:
        kafka = self.platform.kafka
        deadline = time.monotonic() + self.args.timeout
        t0 = time.monotonic()
        last = -1
        while True:
            alerts = [json.loads(m.value()) for m in kio.read_topic(kafka, kafka.alerts_topic, idle=1.0)]
            overfills = {a["alert_id"] for a in alerts if a["kind"] == "OVERFILL"}
            if len(overfills) != last:
                print(f"   {len(overfills)}/{expected} OVERFILL alerts on {kafka.alerts_topic} after "
                      f"{time.monotonic() - t0:.0f}s", flush=True)
                last = len(overfills)
            if len(overfills) >= expected:
                return alerts
            if time.monotonic() > deadline:
                raise DemoError(f"the auditor emitted {len(overfills)} of {expected} expected alerts in "
                                f"{self.args.timeout:.0f}s: `aldebaran auditor status`, and its log under "
                                ".run/logs/supervisor/")
            time.sleep(3.0)

    def _channels(self) -> dict:
        from aldebaran.delivery.channels.config import configured_channels

        return {c.name: c for c in configured_channels(self.platform.channels)}

    # --- results ----------------------------------------------------------------------------------
    def report(self, alerts: list[dict], expected: list[dict], messages: list[bytes], zero_share: list[bytes],
               channels: dict) -> int:
        from aldebaran.audit import reference
        from aldebaran.delivery.ledger import Ledger
        from aldebaran.storage.store import open_store

        kafka = self.platform.kafka
        self.step("6. results")
        print(f"   alerts on {kafka.alerts_topic}: {len(alerts)} ({dict(Counter(a['kind'] for a in alerts))})")
        print(f"   {'kind':<9} {'order_id':<38} {'requested':>9} {'purchased':>9} {'n':>2}  trigger")
        shown = sorted(alerts, key=lambda a: (a["order_id"] != "1", a["order_id"]))
        for a in shown[:SHOWN]:
            print(f"   {a['kind']:<9} {a['order_id']:<38} {a['requested']!s:>9} {a['purchased']:>9} "
                  f"{a['purchase_count']:>2}  {a['trigger_event_id']}")
        if len(shown) > SHOWN:
            print(f"   ... {len(shown) - SHOWN} more")
        dlq = kio.read_topic(kafka, kafka.dlq_topic)
        reasons = Counter(dict(m.headers() or []).get("aldebaran.reason_code", b"?").decode() for m in dlq)
        print(f"   DLQ {kafka.dlq_topic}: {len(dlq)} messages {dict(reasons)}")

        ledger = Ledger(open_store(), prefix=self.platform.ledger_prefix)
        delivered = self._delivered(ledger, channels, {a["alert_id"] for a in alerts})
        health_ok = all(r["state"] == "success" for r in self.runs[HEALTH])
        ids = {a["alert_id"] for a in alerts}
        order1 = [a for a in alerts if a["order_id"] == "1"]
        checks = {
            "exactly one OVERFILL for order 1": [a["kind"] for a in order1] == ["OVERFILL"],
            "OVERFILL alerts equal the reference model":
                sorted(reference.key(a) for a in alerts if a["kind"] == "OVERFILL") == sorted(map(reference.key, expected)),
            "each alert delivered once on every channel": all(got == ids for got in delivered.values()),
            # (as a set: the DLQ is at-least-once, a re-run batch may write a record twice)
            "malformed input on the DLQ, nothing else": {m.value() for m in dlq} == set(MALFORMED),
            "0-share purchases audited, not on the DLQ": not set(zero_share) & {m.value() for m in dlq},
            f"Airflow ran {', '.join(self.runs)}": all(r["state"] == "success" for d, runs in self.runs.items()
                                                        if d != HEALTH for r in runs),
            f"{HEALTH} passed": health_ok,
        }
        if not health_ok:
            print(f"   {HEALTH} found: {self._health_problems()}")
        print("== summary")
        for name, ok in checks.items():
            print(f"   [{'ok' if ok else 'FAIL'}] {name}")
        address = self.api.base
        print(f"   demo took {time.monotonic() - self.t0:.0f}s. Airflow UI: {address} (user admin, password "
              "ALDEBARAN_AIRFLOW_ADMIN_PASSWORD in .env); Browse → Deliveries shows the ledger.")
        print("   The auditor and dispatchers keep running under their supervisors (ORPHAN alerts follow when books "
              "expire, ALDEBARAN_AUDIT_TTL_SECONDS). `aldebaran demo --stop` stops them; `make down` stops all.")
        return 0 if all(checks.values()) else 1

    def _delivered(self, ledger, channels: dict, ids: set[str]) -> dict[str, set[str]]:
        """{channel: the alert ids the recipient has}: the log channel's file, else the ledger's DELIVERED."""
        out = {}
        for name, channel in channels.items():
            path = getattr(channel, "path", None)
            if path is not None:
                lines = path.read_text().splitlines() if path.exists() else []
                got = [json.loads(line)["alert"]["alert_id"] for line in lines]
                counts = Counter(got)
                twice = sum(1 for n in counts.values() if n > 1)
                out[name] = set(got) if not twice else set()
                print(f"   {name}: {len(got)} lines in {path}, {len(counts)} alerts, {twice} twice")
            else:
                states = ledger.states(name)
                out[name] = {a for a, s in states.items() if s == "DELIVERED"}
                print(f"   {name}: {dict(Counter(states.values()))} in the ledger")
        return out

    def _health_problems(self) -> str:
        from aldebaran.exceptions import NotFound
        from aldebaran.platform.settings import HealthSettings
        from aldebaran.settings import load
        from aldebaran.storage.store import open_store

        store = open_store()
        try:
            record = store.get(f"{load(HealthSettings).prefix.strip('/')}/latest.json").json()
        except NotFound:
            return "(no health record: see the run's log)"
        return "; ".join(record.get("problems") or []) or "(no problems recorded)"
