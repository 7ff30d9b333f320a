"""What one metrics update costs: a prometheus_client counter / gauge / histogram update in this process vs
a StatsD datagram (what Airflow's own ``[metrics] statsd_on`` sends), and what a Prometheus scrape of a
dispatcher's /metrics costs (docs/design.md "Metrics: pull, not push").

    python -m aldebaran_capacity.bench.metrics_cost [--updates N] [--repeats R]

Run it on a quiet box (it is CPU-bound and single-threaded; the 2-core box's other work shows up as noise).
Each case runs `updates` operations, `repeats` times; the median ns per operation is reported, with the
interpreter, the library versions and the box's load average. The StatsD side sends real UDP datagrams to a
socket this process binds on 127.0.0.1 (read by nobody: the kernel drops what overflows, as a StatsD
client never waits), so the figure is the client's cost, not a daemon's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable


def _per_op_ns(op: Callable[[], object], updates: int, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(updates):
            op()
        runs.append((time.perf_counter_ns() - t0) / updates)
    return {"median_ns": round(statistics.median(runs), 1), "min_ns": round(min(runs), 1),
            "max_ns": round(max(runs), 1)}


def _dispatcher_like(reg) -> Callable[[], bytes]:
    """A scrape of a registry holding what one dispatcher exports (3 channels × 2 partitions)."""
    from aldebaran.delivery.stats import DispatchStats
    from aldebaran.delivery.service import Heartbeat
    from aldebaran.runtime.metrics import _Sources
    from aldebaran.runtime.metrics_roles import dispatcher_families
    from prometheus_client import generate_latest

    stats = DispatchStats(alerts=10_000, runs=100)
    channels = ["log", "webhook", "bus"]
    for c in channels:
        stats.bump("sent", c, 10_000)
    hb = Heartbeat(None, "bench", channels, "bench", stats, 5.0)
    hb.last = {"at": time.time(), "partitions": {c: {p: {"settled": 10, "position": 12, "high": 15, "buffered": 2}
                                                     for p in (0, 1)} for c in channels},
               "progress": {c: {"pending": True, "progress_at": time.time()} for c in channels}}
    sources = _Sources()
    sources.add("bench", lambda: dispatcher_families(hb))
    reg.register(sources)
    return lambda: generate_latest(reg)


def run(updates: int = 200_000, repeats: int = 5) -> dict:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    reg = CollectorRegistry()
    counter = Counter("bench_deliveries", "bench", ["channel", "outcome"], registry=reg)
    bound = counter.labels("log", "sent")
    gauge = Gauge("bench_lag", "bench", ["channel"], registry=reg).labels("log")
    histogram = Histogram("bench_batch_seconds", "bench", registry=reg)

    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    address = sink.getsockname()
    datagram = b"aldebaran.dispatcher.deliveries.log.sent:1|c"
    try:
        cases = {
            "prometheus_counter_inc_bound": _per_op_ns(bound.inc, updates, repeats),
            "prometheus_counter_inc_labels": _per_op_ns(lambda: counter.labels("log", "sent").inc(), updates, repeats),
            "prometheus_gauge_set": _per_op_ns(lambda: gauge.set(42), updates, repeats),
            "prometheus_histogram_observe": _per_op_ns(lambda: histogram.observe(0.3), updates, repeats),
            "statsd_udp_send": _per_op_ns(lambda: client.sendto(datagram, address), updates, repeats),
            "statsd_format_and_send": _per_op_ns(
                lambda: client.sendto(f"aldebaran.dispatcher.deliveries.{'log'}.{'sent'}:{1}|c".encode(), address),
                updates, repeats),
        }
        scrape = _dispatcher_like(CollectorRegistry())
        cases["scrape_one_dispatcher"] = _per_op_ns(scrape, max(1, updates // 1000), repeats)
        cases["scrape_one_dispatcher"]["bytes"] = len(scrape())
    finally:
        client.close()
        sink.close()
    return {
        "command": f"aldebaran bench metrics-cost --updates {updates} --repeats {repeats}",
        "updates": updates, "repeats": repeats, "cases": cases,
        "python": platform.python_version(), "prometheus_client": _version("prometheus-client"),
        "cpus": os.cpu_count(), "loadavg": os.getloadavg(), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=200_000, help="operations per run (default 200000)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per case; the median is reported (default 5)")
    args = parser.parse_args(argv)
    sys.stdout.write(json.dumps(run(args.updates, args.repeats), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
