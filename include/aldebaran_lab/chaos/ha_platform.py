"""The platform `aldebaran chaos ha` runs on the HA profile (aldebaran_lab.chaos.ha): `.env.ha` over the
environment, the active and standby auditors and the pair of streaming dispatchers, and the watchdog that
restarts what died by itself."""

from __future__ import annotations

import contextlib
import os
import threading

from aldebaran.audit.sparkjob.handover import YIELDED
from aldebaran_lab.chaos.common import AuditorProcess, ChaosError, DispatcherProcess, Workspace, auditor_args, wait_for
from aldebaran_lab.chaos.failover import LEASE_SECONDS, READY_LINE, STANDBY
from aldebaran_lab.chaos.under_load import TTL_SECONDS
from aldebaran_lab.services import ha

CHANNELS = ("webhook", "bus")
PREFETCHED = "books prefetched ["  # a standby's log line after a prefetch (not its ready line: "… (books prefetched every 2s)")
# Each auditor application: one executor with two cores, one per shard (with one core the two shards' tasks
# ran one after the other: 0.8-1 s per micro-batch at 250 trades/s). A worker has two slots, so the active
# and its standby are on different workers.
AUDITOR_CORES = 2
SUBMIT_ARGS = f"--conf spark.cores.max={AUDITOR_CORES} --conf spark.executor.cores={AUDITOR_CORES} pyspark-shell"


@contextlib.contextmanager
def profile_env():
    """`.env.ha` over this process's environment while the campaign runs (its subprocesses inherit it):
    the HA brokers, MinIO endpoint and credentials, Spark master — whatever `.env` said."""
    values = ha.read_env()
    if not values:
        raise ChaosError("no .env.ha: start the HA profile first (`make up-ha`)")
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield values
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Platform:
    """The campaign's auditors (active + warm standby) and dispatcher pair. `watch` (the watchdog) restarts
    what died by itself; a deliberately killed process is held down until the campaign restarts it."""

    def __init__(self, ws: Workspace, master: str, max_offsets: int, dispatcher_env: dict[str, str]) -> None:
        self.ws, self.master, self.max_offsets = ws, master, max_offsets
        self.lock = threading.RLock()
        self.auditors: list[AuditorProcess] = []
        self.active: AuditorProcess | None = None
        self.standby: AuditorProcess | None = None
        self.dispatchers = [DispatcherProcess(f"chaos-{ws.name}-{i}", dispatcher_env, ws.logs / f"dispatcher-{i}.log",
                                              CHANNELS, ws.store) for i in (1, 2)]
        self.held: set[str] = set()
        self.deaths: list[str] = []
        self.handovers: list[str] = []  # actives that handed over to their standby (no executor left)

    def new_auditor(self, standby: bool) -> AuditorProcess:
        extra = ["--lease-seconds", str(LEASE_SECONDS), "--master", self.master, *(STANDBY if standby else [])]
        proc = AuditorProcess(self.ws.env(PYSPARK_SUBMIT_ARGS=SUBMIT_ARGS),
                              auditor_args(self.ws, max_offsets=self.max_offsets, ttl_seconds=TTL_SECONDS, extra=extra),
                              self.ws.logs / f"auditor-{len(self.auditors) + 1}.log")
        self.auditors.append(proc)
        proc.start()
        return proc

    @staticmethod
    def ready(proc: AuditorProcess) -> bool:
        return READY_LINE in proc.log_path.read_text(errors="replace")

    @staticmethod
    def warm(proc: AuditorProcess) -> bool:
        """A standby that has prefetched the books at least once (a takeover before that loads them cold)."""
        return PREFETCHED in proc.log_path.read_text(errors="replace")

    def watch(self) -> None:
        with self.lock:
            if self.active is not None and not self.active.alive():
                if YIELDED in self.active.log_path.read_text(errors="replace"):
                    self.handovers.append(self.active.log_path.stem)  # it lost its executors: by design
                else:
                    self.deaths.append(f"active auditor rc {self.active.returncode()}: {self.active.tail(3)[-300:]}")
                # Its standby takes the lease by itself; a new standby (or, without one, a cold start).
                self.active, self.standby = (self.standby, None) if self.standby else (self.new_auditor(False), None)
            if (self.standby is None and "standby" not in self.held) or (self.standby and not self.standby.alive()):
                if self.standby is not None:
                    self.deaths.append(f"standby auditor rc {self.standby.returncode()}")
                self.standby = self.new_auditor(True)
            for d in self.dispatchers:
                if d.name not in self.held and not d.alive():
                    self.deaths.append(f"dispatcher {d.name} rc {d.returncode()}: {d.tail(3)[-300:]}")
                    d.start()

    def kill_active(self) -> str:
        with self.lock:
            victim, self.held = self.active, self.held | {"standby"}
            victim.kill()
            self.active, self.standby = self.standby, None  # the standby takes the lease by itself
        return victim.log_path.stem

    def restore_standby(self, timeout: float) -> None:
        with self.lock:
            self.held.discard("standby")
            self.standby = self.new_auditor(True)
        wait_for(lambda: self.ready(self.standby), timeout, 0.5, "the new standby's Spark session up")

    def stop(self, failures: list[str]) -> None:
        with self.lock:
            self.held |= {"standby", *(d.name for d in self.dispatchers)}
            for p in (self.standby, self.active):
                rc = p.stop() if p is not None else None
                if rc not in (0, None):
                    failures.append(f"auditor: clean stop exited {rc}: {p.tail(5)}")
            for d in self.dispatchers:
                if (rc := d.stop()) != 0:
                    failures.append(f"dispatcher {d.name}: clean stop exited {rc}")

    def kill_all(self) -> None:
        with self.lock:
            self.held |= {"standby", *(d.name for d in self.dispatchers)}
            for p in self.auditors:
                if p.alive():
                    p.kill()
            for d in self.dispatchers:
                if d.alive():
                    d.kill()
                d.forget()
