"""A local service: started as its own process group, tracked by a PID file, health-checked, and
stopped by PID (never by name). Subclasses say how to prepare, run and probe one service."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.exceptions import ServiceError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stopped:
    """How a service stopped: seconds from the stop request until its last process was gone, and the signals
    sent on the way (the stop signal first; SIGTERM, SIGKILL when the previous one did not do)."""

    name: str
    seconds: float
    signals: tuple[str, ...]

    @property
    def killed(self) -> bool:
        return "SIGKILL" in self.signals

    def __str__(self) -> str:
        return f"{self.name}: stopped in {self.seconds:.1f}s ({' → '.join(self.signals)})"


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


def processes() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, pgid, session id) of every live process (zombies left out)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                if fields[0] != "Z":
                    out[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    return out


def session(pid: int) -> set[int]:
    """The live processes of the session a service leads (started with start_new_session): its process group,
    and the groups of their own that Airflow 3 gives its task processes, which an orphan keeps. What a task
    launches in a session of its own (an auditor, a streaming dispatcher) is meant to outlive it: not counted."""
    return {p for p, (_, _, sid) in processes().items() if sid == pid}


def describe(pid: int, limit: int = 100) -> str:
    """The command line of a process (the title Airflow's workers set), cut at `limit` characters."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return "?"
    if len(args) > 1 and os.path.basename(args[0]).startswith("python"):  # `python3 /venv/bin/airflow x`: `airflow x`
        args = [os.path.basename(args[1]), *args[2:]]
    return " ".join(args).strip()[:limit]


class Service:
    name: str = "service"
    address: str = ""
    start_timeout: float = 120.0
    stop_timeout: float = 30.0  # from the stop request to SIGKILL of what is left
    stop_signal: int = signal.SIGTERM
    stop_grace: float | None = None  # with another stop_signal: SIGTERM to what is left this long after it
    _stopping: tuple = (None, 0.0, 0.0)  # (pid, stop requested, stop signal sent): monotonic

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

    def stop(self, timeout: float | None = None) -> Stopped | None:
        """Stop the service and wait for every process of it; None: it was not running."""
        pid = self.request_stop()
        return self.wait_stopped(pid, timeout) if pid is not None else None

    def request_stop(self) -> int | None:
        """Send the stop signal; returns the leader's pid (None: was not running). Members of a quorum are all
        asked at once, then waited for: stopped one by one, the last Kafka broker waits for controllers that
        are already gone."""
        pid = self.pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            log.info("%s: not running", self.name)
            return None
        log.info("%s: stopping pid %s", self.name, pid)
        started = time.monotonic()
        self.send_stop(pid)
        self._stopping = (pid, started, time.monotonic())
        return pid

    def send_stop(self, pid: int) -> None:
        """The first stage of a stop: `stop_signal` to the process group."""
        self._signal_group(pid, self.stop_signal)

    def spared_from_sigterm(self, pid: int) -> set[int]:
        """Processes the SIGTERM stage leaves alone (a second signal would break their own shutdown)."""
        return set()

    def wait_stopped(self, pid: int, timeout: float | None = None) -> Stopped:
        """Wait until every process of its session is gone: SIGTERM to each one left `stop_grace` after the stop
        signal (when that is another one), SIGKILL to what is still left `timeout` (the service's stop_timeout)
        after the stop request. Logs and returns how long it took and the signals it needed."""
        timeout = timeout or self.stop_timeout
        started, signalled = self._stopping[1:] if self._stopping[0] == pid else (time.monotonic(),) * 2
        signals = [signal.Signals(self.stop_signal).name]
        stages = [(min(signalled + self.stop_grace, started + timeout), signal.SIGTERM)] \
            if self.stop_grace and self.stop_signal != signal.SIGTERM else []
        stages.append((started + timeout, signal.SIGKILL))
        left: set[int] = set()
        for deadline, sig in stages:
            while (left := session(pid)) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not left:
                break
            what = ", ".join(f"{p} {describe(p)}" for p in sorted(left))
            log.log(logging.WARNING if sig == signal.SIGKILL else logging.INFO,
                    "%s: %d process(es) left after %.1fs, sending %s: %s", self.name, len(left),
                    time.monotonic() - started, sig.name, what)
            signals.append(sig.name)
            for p in left - (self.spared_from_sigterm(pid) if sig == signal.SIGTERM else set()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, sig)
            if sig == signal.SIGKILL:
                self._signal_group(pid, sig)
                t0 = time.monotonic()
                while session(pid) and time.monotonic() - t0 < 5:
                    time.sleep(0.1)
        result = Stopped(self.name, time.monotonic() - started, tuple(signals))
        log.log(logging.WARNING if result.killed else logging.INFO, "%s", result)
        with contextlib.suppress(OSError), open(self.logfile, "a") as fh:
            fh.write(f"aldebaran services: {result}\n")
        self.pidfile.unlink(missing_ok=True)
        self._stopping = (None, 0.0, 0.0)
        return result

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
