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


# --- the finer roles of the platform at rest (aldebaran_lab.deployed_rest) ------------------------------
# From the code that starts each process: the auditor's spark-submit runs org.apache.spark.deploy.SparkSubmit
# with spark_apps/auditor.py (aldebaran.platform.spark_submit), whose Python driver is `python .../auditor.py`
# and whose Python workers are `python -m pyspark.daemon` and the shard hosts (`-m
# aldebaran.audit.sparkjob.shardhost`, started by a worker); the lane keeper (`aldebaran lanes run`) starts the
# same for spark_apps/realtime_lane.py (aldebaran.lanes.launch); a dispatcher is `aldebaran dispatch --follow
# --name NAME --channel C ...` (aldebaran.platform.dispatch_supervisor.launch); `airflow standalone` runs
# `airflow scheduler|dag-processor|api-server|triggerer`, and LocalExecutor's workers and tasks retitle
# themselves "airflow worker -- LocalExecutor: ...", "airflow supervisor: ..." and "airflow worker -- <ti id>".
# A JVM's compiler and collector threads are listed as roles of their own ("auditor JVM JIT", "lane JVM GC"):
# on 2 cores a JVM's C2 compiler alone can take a fifth of a core for minutes under load (docs/design.md §5).
JVM_THREAD_KINDS = ("JIT", "GC")
EXACT_AUDITOR = ("auditor JVM", "auditor JVM JIT", "auditor JVM GC", "auditor driver", "spark python workers")
NOT_PLATFORM = ("bench", "other")
AIRFLOW_SUBCOMMANDS = {"scheduler": "airflow scheduler", "dag-processor": "airflow dag-processor",
                       "dag_processor": "airflow dag-processor", "api-server": "airflow api-server",
                       "api_server": "airflow api-server", "triggerer": "airflow triggerer",
                       "standalone": "airflow standalone"}
PYTHON_WORKERS = ("pyspark.daemon", "pyspark/daemon", "pyspark.worker", "pyspark/worker", "sparkjob.shardhost")


def _airflow_role(words: list[str]) -> str | None:
    """The Airflow role of a command line or a process title, None if it is not Airflow's."""
    if words and words[0].startswith("gunicorn"):
        return "airflow api-server"  # the api-server's gunicorn master retitles itself
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] != "airflow":
            continue
        sub = words[i + 1] if i + 1 < len(words) else ""
        if sub in AIRFLOW_SUBCOMMANDS:
            return AIRFLOW_SUBCOMMANDS[sub]
        if sub == "worker" and "LocalExecutor:" in words and "<idle>" in words:
            return "airflow scheduler"  # the scheduler's executor pool, waiting for a task
        if sub == "serve-logs":
            return None  # a child of the scheduler or the triggerer: its parent's role
        return "airflow tasks"  # a task's supervisor or runner, an `airflow ...` command a task runs
    return None


def _own_role(cmdline: list[str]) -> str | None:
    """The role a command line names by itself, None when only its ancestors can tell."""
    words = " ".join(cmdline).split()
    text = " ".join(words)
    if "org.apache.spark.deploy.SparkSubmit" in text:
        if "spark_apps/auditor.py" in text:
            return "auditor JVM"
        if "realtime_lane.py" in text or "lane_app.py" in text:
            return "lane JVM"
        return "spark JVM"
    if "org.apache.spark.deploy.master" in text or "org.apache.spark.deploy.worker" in text:
        return "spark cluster"
    if any(w.endswith("spark_apps/auditor.py") for w in words):
        return "auditor driver"
    if any(w.endswith("realtime_lane.py") or w.endswith("lane_app.py") for w in words):
        return "lane driver"
    if any(n in text for n in PYTHON_WORKERS):
        return "python workers"  # whose: its ancestors say (platform_role)
    if "aldebaran.platform.detached_submit" in text:
        return "auditor submit"
    if "dispatch" in words and "--follow" in words:
        name = words[words.index("--name") + 1] if "--name" in words[:-1] else None
        channels = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--channel"]
        return f"dispatcher {name or ','.join(channels) or '?'}"
    if any(a == "lanes" and b == "run" for a, b in zip(words, words[1:])):
        return "lane keeper"
    if " kafka.Kafka " in f" {text} ":
        return "kafka"
    if words and words[0].rsplit("/", 1)[-1] == "minio":
        return "minio"
    if words and words[0].rsplit("/", 1)[-1] == "alertmanager":
        return "alertmanager"
    return _airflow_role(words)


def platform_role(cmdline: list[str], ancestors: list[list[str]] = (), bench: bool = False) -> str:
    """The finer role of one process on the platform's box (the resting cost's breakdown), from its command
    line and its ancestors' (nearest first): "auditor JVM", "auditor driver", "spark python workers" (the
    auditor's pyspark daemons and shard hosts), "auditor submit", "dispatcher <name>", "lane keeper",
    "lane JVM", "lane driver", "lane python workers", "kafka", "minio", "alertmanager", "airflow scheduler",
    "airflow dag-processor", "airflow api-server", "airflow triggerer", "airflow standalone", "airflow tasks",
    "spark JVM"/"spark cluster", "bench" (this process and its descendants) or "other". A process that
    names no role itself (a forked or spawned child) takes its nearest ancestor's."""
    if bench:
        return "bench"
    own = _own_role(cmdline)
    if own is not None and own != "python workers":
        return own
    for i, parent in enumerate(ancestors):
        role = _own_role(parent)
        if role is None or role == "python workers":
            continue
        if own == "python workers":
            return "lane python workers" if role.startswith("lane") else "spark python workers"
        return role
    # A shard host outlives the worker that started it (its own session): it is only ever the auditor's.
    return "spark python workers" if own == "python workers" else "other"


def jvm_thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a JVM's compiler threads ("JIT": C1/C2) and collector threads ("GC": G1/parallel/serial
    workers and the VM thread), from /proc/<pid>/task/*/stat. Both kinds live as long as the JVM, so the rest
    of the process's CPU (its total less these) is its own work, ended threads included. Empty if it is gone."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {kind: 0.0 for kind in JVM_THREAD_KINDS}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                raw = fh.read()
        except OSError:
            continue  # the thread ended meanwhile
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        kind = ("JIT" if name.startswith(("C1 ", "C2 ")) else
                "GC" if name.startswith(("G1 ", "GC ", "VM Thread")) else None)
        if kind:
            fields = raw[raw.rindex(")") + 2:].split()
            out[kind] += (int(fields[11]) + int(fields[12])) / tick
    return out


class BoxSampler(threading.Thread):
    """Samples every `period` seconds until :meth:`stop`; :meth:`summary` gives the segment's figures.

    `classify`, when given, replaces :func:`role_of`: ``classify(cmdline, ancestors, bench)`` with the
    process's ancestors' command lines (nearest first) and whether it is this process or a descendant
    (e.g. :func:`platform_role`, the resting-cost bench's finer roles)."""

    def __init__(self, period: float = 1.0, foreign: tuple[str, ...] = (), classify=None) -> None:
        super().__init__(daemon=True, name="box-sampler")
        self.period = period
        self.foreign = foreign
        self.classify = classify
        self._done = threading.Event()
        # pid (or (pid, "JIT"|"GC") for a JVM's compiler and collector threads) → last cpu seconds
        self._cpu: dict[int | tuple[int, str], float] = {}
        self._cmd: dict[int | tuple[int, str], tuple[str, str]] = {}  # same keys → (role, short name)
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

    def _read(self) -> dict[int | tuple[int, str], float]:
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
                role = (self.classify(cmd, _ancestors(pid), bool(bench)) if self.classify is not None
                        else role_of(cmd, bench, pid, self.foreign))
                self._cmd[pid] = (role, (info.get("name") or "?")[:32])
            role, name = self._cmd[pid]
            if role.endswith(" JVM"):
                for kind, secs in jvm_thread_cpu(pid).items():
                    out[pid] -= secs
                    out[(pid, kind)] = secs
                    self._cmd.setdefault((pid, kind), (f"{role} {kind}", name))
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

    def ages(self, roles: tuple[str, ...]) -> dict[str, float]:
        """Seconds since the oldest live process of each of `roles` started (a JVM's first minutes cost more:
        its JIT), among the processes the sampler saw; a role with none is left out."""
        now, out = time.time(), {}
        for pid, (role, _name) in self._cmd.items():
            if isinstance(pid, tuple) or role not in roles:
                continue
            try:
                age = now - psutil.Process(pid).create_time()
            except psutil.Error:
                continue  # gone since
            out[role] = round(max(age, out.get(role, 0.0)))
        return out

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


def _ancestors(pid: int) -> list[list[str]]:
    """The command lines of `pid`'s ancestors, nearest first (those gone or unreadable are left out)."""
    out = []
    try:
        parents = psutil.Process(pid).parents()
    except psutil.Error:
        return out
    for parent in parents:
        try:
            out.append(parent.cmdline() or [parent.name()])
        except psutil.Error:
            continue
    return out


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
