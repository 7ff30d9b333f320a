"""Prometheus Alertmanager on 127.0.0.1 (built by `make setup` with `go install`, like MinIO), for the
``alertmanager`` channel: started by `make up` only when a configured channel points at it
(:func:`wanted`), and by the channel's integration test on a port of its own.

The binary, its configuration (a single node routing every alert to a receiver that notifies nobody) and
the readers of its API are the capacity package's (aldebaran_capacity.receivers.alertmanager, which the
dispatch benchmark runs too); this is the PID-file service `aldebaran services up|down` manages. A real
deployment points the channel at its own Alertmanager.
"""

from __future__ import annotations

import logging
from pathlib import Path

from aldebaran.exceptions import ConfigError
from aldebaran_capacity.receivers import alertmanager as am
from aldebaran_lab.services.base import Service

log = logging.getLogger(__name__)

DEFAULT_PORT = 9093


def wanted(environ: dict[str, str] | None = None) -> bool:
    """Whether a configured channel, or the platform's on-call target (ALDEBARAN_ONCALL_CONNECTION), is an
    ``alertmanager`` one on this machine's Alertmanager (the connections as the dispatchers and the
    platform DAGs read them outside Airflow). `make up` starts it then, and `make setup` builds it."""
    import os

    from aldebaran.storage import connections
    from aldebaran.delivery.channels import CONN_TYPES, channel_names, env_connection

    env = os.environ if environ is None else environ
    try:
        configured = [(name, env_connection(name, environ)) for name in channel_names(environ=environ)]
        oncall = env.get("ALDEBARAN_ONCALL_CONNECTION")  # platform.settings.OnCallSettings.connection
        if oncall:
            configured.append(("", connections.from_env(oncall, environ)))
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
        self.config.write_text(am.CONFIG)

    def command(self) -> list[str]:
        return am.command(self.config, self.data, self.address)

    def healthy(self) -> bool:
        return am.ready(self.url)

    def alerts(self, **labels: str) -> list[dict]:
        """The alerts it holds (``GET /api/v2/alerts``), those with every one of `labels` if given."""
        return am.held_alerts(self.url, **labels)

    def received(self) -> int:
        """Alerts posted to it so far, repeats included (its ``alertmanager_alerts_received_total``)."""
        return am.received_total(self.url)
