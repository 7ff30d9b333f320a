"""Prometheus / OpenMetrics endpoints of the long-running processes: the auditor's driver, the streaming
dispatchers and the lane keeper each serve ``/metrics`` over HTTP (prometheus_client), with ``/healthz`` and
``/readyz`` beside it (aldebaran.runtime.probes), bound to
``ALDEBARAN_METRICS_BIND`` (127.0.0.1) on a port from ``ALDEBARAN_METRICS_<ROLE>_PORT``.

Port 0 (the default) is an ephemeral port the kernel picks, so any number of dispatchers share a host
without colliding; a fixed port that is taken falls back to an ephemeral one, with a warning. Each
process publishes where it serves twice: in its heartbeat (``"metrics": "host:port"``, through
:func:`address`) and as a Prometheus ``file_sd`` target file in ``ALDEBARAN_METRICS_TARGETS_DIR``
(default ``<run dir>/metrics-targets``), removed at exit; a target file whose process is gone is pruned
by the next process that starts serving on the host. docs/operations.md "Metrics" has the scrape config.

The hot path pays nothing per event: the auditor updates its metrics once per micro-batch (its query
listener), and the dispatchers and the keeper are read at scrape time from what their heartbeats already
hold (:mod:`aldebaran.runtime.metrics_roles`). prometheus_client is imported only when a server starts or a metric
is made, never at DAG parse time.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from aldebaran.runtime.procs import pid_alive

log = logging.getLogger(__name__)

Role = Literal["auditor", "dispatcher", "lane"]
TARGET_SUFFIX = ".json"


class MetricsSettings(BaseSettings):
    """The /metrics endpoints of the auditor, the streaming dispatchers and the lane keeper."""

    model_config = SettingsConfigDict(env_prefix="ALDEBARAN_METRICS_", extra="ignore")

    enabled: bool = Field(
        True, description="ALDEBARAN_METRICS_ENABLED: serve Prometheus/OpenMetrics /metrics from the auditor, the "
                          "streaming dispatchers and the lane keeper",
    )
    bind: str = Field(
        "127.0.0.1", min_length=1,
        description="ALDEBARAN_METRICS_BIND: address the /metrics servers listen on (0.0.0.0: every interface, for "
                    "a Prometheus on another host)",
    )
    auditor_port: int = Field(
        0, ge=0, le=65535, description="ALDEBARAN_METRICS_AUDITOR_PORT: the auditor driver's /metrics port (0: an "
                                       "ephemeral port, published in its heartbeat and target file)",
    )
    dispatcher_port: int = Field(
        0, ge=0, le=65535,
        description="ALDEBARAN_METRICS_DISPATCHER_PORT: a streaming dispatcher's /metrics port (0: ephemeral; keep 0 "
                    "when several dispatchers share a host)",
    )
    lane_port: int = Field(0, ge=0, le=65535, description="ALDEBARAN_METRICS_LANE_PORT: the lane keeper's /metrics port (0: ephemeral)")
    targets_dir: Path | None = Field(
        None, description="ALDEBARAN_METRICS_TARGETS_DIR: where each process writes its Prometheus file_sd target "
                          "(unset: <run dir>/metrics-targets)",
    )
    ledger_refresh_seconds: float = Field(
        30.0, gt=0,
        description="ALDEBARAN_METRICS_LEDGER_REFRESH_SECONDS: a dispatcher counts its channels' RETRY / DEAD / "
                    "IN_DOUBT index entries (object-store listings) at most this often, at scrape time",
    )
    spark_servlet: bool = Field(
        False,
        description="ALDEBARAN_METRICS_SPARK_SERVLET: also Spark's own PrometheusServlet at /metrics/prometheus of "
                    "the auditor's Spark UI, with the streaming query's metrics (needs ALDEBARAN_SPARK_UI=true)",
    )

    def port(self, role: Role) -> int:
        return {"auditor": self.auditor_port, "dispatcher": self.dispatcher_port, "lane": self.lane_port}[role]


def spark_conf(settings: MetricsSettings | None = None) -> dict[str, str]:
    """Spark conf for its own metrics (ALDEBARAN_METRICS_SPARK_SERVLET): the driver's metrics system in
    Prometheus text at ``<Spark UI>/metrics/prometheus`` (executors' at ``/metrics/executors/prometheus``,
    on by default in Spark 4), including each streaming query's input/processing rate and latency."""
    from aldebaran.settings import load

    settings = settings or load(MetricsSettings)
    if not settings.spark_servlet:
        return {}
    return {
        "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
        "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
        "spark.ui.prometheus.enabled": "true",
        "spark.sql.streaming.metricsEnabled": "true",
        # Metric names keyed by the application's name, not its per-run id: a restarted auditor's series continue.
        "spark.metrics.namespace": "${spark.app.name}",
    }


# --- the process's registry ----------------------------------------------------------------------------
class _Sources:
    """A prometheus_client collector over callables read at scrape time (one per watched object).

    Each source returns metric families; families of the same name from several sources (two dispatchers
    in one process: tests) are merged into one, as the exposition format requires."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[str, Callable[[], Iterable]] = {}

    def add(self, key: str, source: Callable[[], Iterable]) -> None:
        with self._lock:
            self._sources[key] = source

    def remove(self, key: str) -> None:
        with self._lock:
            self._sources.pop(key, None)

    def collect(self):
        with self._lock:
            sources = list(self._sources.values())
        merged: dict = {}
        for source in sources:
            for family in source():
                if family.name in merged:
                    merged[family.name].samples.extend(family.samples)
                else:
                    merged[family.name] = family
        return list(merged.values())


_lock = threading.RLock()
_registry = None
_sources: _Sources | None = None
_server = None  # (WSGIServer, thread) of this process
_address: str | None = None
_target_file: Path | None = None


def registry():
    """This process's CollectorRegistry (made on first use, with the process collector: CPU, memory, fds)."""
    global _registry, _sources
    with _lock:
        if _registry is None:
            from prometheus_client import CollectorRegistry, ProcessCollector

            _registry = CollectorRegistry()
            ProcessCollector(registry=_registry)
            _sources = _Sources()
            _registry.register(_sources)
        return _registry


def add_source(key: str, source: Callable[[], Iterable]) -> None:
    """Read `source()` (metric families) at every scrape, until :func:`remove_source`."""
    registry()
    _sources.add(key, source)


def remove_source(key: str) -> None:
    if _sources is not None:
        _sources.remove(key)


def address() -> str | None:
    """``host:port`` this process serves /metrics on (None: it does not)."""
    return _address


def serve(role: Role, name: str, settings: MetricsSettings | None = None) -> str | None:
    """Start this process's /metrics server, once (later calls return the same address). Returns
    ``host:port``, or None when ALDEBARAN_METRICS_ENABLED is false. A fixed port that is taken falls
    back to an ephemeral one: a metrics port must never stop the process it describes."""
    global _server, _address
    from aldebaran.settings import load

    settings = settings or load(MetricsSettings)
    with _lock:
        if _address is not None or not settings.enabled:
            return _address
        from prometheus_client import start_http_server

        port = settings.port(role)
        try:
            _server = start_http_server(port, addr=settings.bind, registry=registry())
        except OSError as exc:
            if port == 0:
                raise
            log.warning("%s %s: metrics port %s:%d not available (%s); serving on an ephemeral port instead",
                        role, name, settings.bind, port, exc)
            _server = start_http_server(0, addr=settings.bind, registry=registry())
        from aldebaran.runtime import probes

        # /healthz and /readyz on the same server and port (aldebaran.runtime.probes); /metrics goes on as before.
        _server[0].set_app(probes.wsgi(_server[0].get_app()))
        bound = _server[0].server_address[1]
        host = settings.bind if settings.bind not in ("0.0.0.0", "::", "") else socket.gethostname()
        _address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        _write_target(settings, role, name)
        log.info("%s %s: metrics at http://%s/metrics", role, name, _address)
        return _address


def stop() -> None:
    """Stop the server and remove the target file (tests; a process that exits needs nothing: atexit)."""
    global _server, _address
    with _lock:
        if _server is not None:
            _server[0].shutdown()
            _server[0].server_close()
        _server, _address = None, None
        _remove_target()


# --- file_sd targets -----------------------------------------------------------------------------------
def targets_dir(settings: MetricsSettings) -> Path:
    if settings.targets_dir is not None:
        return settings.targets_dir
    from aldebaran.runtime import paths

    return paths.run_dir() / "metrics-targets"


def _write_target(settings: MetricsSettings, role: str, name: str) -> None:
    global _target_file
    directory = targets_dir(settings)
    host, pid = socket.gethostname(), os.getpid()
    body = [{"targets": [_address], "labels": {"role": role, "name": name, "host": host, "pid": str(pid)}}]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        prune_targets(directory, host)
        path = directory / f"{role}-{re.sub(r'[^A-Za-z0-9._-]', '_', name)}-{host}-{pid}{TARGET_SUFFIX}"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, path)  # Prometheus never reads half a file
    except OSError as exc:
        log.warning("%s %s: metrics target not written to %s: %s", role, name, directory, exc)
        return
    _target_file = path
    atexit.register(_remove_target)


def _remove_target() -> None:
    global _target_file
    if _target_file is not None:
        _target_file.unlink(missing_ok=True)
        _target_file = None


def prune_targets(directory: Path, host: str) -> list[Path]:
    """Remove the target files of this host's processes that are gone (killed: no atexit ran)."""
    removed = []
    for path in directory.glob(f"*{TARGET_SUFFIX}"):
        try:
            labels = json.loads(path.read_text())[0]["labels"]
            if labels.get("host") != host or pid_alive(int(labels["pid"])):
                continue
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue  # not ours to judge (another writer's file, or one being replaced)
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


# --- building metric families at scrape time -----------------------------------------------------------
def family(kind: Literal["counter", "gauge"], name: str, doc: str, labels: list[str],
           rows: Iterable[tuple[tuple, float | int | None]]):
    """One CounterMetricFamily / GaugeMetricFamily from (label values, value) rows; None values are left out
    (a figure the process does not know yet is absent, not 0)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    made = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, doc, labels=labels)
    for values, value in rows:
        if value is not None:
            made.add_metric([str(v) for v in values], float(value))
    return made
