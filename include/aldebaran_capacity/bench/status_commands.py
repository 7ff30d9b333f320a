"""``aldebaran bench status-commands``: how long the operators' status commands take on a long history.

The status commands (``lanes status``, ``deliveries stats``, ``deliveries show``, ``explain``) and the
platform health check read bounded state (heartbeats, counters, indexes, the alert's own records): their
time must not grow with the history. This builds a large synthetic history cheaply, apart from the live
platform — its own alerts topic, ledger prefix, lane name and health prefix, removed at the end:

- the alerts topic: `messages` keyed messages (a day of alerts at the default size), then one real alert
  last (the one explained: a recent alert, as an operator asks about);
- the ledger: runs of `run_size` offsets covering every message, on three channels (what a day of
  group commits leaves), a few index markers (DEAD, IN_DOUBT);
- the lane: `unconfirmed` records, and a keeper heartbeat whose reconcile counts name them.

Then each command runs as an operator runs it (a fresh process, the median of `repeats`; ``<command>_s``
is the time from the call to the answer, the interpreter's start apart), and the exhaustive variants
beside them for contrast (``lanes status --full``, ``explain --scan``). Figures go under ``status_commands`` in docs/img/bench-results.json (``<command>_s``) and its
section of docs/benchmarks.md with ``--report``. Sizes are the caller's: ``--quick`` builds a small
history, enough to prove the mode works, not to publish.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

BEGIN, END = "<!-- status-commands:begin -->", "<!-- status-commands:end -->"
DAY = {"messages": 4_000_000, "run_size": 100, "unconfirmed": 15_000}  # ~50 alerts/s for a day
QUICK = {"messages": 20_000, "run_size": 100, "unconfirmed": 200}
CHANNELS = ("webhook", "bus", "sms")
PARTITIONS = 6


def build(env: dict, messages: int, run_size: int, unconfirmed: int) -> dict:
    """The synthetic history under the names in `env`; returns what the commands are asked about."""
    from aldebaran.runtime import heartbeat
    from aldebaran.delivery.runs import DELIVERED, RECORDED, Run
    from aldebaran.kafka.admin import ensure_topics
    from aldebaran.kafka.io import producer
    from aldebaran.model import Alert
    from aldebaran.settings import KafkaSettings, load
    from aldebaran.storage.store import open_store

    kafka = load(KafkaSettings, alerts_topic=env["ALDEBARAN_KAFKA_ALERTS_TOPIC"])
    ensure_topics(kafka, [kafka.alerts_topic], partitions=PARTITIONS)
    p = producer(kafka, **{"linger.ms": 50, "batch.num.messages": 10000})
    value = b'{"bench":"status-commands","pad":"' + b"x" * 200 + b'"}'
    for i in range(messages):
        while True:
            try:
                p.produce(kafka.alerts_topic, key=f"bench-{i}".encode(), value=value)
                break
            except BufferError:
                p.poll(0.1)
        if i % 10_000 == 0:
            p.poll(0)
    now = time.time()
    target = Alert(uuid.uuid4().hex, "OVERFILL", "bench-order", "bench-client", "BNCH", 100, 150, 2, None, None,
                   int(now * 1000), {"rule": "bench", "message": "status-commands bench"})
    where: dict = {}
    p.produce(kafka.alerts_topic, key=target.alert_id.encode(), value=target.to_json(),
              on_delivery=lambda err, msg: where.update(err=err, at=(msg.partition(), msg.offset())))
    if p.flush(120) or where.get("err"):
        raise RuntimeError(f"bench status-commands: producing the history failed: {where.get('err')}")
    from aldebaran.kafka.io import end_offsets

    ends = end_offsets(kafka, kafka.alerts_topic)
    store = open_store()
    prefix = env["ALDEBARAN_DELIVERY_PREFIX"]

    def put_runs(job) -> int:
        channel, partition = job
        n = 0
        for start in range(0, ends[partition], run_size):
            end = min(start + run_size, ends[partition]) - 1
            entries = [[o, target.alert_id if (partition, o) == where["at"] else f"bench-{partition}-{o}",
                        DELIVERED, None] for o in range(start, end + 1)]
            run = Run(channel, kafka.alerts_topic, partition, start, end, 1, "bench", RECORDED, now, entries, now)
            store.put(f"{prefix}/{channel}/runs/{kafka.alerts_topic}/{partition:05d}/{start:020d}.json", run.to_bytes())
            n += 1
        return n

    with ThreadPoolExecutor(32) as pool:
        runs = sum(pool.map(put_runs, [(c, q) for c in CHANNELS for q in ends]))
        for c in CHANNELS:
            for kind in ("dead", "in_doubt"):
                store.put(f"{prefix}-index/{kind}/{c}/bench-{kind}-1", b"")
        lane, records = env["ALDEBARAN_LANES_NAME"], env["ALDEBARAN_LANES_RECORDS_PREFIX"]
        ids = [f"bench-unconfirmed-{i:07d}" for i in range(unconfirmed)]
        body = {"lane": lane, "fast_ts": int(now * 1000) - 3_600_000, "why": "bench", "alert": None}
        list(pool.map(lambda a: store.put(f"{records}/{lane}/unconfirmed/{a}.json",
                                          json.dumps({**body, "alert_id": a}).encode()), ids))
    counts = {"fast": unconfirmed, "exact": 0, "confirmed": 0, "confirmed_late": 0, "unconfirmed": unconfirmed,
              "missed": 0, "repeats": 0}
    heartbeat.publish(store, heartbeat.LANE, lane, {
        "status": "running", "name": lane, "at": time.time(), "host": "bench", "pid": 0, "lane": {},
        "reconcile": {"counts": counts, "unconfirmed_ids": ids[:50], "oldest_unconfirmed_ms": body["fast_ts"],
                      "pending_fast": 0, "pending_exact": 0, "ttl_ms": 60_000, "rejected": 0}})
    return {"alert_id": target.alert_id, "position": where["at"], "runs": runs, "topic_messages": sum(ends.values())}


# Runs one command in a fresh process and reports, on its last stderr line, the time from the call to the
# answer: the interpreter's start (the same for every command, `startup_s`) is left out of `<command>_s`.
_TIMED = """
import json, sys, time
from aldebaran.cli import main as cli
from aldebaran.runtime import envfile
envfile.load_env()
argv = json.loads(sys.argv[1])
t0 = time.perf_counter()
if argv == ["health"]:
    from aldebaran.platform import health
    health.check("bench-status-commands")
    rc = 0
else:
    rc = cli.main(argv)
print("\\nSTATUS_COMMAND_S", time.perf_counter() - t0, file=sys.stderr)
sys.exit(rc)
"""


def _time(args: list[str], env: dict, repeats: int) -> dict:
    own, wall, rc, done = [], [], 0, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _TIMED, json.dumps(args)], env=env, capture_output=True,
                              text=True, timeout=1800)
        wall.append(time.perf_counter() - t0)
        rc = rc or done.returncode
        marks = [line for line in done.stderr.splitlines() if line.startswith("STATUS_COMMAND_S ")]
        own.append(float(marks[-1].split()[1]) if marks else float("nan"))
        if done.returncode:
            log.warning("%s: exit %d: %s", " ".join(args), done.returncode, done.stderr[-2000:])
    return {"median_s": round(statistics.median(own), 3), "process_s": round(statistics.median(wall), 3),
            "runs_s": [round(t, 3) for t in own], "rc": rc, "stdout_tail": done.stdout[-400:]}


def run(messages: int, run_size: int, unconfirmed: int, repeats: int = 3) -> dict:
    from aldebaran.settings import KafkaSettings, load
    from aldebaran.storage.store import open_store

    tag = uuid.uuid4().hex[:8]
    env = {**os.environ, "ALDEBARAN_KAFKA_ALERTS_TOPIC": f"bench-status-alerts-{tag}",
           "ALDEBARAN_DELIVERY_PREFIX": f"bench-status/{tag}/deliveries", "ALDEBARAN_LANES_NAME": f"bench-{tag}",
           "ALDEBARAN_LANES_RECORDS_PREFIX": f"bench-status/{tag}/lanes", "ALDEBARAN_LANES_ENABLED": "true",
           "ALDEBARAN_HEALTH_PREFIX": f"bench-status/{tag}/health", "ALDEBARAN_HEALTH_CHECK_DISPATCHERS": "false"}
    t0 = time.perf_counter()
    built = build(env, messages, run_size, unconfirmed)
    built["build_s"] = round(time.perf_counter() - t0, 1)
    log.info("status-commands: history built in %.0fs: %s", built["build_s"], built)
    aid = built["alert_id"]
    commands = {
        "lanes_status": ["lanes", "status", "--json"],
        "deliveries_stats": ["deliveries", "stats"],
        "deliveries_show": ["deliveries", "show", aid],
        "explain": ["explain", aid, "--json"],
        "health": ["health"],  # platform_health's checks (aldebaran.platform.health.check)
        "lanes_status_full": ["lanes", "status", "--json", "--full"],  # exhaustive, for contrast
        "explain_scan": ["explain", aid, "--json", "--scan"],
    }
    figures: dict = {}
    try:
        for name, args in commands.items():
            figures[name] = _time(args, env, repeats)
            log.info("status-commands: %s %.2fs", name, figures[name]["median_s"])
    finally:
        store = open_store()
        for key in ("ALDEBARAN_DELIVERY_PREFIX", "ALDEBARAN_LANES_RECORDS_PREFIX", "ALDEBARAN_HEALTH_PREFIX"):
            store.delete_prefix(env[key] + "/")
        store.delete_prefix(env["ALDEBARAN_DELIVERY_PREFIX"] + "-index/")
        store.delete(f"heartbeats/lane/{env['ALDEBARAN_LANES_NAME']}.json")
        from aldebaran.kafka.admin import delete_topics

        delete_topics(load(KafkaSettings), [env["ALDEBARAN_KAFKA_ALERTS_TOPIC"]])
    return {"sizes": {"messages": messages, "run_size": run_size, "unconfirmed": unconfirmed,
                      "channels": len(CHANNELS), "partitions": PARTITIONS, "repeats": repeats},
            "history": built, "commands": figures, "startup_s": _startup(env),
            **{f"{name}_s": f["median_s"] for name, f in figures.items()}}


def _startup(env: dict) -> float:
    """The interpreter and `aldebaran`'s own start (what every command pays before it reads anything)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from aldebaran.cli import main as cli; from aldebaran.runtime import envfile; envfile.load_env()"], env=env,
                   capture_output=True, timeout=120)
    return round(time.perf_counter() - t0, 3)


def render(result: dict) -> str:
    s = result["status_commands"]
    z, h = s["sizes"], s["history"]
    rows = [f"| `{name}` | {f['median_s']:.2f} | {f['process_s']:.2f} | "
            f"{'ok' if not f['rc'] else 'exit ' + str(f['rc'])} |" for name, f in s["commands"].items()]
    return "\n".join([
        BEGIN, "## Status commands on a long history",
        "",
        f"`{result['command']}` on {_box(result['machine'])}. A synthetic history: "
        f"{h['topic_messages']:,} messages on an alerts topic of {z['partitions']} partitions, {h['runs']:,} "
        f"ledger runs of {z['run_size']} offsets over {z['channels']} channels, {z['unconfirmed']:,} unconfirmed "
        "fast-lane records. Each command runs in a fresh process (median of "
        f"{z['repeats']}): *seconds* from the call to the answer, *process* the whole `aldebaran` process "
        f"(the interpreter's start alone: {s['startup_s']:.2f} s). `_full` and `_scan` are the exhaustive "
        "variants, for contrast. JSON: `status_commands.<command>_s` in img/bench-results.json.",
        "", "| command | seconds | process | |", "|---|---:|---:|---|", *rows, END])


def _box(m: dict) -> str:
    return f"{m.get('cores')} cores ({m.get('cpu')}), {m.get('memory_gib')} GiB, {m.get('date')}"


def main(args) -> int:
    from aldebaran.runtime import paths
    from aldebaran_capacity.bench import machine, sections

    sizes = dict(QUICK if args.quick else DAY)
    for key in ("messages", "run_size", "unconfirmed"):
        if getattr(args, key, None):
            sizes[key] = getattr(args, key)
    command = ("aldebaran bench status-commands" + (" --quick" if args.quick else "")
               + "".join(f" --{k.replace('_', '-')} {v}" for k, v in sizes.items()))
    result = {"machine": machine.describe(), "command": command,
              "status_commands": run(repeats=args.repeats, **sizes)}
    print(json.dumps(result, indent=1, default=str))
    if args.report:
        sections.write_report(paths.ROOT / "docs", "status_commands", result, render(result), BEGIN, END)
    return 0 if all(not f["rc"] for f in result["status_commands"]["commands"].values()) else 1
