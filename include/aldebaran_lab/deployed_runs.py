"""The deployed bench's segments as BRIEF §4 takes a figure: each rate ``--runs`` times, interleaved (run 1: every
rate, run 2: every rate, ...), and in each run, right after the platform's segment at a rate, a segment of
the hand-rolled loop (aldebaran_capacity.bench.peer) at the same rate on the same box, the platform running
beside it as a user's box would. Per rate (``deployed.segments[]``): the median of the runs' p50 and p99,
``alert_p99_spread_ms`` = [min, max] of the runs' p99, ``peer_p99_ms`` (the median of the loop's) and
``ratio_to_peer``; channels' delivered/expected summed over the runs, their p99 the median; restarts summed;
each run's figures under ``per_run``.

The loop consumes the same trades topic as the auditor: each segment's orders carry a prefix of their own,
so each segment's alerts are counted apart. Its alerts go to a topic of its own (:data:`PEER_TOPIC`),
created for the bench and deleted after it.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

log = logging.getLogger(__name__)

PEER_TOPIC = "alerts.bench-peer"
PEER_READY_S = 60.0  # the loop's start (imports, the group's join)
SETTLED_P99_MS = 3000.0  # a probe this quick: the backlog of a failed capacity rung has drained


@dataclass
class Context:
    """What every segment needs: the Kafka settings, the webhook receiver, the log channel's file, the
    auditor's query name and the drain window."""

    kafka: object
    receiver: object
    log_path: object
    query: str
    drain_s: float


# --- pure: the order of the segments and the figures of a rate ------------------------------------------
def interleave(rates, runs: int) -> list[tuple[int, int]]:
    """(run, rate) in the order they are measured: every rate in run 1, then every rate in run 2, ..."""
    return [(run, rate) for run in range(1, runs + 1) for rate in rates]


def _median(values) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return round(statistics.median(values), 1) if values else None


def _spread(values) -> list[float] | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return [min(values), max(values)] if values else None


def _ratio(ours: float | None, peer: float | None) -> float | None:
    return round(ours / peer, 2) if ours is not None and peer else None


def aggregate(rate: int, runs: list[dict], peers: list[dict]) -> dict:
    """One rate's figures from its runs (deployed_figures.figures) and the loop's (tap_figures), in run order."""
    channels = {}
    for name in sorted({c for r in runs for c in r.get("channels", {})}):
        got = [r["channels"][name] for r in runs if name in r.get("channels", {})]
        channels[name] = {"delivered": sum(c["delivered"] for c in got), "expected": sum(c["expected"] for c in got),
                          "p50_ms": _median(c.get("p50_ms") for c in got), "p99_ms": _median(c.get("p99_ms") for c in got)}
    restarts: dict[str, int] = {}
    for r in runs:
        for who, n in (r.get("restarts") or {}).items():
            restarts[who] = restarts.get(who, 0) + n
    boxes = [r.get("box") or {} for r in runs]
    p99 = _median(r.get("alert_p99_ms") for r in runs)
    peer_p99 = _median(p.get("p99_ms") for p in peers)
    stage_keys = sorted({k for r in runs for k in (r.get("stages_ms") or {})})
    # the plot shows the run whose p99 is nearest the median
    middle = min(runs, key=lambda r: abs((r.get("alert_p99_ms") or 0) - (p99 or 0))) if runs else {}
    return {
        "rate": rate, "runs": len(runs),
        "achieved_eps": _median(r.get("achieved_eps") for r in runs),
        "orders": sum(r.get("orders", 0) for r in runs), "alerts": sum(r.get("alerts", 0) for r in runs),
        "alert_p50_ms": _median(r.get("alert_p50_ms") for r in runs), "alert_p99_ms": p99,
        "alert_p99_spread_ms": _spread([r.get("alert_p99_ms") for r in runs]),
        "peer_p50_ms": _median(p.get("p50_ms") for p in peers), "peer_p99_ms": peer_p99,
        "peer_p99_spread_ms": _spread([p.get("p99_ms") for p in peers]),
        "peer_delivered": sum(p.get("delivered", 0) for p in peers),
        "peer_expected": sum(p.get("expected", 0) for p in peers),
        "ratio_to_peer": _ratio(p99, peer_p99),
        "channels": channels, "restarts": restarts,
        "stages_ms": {k: _median((r.get("stages_ms") or {}).get(k) for r in runs) for k in stage_keys},
        # CPU-µs per event per role, the median of the runs (deployed_figures.cpu_per_event)
        "cpu_us_per_event": {k: _median((r.get("cpu_us_per_event") or {}).get(k) for r in runs)
                             for k in sorted({k for r in runs for k in (r.get("cpu_us_per_event") or {})})},
        "box": {"quiet": all(b.get("quiet") is not False for b in boxes) if boxes else None,
                "load1_mean": _median(b.get("load1_mean") for b in boxes),
                "other_cores_mean": _median(b.get("other_cores_mean") for b in boxes),
                "other_cores_mean_max": max((b.get("other_cores_mean") or 0.0 for b in boxes), default=None),
                "not_quiet_runs": [i + 1 for i, b in enumerate(boxes) if b.get("quiet") is False]},
        "timeline": middle.get("timeline", {}),
        "per_run": [{**{k: v for k, v in r.items() if k != "timeline"}, "peer": p} for r, p in zip(runs, peers)],
    }


def lane_aggregate(rate: int, runs: list[dict], peers: list[dict], fast_channel: str | None = None) -> dict:
    """One rate beside the fast lane: the fast topic's figures (``extra.fast``) and the exact ``alerts``'; with
    `fast_channel` (a channel that opted in to the fast lane), its recipient's as trade → fast recipient."""
    fast = [(r.get("extra") or {}).get("fast") or {} for r in runs]
    fast_p99, peer_p99 = _median(f.get("p99_ms") for f in fast), _median(p.get("p99_ms") for p in peers)
    out = {} if fast_channel is None else _fast_delivery(fast_channel, runs)
    return {**out,
        "rate": rate, "runs": len(runs),
        "fast_p50_ms": _median(f.get("p50_ms") for f in fast), "fast_p99_ms": fast_p99,
        "fast_p99_spread_ms": _spread([f.get("p99_ms") for f in fast]),
        "fast_delivered": sum(f.get("delivered", 0) for f in fast),
        "fast_expected": sum(f.get("expected", 0) for f in fast),
        "exact_p50_ms": _median(r.get("alert_p50_ms") for r in runs),
        "exact_p99_ms": _median(r.get("alert_p99_ms") for r in runs),
        "exact_p99_spread_ms": _spread([r.get("alert_p99_ms") for r in runs]),
        "peer_p99_ms": peer_p99, "peer_p99_spread_ms": _spread([p.get("p99_ms") for p in peers]),
        "fast_ratio_to_peer": _ratio(fast_p99, peer_p99),
        "quiet": all((r.get("box") or {}).get("quiet") is not False for r in runs),
        "per_run": [{"fast": f, "exact_p50_ms": r.get("alert_p50_ms"), "exact_p99_ms": r.get("alert_p99_ms"),
                     "channels": r.get("channels"), "box": r.get("box"), "peer": p}
                    for f, r, p in zip(fast, runs, peers)],
    }


def _fast_delivery(channel: str, runs: list[dict]) -> dict:
    """Trade → the fast channel's recipient over the runs: medians, the p99s' spread, what arrived."""
    got = [(r.get("channels") or {}).get(channel) or {} for r in runs]
    return {"fast_channel": channel,
            "fast_delivery_p50_ms": _median(g.get("p50_ms") for g in got),
            "fast_delivery_p99_ms": _median(g.get("p99_ms") for g in got),
            "fast_delivery_p99_spread_ms": _spread([g.get("p99_ms") for g in got]),
            "fast_delivery_delivered": sum(g.get("delivered", 0) for g in got),
            "fast_delivery_expected": sum(g.get("expected", 0) for g in got)}


# --- the hand-rolled loop -----------------------------------------------------------------------------------
@contextlib.contextmanager
def peer_topic(kafka):
    """The loop's alerts topic, for the bench's duration."""
    from aldebaran.kafka import admin as kadmin

    kadmin.ensure_topics(kafka, [PEER_TOPIC])
    try:
        yield PEER_TOPIC
    finally:
        kadmin.delete_topics(kafka, [PEER_TOPIC])


class Peer:
    """``python -m aldebaran_capacity.bench.peer`` in a process of its own, in a new consumer group; entered once
    it holds its partitions, SIGTERMed on exit."""

    def __init__(self, kafka) -> None:
        self.kafka = kafka
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def _wait_for(self, word: str, until: float) -> bool:
        while time.monotonic() < until:
            try:
                if self.lines.get(timeout=0.5).startswith(word):
                    return True
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the hand-rolled loop exited ({self.proc.returncode}) before '{word}'")
        return False

    def __enter__(self) -> "Peer":
        group = f"aldebaran-bench-peer-{uuid.uuid4().hex[:8]}"
        self.proc = subprocess.Popen([sys.executable, "-m", "aldebaran_capacity.bench.peer",
                                      self.kafka.bootstrap_servers, self.kafka.trades_topic, PEER_TOPIC, group],
                                     stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True, name="peer-stdout").start()
        until = time.monotonic() + PEER_READY_S
        if not self._wait_for("ready", until):
            self.__exit__()
            raise RuntimeError(f"the hand-rolled loop did not say ready within {PEER_READY_S:.0f} s")
        if not self._wait_for("assigned", until):
            log.warning("deployed: the hand-rolled loop has no partitions after %.0f s; producing anyway",
                        PEER_READY_S)
        time.sleep(1.0)  # its first fetch resolves "latest" before the first trade
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def peer_segment(ctx: Context, rate: int, seconds: float) -> dict:
    """The loop at `rate` for `seconds`, the same paced producer, its alerts read as the platform's are."""
    from aldebaran_capacity.bench.boxstate import BoxSampler
    from aldebaran_capacity.taps import TopicTap
    from aldebaran_lab.deployed_parts import produce_in_process
    from aldebaran_lab.deployed_figures import tap_figures

    prefix = f"peer{uuid.uuid4().hex[:6]}r{rate}"

    def keep(order_id) -> bool:
        return isinstance(order_id, str) and order_id.startswith(prefix + "-")

    with Peer(ctx.kafka):
        tap, box = TopicTap(ctx.kafka, PEER_TOPIC, keep), BoxSampler()
        tap.start()
        box.start()
        try:
            sent = produce_in_process(ctx.kafka, rate, seconds, prefix)
            box_state = box.stop()
            deadline = time.monotonic() + ctx.drain_s
            while time.monotonic() < deadline and len(tap.seen) < sent["orders"]:
                time.sleep(0.5)
        finally:
            tap.stop()
    return {**tap_figures(tap, sent["orders"]), "achieved_eps": round(sent["events"] / sent["seconds"])
            if sent.get("seconds") else None, "box": box_state}


# --- the interleaved runs -----------------------------------------------------------------------------------
def measure_runs(ctx: Context, rates, runs: int, seconds: float, extra_topics: dict[str, str] | None = None,
                 label: str = "exact") -> tuple[dict[int, list], dict[int, list]]:
    """Every (run, rate) of :func:`interleave`: the platform's segment, then the loop's. Returns
    ({rate: the platform's segments}, {rate: the loop's}), in run order."""
    from aldebaran_lab.deployed_parts import segment

    done: dict[int, list] = {rate: [] for rate in rates}
    peers: dict[int, list] = {rate: [] for rate in rates}
    order = interleave(rates, runs)
    for i, (run, rate) in enumerate(order, 1):
        waited, left = quiesce(ctx)
        seg = segment(ctx.kafka, ctx.receiver, ctx.log_path, ctx.query, rate, seconds, ctx.drain_s, extra_topics)
        # The loop measures the box as the platform leaves it idle, not while it still drains this segment.
        peer_waited, _ = quiesce(ctx)
        peer = peer_segment(ctx, rate, seconds)
        seg["quiesce_s"], seg["quiesce_left"], peer["quiesce_s"] = waited, left, peer_waited
        done[rate].append(seg)
        peers[rate].append(peer)
        fast = (seg.get("extra") or {}).get("fast")
        log.info("deployed: %s %d/%d (run %d/%d, %d events/s): alert p50/p99 %s/%s ms, %d/%d alerts%s; log %d/%d; "
                 "peer p99 %s ms (%d/%d)%s", label, i, len(order), run, runs, rate, seg["alert_p50_ms"],
                 seg["alert_p99_ms"], seg["alerts"], seg["orders"],
                 f", fast p50/p99 {fast['p50_ms']}/{fast['p99_ms']} ms ({fast['delivered']}/{fast['expected']})"
                 if fast else "", seg["channels"]["log"]["delivered"], seg["channels"]["log"]["expected"],
                 peer["p99_ms"], peer["delivered"], peer["expected"],
                 "" if (seg.get("box") or {}).get("quiet") is not False else " — box NOT quiet")
    return done, peers


def segments(ctx: Context, rates, runs: int, seconds: float) -> list[dict]:
    """``deployed.segments``: :func:`aggregate` per rate of :func:`measure_runs`."""
    done, peers = measure_runs(ctx, rates, runs, seconds)
    return [aggregate(rate, done[rate], peers[rate]) for rate in rates]


def quiesce(ctx: Context, max_wait: float = 600.0, probe=None, step: float = 2.0) -> tuple[float, dict[str, int]]:
    """Before a segment: wait until the platform has nothing left of the previous one, so a segment does not pay
    for its backlog: the exact auditor has read `trades` to its end, and every active group on the alerts
    topics (the bench's channels, the fast dispatchers, the lane keeper) has read them to theirs
    (:func:`aldebaran_lab.deployed_rest.backlog`, or `probe()`). Waiting on the channels alone let a 1k segment
    start while the exact auditor was still minutes behind on the 10k one before it (docs/benchmarks.md, the
    deployed section's reading of the C1 runs). The lane's own lag is not seen: it has no consumer group.
    Returns the seconds waited and what was still left when it gave up after `max_wait` (empty when it drained)."""
    from aldebaran_lab.deployed_rest import backlog

    probe = probe or (lambda: backlog(ctx.kafka, ctx.query))
    t0 = time.monotonic()
    while True:
        left = {k: v for k, v in probe().items() if v}
        waited = round(time.monotonic() - t0, 1)
        if not left:
            return waited, {}
        if waited > max_wait:
            log.warning("deployed: the platform is still behind after %.0f s (%s); measuring anyway", waited, left)
            return waited, left
        time.sleep(step)


def settle(ctx: Context, max_wait: float = 900.0) -> None:
    """After a rung that overloaded the auditor: short probes until one's p99 is under SETTLED_P99_MS (its
    backlog drained), for up to `max_wait` seconds, so the next measurement does not inherit the queue."""
    from aldebaran_lab.deployed_parts import WARMUP, segment

    deadline = time.monotonic() + max_wait
    while True:
        probe = segment(ctx.kafka, ctx.receiver, ctx.log_path, ctx.query, WARMUP[0], WARMUP[1], ctx.drain_s)
        p99 = probe["alert_p99_ms"]
        if p99 is not None and p99 <= SETTLED_P99_MS and probe["alerts"] >= probe["orders"]:
            log.info("deployed: settled (probe p99 %s ms)", p99)
            return
        if time.monotonic() > deadline:
            log.warning("deployed: not settled after %.0f s (probe p99 %s ms, %d/%d alerts); going on", max_wait,
                        p99, probe["alerts"], probe["orders"])
            return
        log.info("deployed: waiting for the backlog to drain (probe p99 %s ms, %d/%d alerts)", p99, probe["alerts"],
                 probe["orders"])
