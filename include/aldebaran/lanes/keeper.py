"""The lane keeper: ``aldebaran lanes run`` — the low-latency lane as one supervised process.

It runs in the control venv and

1. creates the fast alerts topic if it is missing, then starts the lane (``spark-submit`` of the Spark 4.3
   runtime, :class:`aldebaran.lanes.launch.Lane`) as its child, in a process group of its own, with a
   status file the lane's driver rewrites every 2 s (:mod:`aldebaran.lanes.driver`);
2. reconciles the two lanes' alerts (:class:`aldebaran.lanes.reconciler.Reconciler`) in its main loop, and,
   when a channel has ``fast: true``, produces a retraction to the fast topic for an alert judged unconfirmed
   (aldebaran.delivery.retraction), which the fast dispatcher delivers;
3. writes a heartbeat every ``ALDEBARAN_LANES_HEARTBEAT_SECONDS`` at ``heartbeats/lane/<name>.json``:

       {"status": "starting"|"running"|"rotating"|"failed"|"stopped", "name", "host", "pid", "metrics", "started_at", "at",
        "lane": {"pid", "log", "query": <driver status>, "generation": {"name", "started_at", "checkpoint"}},
        "reconcile": <Reconciler.status()>, "gaps": {"count", "skipped", "last"}, "error"}

The lane is ``running`` once its driver reports an active query. Its checkpoint is one *generation* under
the checkpoint root (``<root>/gen-<start time>``): every ``ALDEBARAN_LANES_ROTATE_SECONDS`` the keeper starts
the lane on a fresh generation from the latest trades, which bounds the lane's state (its books never expire;
design.md). Make before break: the old generation runs on until the new one's first batch has started and
``ALDEBARAN_LANES_ROTATION_OVERLAP_SECONDS`` more have passed (:func:`retire_due`), so a rotation leaves no second
without fast alerts; what both raise in the overlap has the same alert ids. A restarted keeper resumes the generation its last heartbeat names while
it is younger than that, unless the trades that checkpoint resumes from are gone (the topic recreated, or
retention): then the checkpoint is moved under ``<root>/abandoned/`` and a fresh generation starts at
``ALDEBARAN_LANES_GAP_STARTING_OFFSETS``, checked before the resume and again when the lane fails, so a
gap never crash-loops (:mod:`aldebaran.lanes.gap`). The keeper exits failed (code 1, the
lane's log tail in the heartbeat) when the lane exits, when its query stops, or when its driver goes
silent for ``ALDEBARAN_LANES_QUERY_STALE_SECONDS`` after it started; the ``lane_supervisor`` DAG
restarts it. SIGTERM/SIGINT stop the lane, then the keeper (0); SIGUSR1
rotates now (an operator's hand, and the rotation test).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from aldebaran.runtime import heartbeat
from aldebaran.runtime.heartbeat import LANE, identity, publish

log = logging.getLogger(__name__)


def lane_store():
    """The store of the lane's heartbeat and records: the delivery ledger's, where the supervisors keep theirs."""
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import load
    from aldebaran.storage.store import open_store

    return open_store(load(DeliverySettings).store)


def lane_dir(settings) -> Path:
    from aldebaran.runtime import paths

    return paths.run_dir() / "lanes" / settings.name


def checkpoint_root(settings) -> str:
    """Where the lane's checkpoint generations live (ALDEBARAN_LANES_CHECKPOINT, else under the run dir)."""
    return (settings.checkpoint or str(lane_dir(settings) / "checkpoint")).rstrip("/")


def _die_with_parent() -> None:
    """In the lane's process before it execs spark-submit: SIGTERM it when the keeper dies, even by SIGKILL
    (Linux ``PR_SET_PDEATHSIG``, kept across exec), so a restarted keeper never finds an orphaned lane still
    writing to the same checkpoint and topic."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def retire_due(query: dict | None, triggered_at: float | None, overlap_s: float, now: float) -> tuple[float | None, bool]:
    """During a rotation: (when the new generation's first batch was seen started, whether the old one may stop
    now). The new query's status says its trigger is active once its first batch runs, i.e. once its
    starting offsets are fixed and its long-running tasks read; the old one stops `overlap_s` after that."""
    if triggered_at is None:
        started = bool(query and query.get("active") and (query.get("status") or {}).get("isTriggerActive"))
        return (now if started else None), False
    return triggered_at, now - triggered_at >= overlap_s


def _read_status(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not written yet, or replaced while being read: the next look sees it


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Keeper:
    def __init__(self, settings, kafka, store) -> None:
        self.settings, self.kafka, self.store = settings, kafka, store
        self.name = settings.name
        self.started_at = time.time()
        self.stop_event = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.status_path = lane_dir(settings) / f"driver-status-{os.getpid()}-0.json"
        self.launches = 0
        self.reconciler = None
        self.query: dict | None = None
        self.running_since: float | None = None
        self.lane_started_at = 0.0
        self.generation: dict | None = None  # {"name", "started_at", "checkpoint"}
        self.rotating = False  # a new generation is starting
        # During a rotation: the old generation's lane, still running until the new one reads (retire_due).
        self.retiring: tuple[subprocess.Popen, dict] | None = None
        self.retire_seen: float | None = None  # when the new generation's first batch was seen started
        self.rotate_now = threading.Event()  # SIGUSR1
        self.last_body: dict | None = None  # the last heartbeat, also what /metrics reports (aldebaran.runtime.metrics_roles)
        # Checkpoint gaps (aldebaran.lanes.gap): how many, the trades known skipped, the last one (carried
        # over from the previous keeper's heartbeat).
        self.gaps: dict = {"count": 0, "skipped": 0, "last": None}

    # --- heartbeat ---------------------------------------------------------------------------------
    def beat(self, status: str, error: str | None = None) -> None:
        """From the keeper's loop, on purpose: the lane supervisor judges the keeper by this beat's age
        alone (it has no progress rule), so a thread beating for a hung loop would hide it; the loop's
        steps are short (a reconciler poll of 0.2 s), so a busy keeper still beats on time."""
        body = {"status": status, "name": self.name, **identity(),
                "started_at": self.started_at, "at": time.time(), "error": error,
                "lane": {"pid": self.proc.pid if self.proc else None,
                         "log": str(self.log_path) if self.log_path else None, "query": self.query,
                         "generation": self.generation,
                         "retiring": None if self.retiring is None else {"pid": self.retiring[0].pid,
                                                                        "generation": self.retiring[1]}},
                "topics": {"trades": self.kafka.trades_topic, "fast": self.kafka.fast_alerts_topic,
                           "exact": self.kafka.alerts_topic},
                "reconcile": self.reconciler.status() if self.reconciler else None, "gaps": self.gaps}
        self.last_body = body
        publish(self.store, LANE, self.name, body)

    # --- the lane process ---------------------------------------------------------------------------------
    def checkpoint_root(self) -> str:
        return checkpoint_root(self.settings)

    def pick_generation(self, previous: dict | None, now: float, rotate: bool = False) -> tuple[dict, str]:
        """The generation to run: the previous one while it is young enough (and not `rotate`), else a new one
        (which starts from the latest trades, unless it is the lane's first). Returns (generation, offsets)."""
        s = self.settings
        gen = (previous or {}).get("generation")
        if not rotate and gen and gen.get("checkpoint", "").startswith(self.checkpoint_root() + "/") and (
                not s.rotate_seconds or now - float(gen.get("started_at") or 0) < s.rotate_seconds):
            return gen, s.starting_offsets  # an existing checkpoint: Spark resumes from it, the option is unused
        name = f"gen-{int(now * 1000)}"
        new = {"name": name, "started_at": now, "checkpoint": f"{self.checkpoint_root()}/{name}", "fresh": True}
        return new, (s.starting_offsets if not gen else "latest")

    def start_lane(self, starting_offsets: str) -> None:
        from aldebaran.lanes.launch import Lane

        s = self.settings
        workdir = lane_dir(s)
        workdir.mkdir(parents=True, exist_ok=True)
        # A file of its own per launch: a stopped lane's driver may still write its last status to the old one.
        self.status_path.unlink(missing_ok=True)
        self.launches += 1
        self.status_path = workdir / f"driver-status-{os.getpid()}-{self.launches}.json"
        self.query, self.running_since, self.lane_started_at = None, None, time.time()
        spec = Lane(checkpoint=self.generation["checkpoint"], trades_topic=self.kafka.trades_topic,
                    alerts_topic=self.kafka.fast_alerts_topic, checkpoint_interval=s.checkpoint_interval,
                    starting_offsets=starting_offsets, master=s.master, driver_memory=s.driver_memory,
                    status_file=str(self.status_path))
        self.log_path = workdir / f"lane-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        with open(self.log_path, "ab") as out:
            # Its own process group, so that stopping it reaches the JVM and its Python driver together.
            self.proc = subprocess.Popen(spec.argv(), env=spec.env(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        log.info("lane %s: spark-submit pid %d on %s from %s (log %s)", self.name, self.proc.pid,
                 self.generation["checkpoint"], starting_offsets, self.log_path)

    def rotate(self) -> None:
        """Start the lane on a new generation from the latest trades; the old one runs on until
        :meth:`retire` (make before break: module docstring)."""
        old = self.generation
        log.info("lane %s: rotating: generation %s is %.0fs old (ALDEBARAN_LANES_ROTATE_SECONDS %.0f, or SIGUSR1); "
                 "it runs on until the new one reads", self.name, old["name"], time.time() - float(old["started_at"]),
                 self.settings.rotate_seconds)
        self.stop_retiring()  # a rotation asked for before the last one ended: that old lane goes now
        self.retiring, self.retire_seen = (self.proc, old), None
        self.rotating = True
        self.generation, offsets = self.pick_generation({"generation": old}, time.time(), rotate=True)
        self.start_lane(offsets)

    def retire(self) -> None:
        """The end of a rotation: stop the old generation's lane once the new one has read for the overlap."""
        if self.retiring is None:
            return
        self.retire_seen, due = retire_due(self.query, self.retire_seen, self.settings.rotation_overlap_seconds,
                                           time.time())
        if due:
            log.info("lane %s: generation %s reads since %.1fs: stopping generation %s", self.name,
                     self.generation["name"], time.time() - self.retire_seen, self.retiring[1]["name"])
            self.stop_retiring()

    def stop_retiring(self) -> None:
        """Stop the old generation's lane and drop its local checkpoint (an object-store one is left)."""
        import shutil

        from aldebaran.lanes.launch import stop

        if self.retiring is None:
            return
        proc, old = self.retiring
        self.retiring, self.retire_seen = None, None
        if proc is not None and proc.poll() is None:
            stop(proc, timeout=self.settings.stop_timeout_seconds)
        if "://" not in old["checkpoint"] or old["checkpoint"].startswith("file://"):
            shutil.rmtree(old["checkpoint"].removeprefix("file://"), ignore_errors=True)
        else:
            log.info("lane %s: the old checkpoint %s is left in place (remove it, or expire it with a bucket "
                     "lifecycle rule)", self.name, old["checkpoint"])

    def after_gap(self, error: str | None = None) -> str | None:
        """Before the keeper resumes a generation, and when the lane failed: are the trades its checkpoint
        resumes from gone (aldebaran.lanes.gap)? If so, move that checkpoint aside, take a fresh generation and
        return where it starts (Spark's startingOffsets); None: no gap, the checkpoint stands."""
        from confluent_kafka import KafkaException

        from aldebaran.exceptions import ObjectStoreError
        from aldebaran.lanes import gap

        s, topic = self.settings, self.kafka.trades_topic
        try:
            found = gap.check(self.generation["checkpoint"], self.kafka, s.gap_starting_offsets)
            if found is None and gap.out_of_range(error):
                found = gap.after_failure(topic, gap.watermarks(self.kafka, topic), s.gap_starting_offsets, error)
        except (KafkaException, ObjectStoreError, OSError) as exc:
            # Not knowable now: resume; a lane that then fails on the gap is caught here again.
            log.warning("lane %s: could not check the checkpoint for a gap (%s: %s)", self.name,
                        type(exc).__name__, exc)
            return None
        if found is None:
            return None
        old = self.generation
        moved = gap.abandon(old["checkpoint"])
        self.generation, _ = self.pick_generation({"generation": old}, time.time(), rotate=True)
        self.gaps = {"count": int(self.gaps.get("count") or 0) + 1,
                     "skipped": int(self.gaps.get("skipped") or 0) + found.skipped,
                     "last": {**found.to_dict(), "at": time.time(), "generation": old["name"], "abandoned": moved}}
        log.error("lane %s: checkpoint gap: %s. Generation %s moved to %s; a new generation starts at %s",
                  self.name, found.describe(), old["name"], moved, found.starting_offsets)
        return found.starting_offsets

    def lane_problem(self) -> str | None:
        """Why the lane is not healthy any more (None: it is, or still starting)."""
        if self.proc.poll() is not None:
            return f"the lane exited with code {self.proc.returncode}; last lines of {self.log_path}:\n" \
                   f"{_tail(self.log_path)}"
        self.query = _read_status(self.status_path) or self.query
        q = self.query
        if q is None:
            waited = time.time() - self.lane_started_at
            if waited > self.settings.start_timeout_seconds:
                return (f"the lane's query did not start within {waited:.0f}s (ALDEBARAN_LANES_START_TIMEOUT_SECONDS); "
                        f"last lines of {self.log_path}:\n{_tail(self.log_path)}")
            return None
        if q.get("exception") or not q.get("active"):
            return f"the lane's query stopped: {q.get('exception') or q.get('status')}"
        if self.running_since is None:
            self.running_since = time.time()
            if self.generation.pop("fresh", False):
                # A new generation's age counts from its query's start, not from the JVM's launch.
                self.generation["started_at"] = self.running_since
            log.info("lane %s: query %s running (%.1fs after the keeper started)", self.name, q.get("query_id"),
                     self.running_since - self.started_at)
        silent = time.time() - float(q.get("at") or 0)
        if silent > self.settings.query_stale_seconds:
            return (f"the lane's driver has been silent for {silent:.0f}s (limit {self.settings.query_stale_seconds:.0f}s, "
                    "ALDEBARAN_LANES_QUERY_STALE_SECONDS): hung")
        return None

    def stop_lane(self) -> None:
        from aldebaran.lanes.launch import stop

        if self.proc is not None and self.proc.poll() is None:
            stop(self.proc, timeout=self.settings.stop_timeout_seconds)
        self.stop_retiring()

    # --- the loop --------------------------------------------------------------------------------------
    def run(self) -> int:
        from aldebaran.kafka.admin import ensure_topics
        from aldebaran.lanes.reconciler import Reconciler

        s = self.settings
        previous = heartbeat.read(self.store, LANE, self.name) or {}
        resume = ((previous.get("reconcile") or {}).get("resume_ms"))
        created = ensure_topics(self.kafka, [self.kafka.fast_alerts_topic, self.kafka.alerts_topic])
        if created:
            log.info("lane %s: created topic(s) %s", self.name, ", ".join(created))
        from aldebaran.delivery.fast import lane_retractor

        # Channels with "fast": true had the fast alerts: retractions go to the fast topic (None: no such channel).
        retractor = lane_retractor(self.kafka, named=s.fast_channels)
        self.reconciler = Reconciler(self.kafka, self.store, self.name, s.confirm_ttl_seconds, s.records_prefix,
                                     resume_ms=resume, retractor=retractor)
        self.gaps = {**self.gaps, **(previous.get("gaps") or {})}
        self.generation, offsets = self.pick_generation(previous.get("lane"), time.time())
        if not self.generation.get("fresh"):
            offsets = self.after_gap() or offsets
        from aldebaran.runtime import metrics, probes
        from aldebaran.runtime.metrics_roles import watch_lane

        metrics.serve("lane", self.name)  # before the first beat, which names the address
        watch_lane(self)
        probes.watch_lane(self)  # /healthz, /readyz: this thread is the keeper's loop
        self.beat("starting")
        self.start_lane(offsets)
        last_beat = 0.0
        try:
            while not self.stop_event.is_set():
                self.reconciler.step(timeout=0.2)
                if time.monotonic() - last_beat < s.heartbeat_seconds:
                    continue
                last_beat = time.monotonic()
                problem = self.lane_problem()
                restart = problem and self.after_gap(problem)
                if restart:  # the trades were gone: a fresh generation, not a crash loop
                    self.stop_lane()
                    self.start_lane(restart)
                    self.beat("starting")
                    continue
                if problem:
                    log.error("lane %s: %s", self.name, problem)
                    self.stop_lane()
                    self.beat("failed", error=problem[-4000:])
                    return 1
                due = s.rotate_seconds and time.time() - float(self.generation["started_at"]) >= s.rotate_seconds
                if self.running_since and self.retiring is None and (due or self.rotate_now.is_set()):
                    self.rotate_now.clear()
                    self.rotate()
                self.retire()
                if self.running_since and self.retiring is None:
                    self.rotating = False
                self.beat("running" if self.running_since else "rotating" if self.rotating else "starting")
        except BaseException as exc:
            self.stop_lane()
            self.beat("failed", error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.reconciler.close()
            if retractor is not None:
                retractor.close()
        self.stop_lane()
        self.status_path.unlink(missing_ok=True)
        self.beat("stopped")
        log.info("lane %s stopped: %s", self.name, json.dumps(self.reconciler.status()["counts"]))
        return 0


def run() -> int:
    """``aldebaran lanes run``: keep the lane and its reconciliation until SIGTERM/SIGINT."""
    from aldebaran.lanes.settings import LaneSettings
    from aldebaran.settings import KafkaSettings, load

    keeper = Keeper(load(LaneSettings), load(KafkaSettings), lane_store())

    def on_signal(signum, _frame) -> None:
        log.info("lane %s: %s received, stopping", keeper.name, signal.Signals(signum).name)
        keeper.stop_event.set()

    def on_rotate(_signum, _frame) -> None:
        log.info("lane %s: SIGUSR1 received, rotating at the next heartbeat", keeper.name)
        keeper.rotate_now.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, on_rotate)
    return keeper.run()
