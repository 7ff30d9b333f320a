"""A real Prometheus Alertmanager as a recipient, for tests and benchmarks: the binary `make setup` builds,
run as a child process on a port of its own, and read back through its API.

Not a fake: Alertmanager is the provider, so what the ``alertmanager`` channel promises (a resend merges
into the alert held under the same label set) is Alertmanager's own behaviour. It runs as a single node
(``--cluster.listen-address=`` turns gossip off: its listener would bind every interface) and routes every
alert to a receiver that notifies nobody; the lab's service (aldebaran_lab.services.alertmanager) runs the
same binary with the same configuration for `make up`.

:meth:`AlertmanagerProcess.stats` answers like the other receivers: ``received`` (alert ids it holds),
``duplicates`` (alerts posted beyond those: resends it merged), ``received_at`` (alert id → its last update,
epoch s, which is its receipt for an alert posted once).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.exceptions import SetupError
from aldebaran_capacity.receivers.base import LOCALHOST, free_port

log = logging.getLogger(__name__)

CONFIG = """\
# Written by Aldebaran: every alert to a receiver that notifies nobody.
route:
  receiver: "null"
  group_by: ["alertname"]
receivers:
  - name: "null"
"""


def binary() -> Path:
    """The Alertmanager `make setup` built: <cache>/alertmanager/<ALERTMANAGER_VERSION>/bin/alertmanager."""
    path = paths.cache_dir() / "alertmanager" / paths.versions()["ALERTMANAGER_VERSION"] / "bin" / "alertmanager"
    if not path.exists():
        raise SetupError(f"Alertmanager is not built at {path}: run `bash scripts/setup.sh --with-alertmanager` "
                         "(`make setup` builds it only when a channel needs it; `make test` always does)")
    return path


def command(config: Path, data: Path, address: str) -> list[str]:
    return [str(binary()), f"--config.file={config}", f"--storage.path={data}", f"--web.listen-address={address}",
            "--cluster.listen-address=", "--log.level=warn"]


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def held_alerts(url: str, **labels: str) -> list[dict]:
    """The alerts Alertmanager at `url` holds (``GET /api/v2/alerts``), those with every one of `labels`."""
    query = urllib.parse.urlencode([("filter", f"{k}={json.dumps(v)}") for k, v in labels.items()])
    with urllib.request.urlopen(f"{url}/api/v2/alerts" + (f"?{query}" if query else ""), timeout=60) as resp:
        return json.load(resp)


def received_total(url: str) -> int:
    """Alerts posted to it so far, repeats included (``alertmanager_alerts_received_total``)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("alertmanager_alerts_received_total{"))


class AlertmanagerProcess:
    """Alertmanager in a child process on 127.0.0.1:`port` (default: a free one), its files under
    `home` (default: a temporary directory); a context manager, stopped by its PID."""

    def __init__(self, home: str | Path | None = None, port: int = 0, startup_timeout: float = 30.0) -> None:
        self._tmp = None if home else tempfile.TemporaryDirectory(prefix="alertmanager-")
        self.home = Path(home or self._tmp.name)
        self.port = port or free_port()
        self.url = f"http://{LOCALHOST}:{self.port}"
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen | None = None

    def start(self) -> "AlertmanagerProcess":
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "alertmanager.yml"
        config.write_text(CONFIG)
        with open(self.home / "alertmanager.log", "ab") as logfile:
            self._proc = subprocess.Popen(command(config, self.home / "data", f"{LOCALHOST}:{self.port}"),
                                          stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=self.home, env=dict(os.environ))
        deadline = time.monotonic() + self.startup_timeout
        while not ready(self.url):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Alertmanager did not become ready on {self.url}; see {self.home}/alertmanager.log")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("alertmanager %d ignored SIGTERM; killing it", proc.pid)
                proc.kill()
                proc.wait(timeout=10)
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "AlertmanagerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def alerts(self, **labels: str) -> list[dict]:
        return held_alerts(self.url, **labels)

    def received(self) -> int:
        return received_total(self.url)

    def stats(self, summary: bool = True) -> dict:
        held = self.alerts()
        received_at = {}
        for alert in held:
            at = dt.datetime.fromisoformat(alert["updatedAt"].replace("Z", "+00:00")).timestamp()
            received_at[alert["labels"].get("alert_id", alert["fingerprint"])] = at
        out = {"received": len(received_at), "duplicates": max(0, self.received() - len(received_at))}
        if not summary:
            out["received_at"] = received_at
        return out
