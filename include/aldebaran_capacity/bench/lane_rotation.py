"""The lane's start and a lane rotation under load, beside the running platform.

    aldebaran bench lane-rotation [--rates 5000] [--seconds 120] [--rotate-at 30] [--repeats 3] [--report]

Each run starts a lane keeper of its own (``aldebaran lanes run``, what ``lane_supervisor`` starts, with a
private lane name, checkpoint and fast topic) on the platform's ``trades`` topic, so the exact auditor and its
dispatchers take the same load: the deployed configuration with the lane on. It measures

- **the start**: from the keeper's launch to the first fast alert a consumer receives (a probe order every
  few seconds until one alerts; the lane reads from the latest offsets);
- **the rotation**: the original publisher's mix paced at the rate for ``seconds``, the keeper told to rotate
  (SIGUSR1, what ``ALDEBARAN_LANES_ROTATE_SECONDS`` does on age) ``rotate_at`` seconds in. By the second of
  each trade that should alert (the reference model's OVERFILLs): the longest run of such seconds with not one
  fast alert received (``gap_s``), the alerts never received, the copies received twice (the overlap's), and
  trade → received p99 over the rotation's minute (``rotate_at`` − 10 s to + 50 s).

Latency is read where a subscriber reads it: a consumer of the fast topic, its receive time minus the trade's
send stamp. The box's other processes are sampled (the platform's own roles are not foreign here).
"""

from __future__ import annotations

import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.settings import KafkaSettings
from aldebaran_capacity import loadgen
from aldebaran_capacity.bench.low_latency import PROBE, _Alerts, _mix, _percentile, _probe

log = logging.getLogger(__name__)

BEGIN, END = "<!-- lane-rotation:begin -->", "<!-- lane-rotation:end -->"
WINDOW = (-10, 50)  # the rotation's minute, seconds around the SIGUSR1


RETIRED = "reads since"  # the keeper's log line when it stops the old generation (aldebaran.lanes.keeper.retire)


def _logged_at(text: str, marker: str) -> float | None:
    """Epoch seconds of the first log line holding `marker` (the platform's lines start with an ISO-8601 UTC time)."""
    from datetime import datetime

    for line in text.splitlines():
        if marker in line:
            try:
                return datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00")).timestamp()
            except ValueError:
                return None
    return None


def gap_seconds(seconds_expected: set[int], seconds_alerted: set[int]) -> int:
    """The longest run of consecutive seconds in which trades should have alerted and none did (seconds with
    nothing to alert on neither break nor extend a run)."""
    longest = run = 0
    for sec in sorted(seconds_expected):
        run = 0 if sec in seconds_alerted else run + 1
        longest = max(longest, run)
    return longest


def run_once(kafka: KafkaSettings, rate: int, seconds: float, rotate_at: float, overlap: float, seed: int,
             workdir: Path) -> dict:
    from aldebaran.kafka.admin import delete_topics, ensure_topics
    from aldebaran_capacity.bench import paced
    from aldebaran_capacity.bench.boxstate import BoxSampler

    name = f"bench-rot-{uuid.uuid4().hex[:8]}"
    fast_topic = f"bench.fast.{name}"
    ensure_topics(kafka, [fast_topic])
    alerts = _Alerts(kafka, fast_topic)
    env = {**os.environ, "ALDEBARAN_LANES_NAME": name, "ALDEBARAN_LANES_CHECKPOINT": str(workdir / name),
           "ALDEBARAN_KAFKA_FAST_ALERTS_TOPIC": fast_topic, "ALDEBARAN_LANES_ROTATE_SECONDS": "0",
           "ALDEBARAN_LANES_ROTATION_OVERLAP_SECONDS": str(overlap), "ALDEBARAN_LANES_HEARTBEAT_SECONDS": "1",
           "ALDEBARAN_LANES_START_TIMEOUT_SECONDS": "600", "ALDEBARAN_LANES_RECORDS_PREFIX": f"bench/{name}"}
    log_path = workdir / f"{name}.log"
    launched = time.time()
    with open(log_path, "wb") as out:
        keeper = subprocess.Popen([str(paths.venv_bin("aldebaran")), "lanes", "run"], env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _probe(kafka, kafka.trades_topic, alerts, timeout=600)
        first = min(ts for ts, a in alerts.seen if str(a.get("order_id", "")).startswith(PROBE))
        start_s = round(first / 1000 - launched, 1)
        log.info("lane-rotation: %s: first fast alert %.1fs after the keeper's launch", name, start_s)
        recs = _mix(max(1, int(rate * seconds / 5)), seed)
        box = BoxSampler(period=1.0)
        box.start()
        asked: list[float] = []

        def ask_rotation() -> None:
            asked.append(time.time())
            os.kill(keeper.pid, signal.SIGUSR1)

        rotate = threading.Timer(rotate_at, ask_rotation)
        before = len(alerts.seen)
        rotate.start()
        sent = paced.send(recs, kafka.trades_topic, rate, kafka.bootstrap_servers, paced.LINGER_MS)
        rotate.join()
        expected = [a for a in loadgen.expected(recs, sent.timestamps) if a["kind"] == "OVERFILL"]
        want = {a["alert_id"] for a in expected}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not want <= {a.get("alert_id") for _, a in alerts.seen[before:]}:
            time.sleep(1.0)
        time.sleep(2.0)  # late copies count as received twice
        state = box.stop()
        # The rotation ends when the old generation stops (the keeper logs it); a loaded box may take longer
        # than the load: wait for it, so that every run has rotated (or says it did not).
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and RETIRED not in log_path.read_text(errors="replace"):
            time.sleep(2.0)
        retired = _logged_at(log_path.read_text(errors="replace"), RETIRED)
    finally:
        os.killpg(keeper.pid, signal.SIGTERM)
        try:
            keeper.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(keeper.pid, signal.SIGKILL)
        alerts.close()
        delete_topics(kafka, [fast_topic])
    t0 = min(sent.timestamps)
    got = [(ts, a) for ts, a in alerts.seen[before:] if a.get("alert_id") in want]
    second_of = {a["alert_id"]: (int(a["trigger_event_ts"]) - t0) // 1000 for a in expected}
    first_seen: dict[str, int] = {}
    for ts, a in got:
        first_seen.setdefault(a["alert_id"], ts)
    window = [ts - int(a["trigger_event_ts"]) for ts, a in got
              if WINDOW[0] <= second_of[a["alert_id"]] - rotate_at <= WINDOW[1]]
    latencies = [ts - int(a["trigger_event_ts"]) for ts, a in got]
    # The same alerts by their Kafka timestamp (the lane's producer stamps it on send): what the lane itself took,
    # apart from the broker and this consumer.
    sink = [alerts.produced[a["alert_id"]] - int(a["trigger_event_ts"]) for _, a in got
            if a["alert_id"] in alerts.produced]
    return {"rate": rate, "seconds": seconds, "rotate_at": rotate_at, "overlap_s": overlap, "start_s": start_s,
            "events": sent.count, "expected_alerts": len(want), "received": len(first_seen),
            "missing": len(want - set(first_seen)), "received_twice": len(got) - len(first_seen),
            "gap_s": gap_seconds(set(second_of.values()), {second_of[i] for i in first_seen}),
            "p50_ms": _percentile(latencies, 50), "p99_ms": _percentile(latencies, 99),
            "sink_p50_ms": _percentile(sink, 50), "sink_p99_ms": _percentile(sink, 99),
            "rotation_p99_ms": _percentile(window, 99),
            # SIGUSR1 → the old generation stopped (the new one read for the overlap by then); None: not rotated
            "rotation_s": round(retired - asked[0], 1) if retired and asked else None,
            "other_cores": state.get("other_cores_mean"), "quiet": state.get("quiet"),
            "load1_mean": state.get("load1_mean"), "cores_by_role": state.get("cores_by_role")}


def run(rates=(5000,), seconds: float = 120.0, rotate_at: float = 30.0, repeats: int = 3, overlap: float = 15.0) -> dict:
    from aldebaran.settings import load

    kafka = load(KafkaSettings)
    out = {"rates": list(rates), "seconds": seconds, "rotate_at": rotate_at, "repeats": repeats,
           "overlap_s": overlap, "runs": []}
    with tempfile.TemporaryDirectory(prefix="lane-rotation-", dir=paths.run_dir()) as tmp:
        for k in range(repeats):
            for rate in rates:
                r = run_once(kafka, rate, seconds, rotate_at, overlap, seed=2_000 + k, workdir=Path(tmp))
                log.info("lane-rotation: run %d at %d/s: %s", k + 1, rate, r)
                out["runs"].append(r)
    out["segments"] = []
    for rate in rates:
        rs = [r for r in out["runs"] if r["rate"] == rate]
        p99s = [r["rotation_p99_ms"] for r in rs if r["rotation_p99_ms"] is not None]
        out["segments"].append({
            "rate": rate, "runs": len(rs), "gap_s": max(r["gap_s"] for r in rs),
            "missing": sum(r["missing"] for r in rs), "received_twice": sum(r["received_twice"] for r in rs),
            "p99_ms": statistics.median(p99s) if p99s else None,
            "p99_spread_ms": [min(p99s), max(p99s)] if p99s else None,
            "start_s": statistics.median(r["start_s"] for r in rs),
            "start_spread_s": [min(r["start_s"] for r in rs), max(r["start_s"] for r in rs)],
            "rotation_s": statistics.median(r["rotation_s"] for r in rs) if all(r["rotation_s"] for r in rs) else None,
            "quiet": all(r["quiet"] for r in rs)})
    return out


def render(result: dict) -> str:
    r = result["lane_rotation"]
    lines = [BEGIN, "## The lane's start and a rotation under load, beside the running platform", "",
             f"`{result['command']}` — {result['machine']['date']}. Each run: a lane keeper of its own on the "
             f"platform's `trades` (the exact auditor and its dispatchers take the same load), the original "
             f"publisher's mix for {r['seconds']:g} s, rotated (SIGUSR1) {r['rotate_at']:g} s in, overlap "
             f"{r['overlap_s']:g} s; {r['repeats']} runs. Latency = a consumer's receive time − the trade's send "
             "stamp. `aldebaran_capacity.bench.lane_rotation`.", "",
             "| events/s | runs | longest gap (s), worst run | alerts never received | received twice (overlap) | "
             "p99 over the rotation's minute, median (spread) ms | rotation: SIGUSR1 → old generation stopped, median s "
             "| start: keeper → first fast alert, median (spread) s | quiet |", "|---:|---:|---:|---:|---:|---|---:|---|---|"]
    for s in r["segments"]:
        p99 = f"{s['p99_ms']:,.0f} ({s['p99_spread_ms'][0]:,.0f}–{s['p99_spread_ms'][1]:,.0f})" if s["p99_ms"] else "–"
        rot = "not rotated" if s.get("rotation_s") is None else f"{s['rotation_s']:g}"
        lines.append(f"| {s['rate']:,} | {s['runs']} | {s['gap_s']} | {s['missing']} | {s['received_twice']} | {p99} | {rot} | "
                     f"{s['start_s']:g} ({s['start_spread_s'][0]:g}–{s['start_spread_s'][1]:g}) | "
                     f"{'yes' if s['quiet'] else 'no'} |")
    lines += ["", "Targets: no second without fast alerts across a rotation, its minute's p99 ≤ 1 s (at 5k "
              "events/s), the start ≤ 30 s beside the exact lane.", "", END]
    return "\n".join(lines)


def main(args) -> int:
    import json

    from aldebaran_capacity.bench import machine, sections

    rates = tuple(int(x) for x in args.rates.split(",")) if args.rates else (5000,)
    seconds = args.seconds if args.seconds != 20.0 else 120.0  # the parser's shared default is e2e's
    result = {"machine": machine.describe(), "command": "aldebaran bench lane-rotation " + " ".join(sys.argv[3:])}
    result["lane_rotation"] = run(rates, seconds, args.rotate_at, args.repeats, args.overlap)
    print(json.dumps(result, indent=1, default=str))
    if args.report:
        sections.write_report(paths.ROOT / "docs", "lane_rotation", result, render(result), BEGIN, END)
        # The keys the low-latency figures carry too (low_latency.rotation, low_latency.start_s).
        raw = paths.ROOT / "docs" / "img" / "bench-results.json"
        data = json.loads(raw.read_text())
        seg = result["lane_rotation"]["segments"][0]
        data.setdefault("low_latency", {})["rotation"] = {"rate": seg["rate"], "gap_s": seg["gap_s"],
                                                          "p99_ms": seg["p99_ms"], "missing": seg["missing"]}
        data["low_latency"]["start_s"] = seg["start_s"]
        raw.write_text(json.dumps(data, indent=1, default=str))
    return 0
