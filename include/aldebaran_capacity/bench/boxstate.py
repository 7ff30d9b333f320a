"""The box's state while a benchmark segment runs: load, run queue, steal, and the CPU of every process,
grouped by role, so a figure taken on a shared box is flagged rather than published as the code's.

On a 2-core machine a helper's build or a catch-up task takes a whole core, and a latency figure then
measures the queue (docs/benchmarks.md "Measure on a quiet box"). :class:`BoxSampler` runs beside a
segment and answers, for that segment: how busy the box was, what the platform itself used (Kafka,
MinIO, Airflow, the auditor, the dispatchers), what the bench used, and what anything else used.
A segment where anything else took more than ``OTHER_LIMIT_CORES`` is flagged ``quiet: false``.
"""

from __future__ import annotations

import os
import threading
import time

import psutil

OTHER_LIMIT_CORES = 0.2

# cmdline fragments → role (first match wins); what matches none is "other".
ROLES = (
    ("lane", ("realtime_lane.py", "lane_app.py", "aldebaran lanes run")),
    ("auditor", ("spark_apps/auditor.py", "aldebaran auditor", "aldebaran.audit", "pyspark.daemon",
                 "pyspark/daemon", "SparkSubmit", "shardhost")),
    ("dispatcher", ("aldebaran dispatch", "aldebaran.delivery", " dispatch --follow")),
    ("kafka", (" kafka.Kafka ",)),  # the broker's main class (a client's classpath names kafka_2.13 too)
    ("minio", ("minio",)),
    ("airflow", ("airflow",)),
    ("receivers", ("aldebaran_capacity.receivers",)),
)


def role_of(cmdline: list[str], bench_pids: set[int], pid: int, foreign: tuple[str, ...] = ()) -> str:
    """A platform role first (the bench may start the lane or a dispatcher itself), then the bench, then other.
    A role in `foreign` is "other" unless the bench started the process (a lane bench counts a dispatcher or
    an auditor that something else runs against the box's quiet)."""
    text = " ".join(cmdline)
    for role, needles in ROLES:
        if any(n in text for n in needles):
            return "other" if role in foreign and pid not in bench_pids else role
    return "bench" if pid in bench_pids else "other"


class BoxSampler(threading.Thread):
    """Samples every `period` seconds until :meth:`stop`; :meth:`summary` gives the segment's figures."""

    def __init__(self, period: float = 1.0, foreign: tuple[str, ...] = ()) -> None:
        super().__init__(daemon=True, name="box-sampler")
        self.period = period
        self.foreign = foreign
        self._done = threading.Event()
        self._cpu: dict[int, float] = {}  # pid → last cpu seconds
        self._cmd: dict[int, tuple[str, str]] = {}  # pid → (role, short name)
        self.samples: list[dict] = []
        self.per_process: dict[tuple[str, str], float] = {}  # (role, name) → cpu seconds over the segment

    def _is_bench(self, pid: int) -> bool:
        """Whether `pid` is this process or a descendant (asked once per new process: a snapshot of the
        children taken before the scan would miss one started during it)."""
        me = os.getpid()
        if pid == me:
            return True
        try:
            return any(p.pid == me for p in psutil.Process(pid).parents())
        except psutil.Error:
            return False

    def _read(self) -> dict[int, float]:
        out = {}
        for p in psutil.process_iter(["pid", "cmdline", "name", "cpu_times"]):
            info = p.info
            times = info.get("cpu_times")
            if times is None:
                continue
            pid = info["pid"]
            out[pid] = times.user + times.system
            if pid not in self._cmd:
                cmd = info.get("cmdline") or [info.get("name") or "?"]
                bench = {pid} if self._is_bench(pid) else set()
                self._cmd[pid] = (role_of(cmd, bench, pid, self.foreign), (info.get("name") or "?")[:32])
        return out

    def run(self) -> None:
        self._cpu = self._read()
        last = time.monotonic()
        steal0 = psutil.cpu_times()
        while not self._done.wait(self.period):
            now = time.monotonic()
            cpu = self._read()
            steal1 = psutil.cpu_times()
            span = max(1e-3, now - last)
            by_role: dict[str, float] = {}
            for pid, secs in cpu.items():
                used = secs - self._cpu.get(pid, 0.0)  # a process new since the last sample: all of its CPU
                if used <= 0:
                    continue
                role, name = self._cmd.get(pid, ("other", "?"))
                by_role[role] = by_role.get(role, 0.0) + used / span
                self.per_process[(role, name)] = self.per_process.get((role, name), 0.0) + used
            total_steal = getattr(steal1, "steal", 0.0) - getattr(steal0, "steal", 0.0)

            def cores(field: str) -> float:
                return round((getattr(steal1, field, 0.0) - getattr(steal0, field, 0.0)) / span, 3)

            # The whole box from /proc/stat: what no process's own time shows (softirq: the loopback network
            # stack's work for every small request) and how much was left (idle).
            self.samples.append({"t": time.time(), "load1": os.getloadavg()[0], "run_queue": _run_queue(),
                                 "steal_cores": round(total_steal / span, 3), "idle_cores": cores("idle"),
                                 "softirq_cores": cores("softirq"), "system_cores": cores("system"),
                                 "iowait_cores": cores("iowait"),
                                 "cores": {k: round(v, 3) for k, v in by_role.items()}})
            self._cpu, last, steal0 = cpu, now, steal1

    def stop(self) -> dict:
        self._done.set()
        self.join(self.period * 3 + 5)
        return self.summary()

    def summary(self) -> dict:
        """Load (mean/max), run queue max, steal, mean cores per role, the top other processes, and `quiet`."""
        if not self.samples:
            return {"samples": 0, "quiet": None}
        roles = sorted({r for s in self.samples for r in s["cores"]})
        mean = {r: round(sum(s["cores"].get(r, 0.0) for s in self.samples) / len(self.samples), 3) for r in roles}
        other_max = max(s["cores"].get("other", 0.0) for s in self.samples)
        seconds = self.samples[-1]["t"] - self.samples[0]["t"] + self.period
        top_other = sorted(((n, secs / seconds) for (r, n), secs in self.per_process.items() if r == "other"),
                           key=lambda x: -x[1])[:5]
        return {
            "samples": len(self.samples),
            "load1_mean": round(sum(s["load1"] for s in self.samples) / len(self.samples), 2),
            "load1_max": round(max(s["load1"] for s in self.samples), 2),
            "run_queue_max": max(s["run_queue"] for s in self.samples),
            "steal_cores_mean": round(sum(s["steal_cores"] for s in self.samples) / len(self.samples), 3),
            **{f"{k}_mean": round(sum(s.get(k, 0.0) for s in self.samples) / len(self.samples), 3)
               for k in ("idle_cores", "softirq_cores", "system_cores", "iowait_cores")},
            "cores_by_role": mean,
            "other_cores_mean": mean.get("other", 0.0),
            "other_cores_max": round(other_max, 3),
            "top_other": [{"name": n, "cores": round(c, 3)} for n, c in top_other if c >= 0.01],
            "quiet": mean.get("other", 0.0) <= OTHER_LIMIT_CORES,
        }


def _run_queue() -> int:
    """Runnable tasks now (procs_running in /proc/stat), including the sampler itself."""
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("procs_running"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def wait_for_quiet(foreign: tuple[str, ...] = (), sample_seconds: float = 5.0, max_wait: float = 120.0,
                   log=None) -> dict:
    """Before a measurement: sample the box for `sample_seconds`; while anything else takes more than
    OTHER_LIMIT_CORES, say what and sample again, for up to `max_wait`. Returns the last sample's summary
    (``quiet`` False when the box never quietened: the run goes on, flagged)."""
    deadline = time.monotonic() + max_wait
    while True:
        sampler = BoxSampler(period=1.0, foreign=foreign)
        sampler.start()
        time.sleep(sample_seconds)
        state = sampler.stop()
        if state.get("quiet") or time.monotonic() >= deadline:
            if log is not None and not state.get("quiet"):
                log.warning("box: still not quiet after %.0fs (other processes %.2f cores: %s); measuring anyway, "
                            "flagged", max_wait, state.get("other_cores_mean"), state.get("top_other"))
            return state
        if log is not None:
            log.warning("box: not quiet (other processes %.2f cores: %s); waiting",
                        state.get("other_cores_mean"), state.get("top_other"))
