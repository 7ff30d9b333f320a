"""A local service: started as its own process group, tracked by a PID file, health-checked, and
stopped by PID (never by name). Subclasses say how to prepare, run and probe one service."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from aldebaran import paths
from aldebaran.exceptions import ServiceError

log = logging.getLogger(__name__)


@dataclass
class Status:
    name: str
    pid: int | None
    running: bool
    healthy: bool
    address: str
    log: Path


def _reset_signals() -> None:  # runs in the child before exec
    # A background shell may have set SIGINT to SIG_IGN; the child must honour SIGINT (Airflow
    # standalone stops its components on KeyboardInterrupt only).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def tail(path: Path, lines: int = 25) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return "(no log yet)"
    return "\n".join(text.splitlines()[-lines:])


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Service:
    name: str = "service"
    address: str = ""
    start_timeout: float = 120.0
    stop_timeout: float = 30.0
    stop_signal: int = signal.SIGTERM

    def __init__(self, root: Path | None = None) -> None:
        # root: the run-dir subtree of a profile (the HA profile keeps its members under <run dir>/ha).
        root = root or paths.run_dir()
        self.home = root / self.name
        self.pidfile = self.home / f"{self.name}.pid"
        self.logfile = root / "logs" / f"{self.name}.log"

    # --- to implement -------------------------------------------------------------------
    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def prepare(self) -> None:
        """Create data directories and config; called before every start."""

    def healthy(self) -> bool:
        raise NotImplementedError

    def after_start(self) -> None:
        """Provision (topics, buckets, ...) once healthy; must be idempotent."""

    def popen_options(self) -> dict:
        """Extra subprocess.Popen arguments (Postgres runs as its own OS user when started by root)."""
        return {}

    # --- lifecycle ----------------------------------------------------------------------
    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def running(self) -> bool:
        return self.pid() is not None

    def start(self, timeout: float | None = None) -> None:
        self.launch()
        self.wait_healthy(timeout or self.start_timeout)
        self.after_start()

    def launch(self) -> None:
        """Start the process without waiting for it to be healthy (members of a quorum start together:
        one Kafka controller or MinIO node alone never becomes healthy)."""
        if self.running():
            log.info("%s: already running (pid %s)", self.name, self.pid())
            return
        if self.healthy():
            raise ServiceError(
                f"{self.name}: something else already answers on {self.address} "
                f"(no PID file at {self.pidfile}); stop it first"
            )
        self.home.mkdir(parents=True, exist_ok=True)
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        self.prepare()
        log.info("%s: starting on %s (log %s)", self.name, self.address, self.logfile)
        with open(self.logfile, "ab") as out:
            proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                cwd=self.home,
                start_new_session=True,  # own process group: stopped as a whole
                preexec_fn=_reset_signals,
                **self.popen_options(),
            )
        self.pidfile.write_text(f"{proc.pid}\n")

    def wait_healthy(self, timeout: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.healthy():
                log.info("%s: healthy after %.1fs", self.name, time.monotonic() - t0)
                return
            if not self.running():
                raise ServiceError(
                    f"{self.name}: process exited during start; see {self.logfile}:\n{tail(self.logfile)}"
                )
            time.sleep(0.5)
        raise ServiceError(
            f"{self.name}: not healthy on {self.address} after {timeout:.0f}s; see {self.logfile}:\n"
            f"{tail(self.logfile)}"
        )

    def stop(self, timeout: float | None = None) -> None:
        pid = self.request_stop()
        if pid is not None:
            self.wait_stopped(pid, timeout)

    def request_stop(self) -> int | None:
        """Send the stop signal to the process group; returns its pid (None: was not running). Members of a
        quorum are all asked at once, then waited for: stopped one by one, the last Kafka broker waits for
        controllers that are already gone."""
        pid = self.pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            log.info("%s: not running", self.name)
            return None
        log.info("%s: stopping pid %s", self.name, pid)
        self._signal_group(pid, self.stop_signal)
        return pid

    def wait_stopped(self, pid: int, timeout: float | None = None) -> None:
        timeout = timeout or self.stop_timeout
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout and self._group_alive(pid):
            time.sleep(0.2)
        if self._group_alive(pid):
            log.warning("%s: still running after %.0fs, sending SIGKILL to its process group", self.name, timeout)
            self._signal_group(pid, signal.SIGKILL)
            time.sleep(0.5)
        self.pidfile.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL the whole process group (failure injection)."""
        pid = self.pid()
        if pid is not None:
            self._signal_group(pid, signal.SIGKILL)
            t0 = time.monotonic()
            while self._group_alive(pid) and time.monotonic() - t0 < 10:
                time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)

    @staticmethod
    def _signal_group(pid: int, sig: int) -> None:
        try:
            os.killpg(pid, sig)  # the service leads its own group (start_new_session)
        except ProcessLookupError:
            pass

    @staticmethod
    def _group_alive(pgid: int) -> bool:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
                return True
        return False

    def status(self) -> Status:
        pid = self.pid()
        return Status(self.name, pid, pid is not None, self.healthy(), self.address, self.logfile)
