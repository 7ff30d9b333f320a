"""How long a restarted dispatcher waits for its partitions: ``python -m aldebaran_lab.chaos.handover``.

The consumer of a channel's dispatcher (aldebaran.delivery.dispatcher: the same session and heartbeat
settings, from DeliverySettings) runs as a small member process on a fresh topic and group, the way
``dispatch_supervisor`` replaces one: the old member is stopped (``term``: SIGTERM, it closes its
consumer) or killed (``kill``: SIGKILL, nothing said to the group), and once it is gone the new one is
launched at once. Measured: old member gone → the new member holds a share of the partitions with the
group settled (every partition owned by a live member), in each membership mode:

- ``eager``: librdkafka's default assignors (range, roundrobin), a dynamic member (what ran until now);
- ``cooperative``: ``partition.assignment.strategy=cooperative-sticky``;
- ``static``: eager plus ``group.instance.id`` (the new process takes the old one's identity).

``--peer busy`` adds a second member that polls, then works ``--busy-seconds`` without polling (as a
busy dispatcher or an ``alert_dispatch`` catch-up in the same group does): an eager rebalance waits for
it to rejoin. Each trial records the box's load average: the box is shared.

    python -m aldebaran_lab.chaos.handover --repeats 3 --out /tmp/handover.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid

log = logging.getLogger("aldebaran_lab.chaos.handover")

MODES = ("eager", "cooperative", "static")
EXITS = ("term", "kill")
PEERS = ("none", "busy")


# --- a member (its own process) --------------------------------------------------------------------------
def member_config(mode: str, group: str, name: str) -> dict:
    """The dispatcher's consumer settings (ChannelDispatcher.run) plus the mode's membership settings."""
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import load

    s = load(DeliverySettings)
    conf = {"enable.partition.eof": False, "session.timeout.ms": s.session_timeout_ms,
            "heartbeat.interval.ms": max(500, s.session_timeout_ms // 5)}
    if mode == "cooperative":
        conf["partition.assignment.strategy"] = "cooperative-sticky"
    if mode == "static":
        conf["group.instance.id"] = f"{group}-{name}"
    return conf


def member(topic: str, group: str, mode: str, name: str, busy: float) -> int:
    """Consume until SIGTERM; print a JSON line on every change of the assignment."""
    from aldebaran.kafka.io import consumer
    from aldebaran.settings import KafkaSettings, load

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    held: set[int] = set()

    def say(event: str) -> None:
        sys.stdout.write(json.dumps({"event": event, "name": name, "partitions": sorted(held), "at": time.time()}) + "\n")
        sys.stdout.flush()

    def on_assign(_c, tps) -> None:
        held.update(tp.partition for tp in tps)
        say("assigned")

    def on_revoke(_c, tps) -> None:
        held.difference_update(tp.partition for tp in tps)
        say("revoked")

    c = consumer(load(KafkaSettings), group, **member_config(mode, group, name))
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    say("started")
    while not stop.is_set():
        msgs = c.consume(num_messages=100, timeout=0.2)
        if busy and msgs:
            stop.wait(busy)  # working without polling, like a dispatcher settling a large window
    c.close()
    say("closed")
    return 0


# --- the orchestrator ---------------------------------------------------------------------------------
class Member:
    def __init__(self, topic: str, group: str, mode: str, name: str, busy: float = 0.0) -> None:
        self.name = name
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aldebaran_lab.chaos.handover", "member", "--topic", topic, "--group", group,
             "--mode", mode, "--name", name, "--busy-seconds", str(busy)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                continue

    def held(self) -> set[int]:
        return set(self.events[-1]["partitions"]) if self.events else set()


def _wait(cond, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.time()
        time.sleep(0.02)
    raise TimeoutError(what)


def trial(kafka, topic: str, partitions: int, mode: str, exit_: str, peer: str, busy: float, timeout: float) -> dict:
    group = f"aldebaran-handover-{uuid.uuid4().hex[:8]}"
    everything = set(range(partitions))
    members = []
    try:
        bystander = Member(topic, group, "eager" if mode == "static" else mode, "peer", busy) if peer == "busy" else None
        old = Member(topic, group, mode, "dispatcher")
        members = [m for m in (bystander, old) if m is not None]
        live = lambda ms: set().union(*(m.held() for m in ms))  # noqa: E731
        # Settled: each member holds a share, together all of them, none twice.
        _wait(lambda: all(m.held() for m in members) and live(members) == everything
              and sum(len(m.held()) for m in members) == partitions, timeout, "the old member's assignment")
        time.sleep(1.0)  # settled
        mine = sorted(old.held())
        load1 = os.getloadavg()[0]
        signalled = time.time()
        old.proc.send_signal(signal.SIGTERM if exit_ == "term" else signal.SIGKILL)
        old.proc.wait(timeout=60)
        gone = time.time()
        new = Member(topic, group, mode, "dispatcher")
        members = [m for m in (bystander, new) if m is not None]
        others = [m for m in members if m is not new]
        assigned = _wait(lambda: new.held() and live(members) == everything
                         and not (new.held() & live(others)), timeout, "the new member's assignment")
        return {"mode": mode, "exit": exit_, "peer": peer, "old_partitions": mine, "new_partitions": sorted(new.held()),
                "stop_seconds": round(gone - signalled, 2), "handover_seconds": round(assigned - gone, 2),
                "load1": round(load1, 2)}
    finally:
        for m in members + ([old] if "old" in locals() else []):
            if m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait()


def feeder(kafka, topic: str, stop: threading.Event) -> None:
    """A trickle on every partition, so that a busy peer always has something to work on."""
    from aldebaran.kafka.io import producer

    p = producer(kafka)
    n = 0
    while not stop.wait(0.05):
        p.produce(topic, key=str(n).encode(), value=b"{}")
        p.poll(0)
        n += 1
    p.flush(10)


def table(results: list[dict]) -> str:
    rows = ["| peer | exit | mode | old gone → new assigned, s (each) | median, s | load 1 min (each) |",
            "|---|---|---|---|---|---|"]
    key = lambda r: (r["peer"], r["exit"], r["mode"])  # noqa: E731
    for k in sorted({key(r) for r in results}, key=lambda k: (PEERS.index(k[0]), EXITS.index(k[1]), MODES.index(k[2]))):
        rs = [r for r in results if key(r) == k]
        times = [r["handover_seconds"] for r in rs if r.get("handover_seconds") is not None]
        each = ", ".join(f"{t:.2f}" if t is not None else "timeout" for t in (r.get("handover_seconds") for r in rs))
        med = f"{statistics.median(times):.2f}" if times else "—"
        rows.append(f"| {k[0]} | {k[1]} | {k[2]} | {each} | {med} | {', '.join(str(r['load1']) for r in rs)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m aldebaran_lab.chaos.handover", description=__doc__.splitlines()[0])
    p.add_argument("role", nargs="?", default="measure", choices=["measure", "member"])
    p.add_argument("--topic")
    p.add_argument("--group")
    p.add_argument("--mode", default="eager", choices=MODES)
    p.add_argument("--name", default="dispatcher")
    p.add_argument("--busy-seconds", type=float, default=20.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--exits", default=",".join(EXITS))
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--out", default=None, help="write the trials as JSON here")
    args = p.parse_args(argv)
    if args.role == "member":
        return member(args.topic, args.group, args.mode, args.name, args.busy_seconds)

    from aldebaran.runtime import logs

    logs.setup("chaos-handover")
    from aldebaran.kafka.admin import delete_topics, ensure_topics
    from aldebaran.settings import KafkaSettings, load

    kafka = load(KafkaSettings)
    topic = f"aldebaran-handover-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, [topic], partitions=args.partitions)
    stop = threading.Event()
    feed = threading.Thread(target=feeder, args=(kafka, topic, stop), daemon=True)
    feed.start()
    results: list[dict] = []
    try:
        # Alternated (mode innermost, then repeat) so that the box's load drifts over every mode alike.
        for peer in args.peers.split(","):
            for exit_ in args.exits.split(","):
                for rep in range(args.repeats):
                    for mode in args.modes.split(","):
                        try:
                            r = trial(kafka, topic, args.partitions, mode, exit_, peer, args.busy_seconds, args.timeout)
                        except TimeoutError as exc:
                            r = {"mode": mode, "exit": exit_, "peer": peer, "handover_seconds": None,
                                 "load1": round(os.getloadavg()[0], 2), "error": str(exc)}
                        log.info("peer %s, %s, %s #%d: %s", peer, exit_, mode, rep + 1, json.dumps(r))
                        results.append(r)
                        if args.out:
                            with open(args.out, "w") as f:
                                json.dump(results, f, indent=1)
    finally:
        stop.set()
        feed.join(15)
        delete_topics(kafka, [topic])
    log.info("\n%s", table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
