"""Prometheus Alertmanager on 127.0.0.1 (built by `make setup` with `go install`, like MinIO), for the
``alertmanager`` channel: started by `make up` only when a configured channel points at it
(:func:`wanted`), and by the channel's integration test on a port of its own.

It runs as a single node (``--cluster.listen-address=`` turns the gossip listener off: it would bind every
interface) with a configuration that routes every alert to a receiver that notifies nobody: the channel's
promise is about what Alertmanager holds, which its API shows. A real deployment points the channel at its
own Alertmanager.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from pathlib import Path

from aldebaran import paths
from aldebaran.exceptions import ConfigError, SetupError
from aldebaran_lab.services.base import Service

log = logging.getLogger(__name__)

DEFAULT_PORT = 9093
CONFIG = """\
# Written by aldebaran_lab.services.alertmanager: every alert to a receiver that notifies nobody.
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
        raise SetupError(f"Alertmanager is not built at {path}: run `make setup`")
    return path


def wanted(environ: dict[str, str] | None = None) -> bool:
    """Whether a configured channel is an ``alertmanager`` one on this machine's Alertmanager (the
    channel list and connections as the dispatchers read them outside Airflow)."""
    from aldebaran.delivery.channels import CONN_TYPES, channel_names, env_connection

    try:
        configured = [(name, env_connection(name, environ)) for name in channel_names(environ=environ)]
    except ConfigError as exc:  # the dispatchers will say so at their start; `make up` goes on
        log.warning("alertmanager: the channel configuration does not read (%s); not started", exc)
        return False
    for name, conn in configured:
        kind = CONN_TYPES.get(conn.conn_type or name) if conn is not None else None
        if kind == "alertmanager" and conn.host and ("127.0.0.1" in conn.host or "localhost" in conn.host):
            return True
    return False


class Alertmanager(Service):
    name = "alertmanager"
    start_timeout = 30.0

    def __init__(self, root: Path | None = None, port: int = DEFAULT_PORT) -> None:
        super().__init__(root)
        self.host, self.port = "127.0.0.1", port
        self.address = f"{self.host}:{self.port}"
        self.url = f"http://{self.address}"
        self.config = self.home / "alertmanager.yml"
        self.data = self.home / "data"

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        self.config.write_text(CONFIG)

    def command(self) -> list[str]:
        return [str(binary()), f"--config.file={self.config}", f"--storage.path={self.data}",
                f"--web.listen-address={self.address}", "--cluster.listen-address=", "--log.level=warn"]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def alerts(self, **labels: str) -> list[dict]:
        """The alerts it holds (``GET /api/v2/alerts``), those with every one of `labels` if given."""
        query = "&".join(f"filter={urllib.request.quote(f'{k}={json.dumps(v)}')}" for k, v in labels.items())
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts" + (f"?{query}" if query else ""), timeout=10) as resp:
            return json.load(resp)

    def received(self) -> int:
        """Alerts posted to it so far, repeats included (its ``alertmanager_alerts_received_total``)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                   if line.startswith("alertmanager_alerts_received_total{"))
