"""The HA profile's Airflow: one process per component on Postgres (api-server, dag-processor, two
schedulers, two triggerers), not `airflow standalone`. Each is a member with its own PID file, so one can
be killed and started again; they share AIRFLOW_HOME (<run dir>/ha/airflow-home) and the metadata DB.

Besides the api-server's port, each scheduler binds its health-check server (its own port: two schedulers
share the host, and the core Airflow has 8974). Schedulers and triggerers run with --skip-serve-logs: their
log servers bind every interface on fixed ports (Airflow 3.3 hard-codes the host), and every component here
shares one AIRFLOW_HOME, so the api-server reads task and trigger logs from disk.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from aldebaran.runtime import paths
from aldebaran.exceptions import ConfigError, ServiceError
from aldebaran.settings import ObjectStoreSettings
from aldebaran_lab.services.airflow import TRIGGERER_HEALTH_CHECK_THRESHOLD, connections_env
from aldebaran_lab.services.base import Service
from aldebaran_lab.services.ha.members import kafka_settings
from aldebaran_lab.services.ha.profile import HOST, Layout

log = logging.getLogger(__name__)


def airflow_env(layout: Layout, values: dict[str, str], home: Path) -> dict[str, str]:
    """What every component shares: the core Airflow's settings with Postgres, the HA ports and the HA
    profile's secrets (``values``: `.env.ha`)."""
    url = values.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
    if not url.startswith("postgresql"):
        raise ConfigError("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN in .env.ha must name the HA profile's Postgres")
    address = f"{HOST}:{layout.airflow_port}"
    env = {
        **values,
        "PATH": f"{paths.venv_bin('airflow').parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(paths.ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(paths.ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        # Six components share one small Postgres: small pools each.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE": "3",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_MAX_OVERFLOW": "5",
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(layout.airflow_port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__BASE_URL": f"http://{address}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{address}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": HOST,
        # A changed file is re-parsed at the next refresh whatever this says (file_parsing_sort_mode
        # modified_time); an unchanged one is not re-parsed every 30 s (the default): docs/design.md §5.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": TRIGGERER_HEALTH_CHECK_THRESHOLD,
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }
    # The DAGs' connections point at the HA Kafka, Spark master and MinIO balancer, whatever the caller's
    # environment says.
    s3 = ObjectStoreSettings(endpoint_url=values["ALDEBARAN_S3_ENDPOINT_URL"],
                             access_key=values.get("ALDEBARAN_S3_ACCESS_KEY"), secret_key=values.get("ALDEBARAN_S3_SECRET_KEY"))
    env |= connections_env(kafka_settings(layout), values.get("ALDEBARAN_SPARK_MASTER"), s3)
    return env


def component_ports(name: str, layout: Layout) -> dict[str, str]:
    """The per-member port of a scheduler (`airflow-scheduler-<i>`): its health-check server."""
    kind, _, index = name.removeprefix("airflow-").partition("-")
    if kind == "scheduler":
        return {"AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT":
                str(layout.scheduler_health_ports[int(index) - 1])}
    return {}


def migrate(layout: Layout, values: dict[str, str], root: Path) -> None:
    """`airflow db migrate` on the HA Postgres (idempotent; the first run creates the schema)."""
    part = AirflowPart("airflow-api-server", root=root, layout=layout, values=values)
    part.airflow_home.mkdir(parents=True, exist_ok=True)
    log.info("airflow: db migrate on the HA Postgres")
    result = subprocess.run([str(paths.venv_bin("airflow")), "db", "migrate"], env=part.environment(),
                            cwd=part.airflow_home, capture_output=True, text=True)
    if result.returncode != 0:
        raise ServiceError(f"airflow db migrate failed ({result.returncode}): {result.stderr[-2000:]}")


class AirflowPart(Service):
    """One Airflow component: ``airflow-api-server``, ``airflow-dag-processor``, ``airflow-scheduler-<i>``
    or ``airflow-triggerer-<i>``."""

    start_timeout = 240.0
    stop_timeout = 45.0

    def __init__(self, name: str, *, root: Path, layout: Layout, values: dict[str, str]) -> None:
        self.name = name
        super().__init__(root)
        self.kind = name.removeprefix("airflow-").split("-")[0]
        self.layout, self.values = layout, values
        self.airflow_home = root / "airflow-home"
        ports = component_ports(name, layout)
        self.health_port = int(ports.get("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT", 0))
        self.address = {
            "api": f"{HOST}:{layout.airflow_port}",
            "scheduler": f"{HOST}:{self.health_port} (health)",
        }.get(self.kind, "-")

    def environment(self) -> dict[str, str]:
        return {**os.environ, **airflow_env(self.layout, self.values, self.airflow_home),
                **component_ports(self.name, self.layout)}

    def command(self) -> list[str]:
        airflow = str(paths.venv_bin("airflow"))
        if self.kind == "api":
            return [airflow, "api-server", "--host", HOST, "--port", str(self.layout.airflow_port), "--workers", "1"]
        if self.kind == "dag":
            return [airflow, "dag-processor"]
        return [airflow, self.kind, "--skip-serve-logs"]

    def prepare(self) -> None:
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        if self.kind == "api":
            password = self.values.get("ALDEBARAN_AIRFLOW_ADMIN_PASSWORD")
            if not password:
                raise ConfigError("ALDEBARAN_AIRFLOW_ADMIN_PASSWORD missing from .env.ha")
            passwords = self.airflow_home / "passwords.json"
            passwords.write_text(json.dumps({"admin": password}))
            os.chmod(passwords, 0o600)

    def _get(self, url: str) -> tuple[int, bytes] | None:
        try:
            with urllib.request.urlopen(url, timeout=3) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except OSError:
            return None

    def api_health(self) -> dict:
        """The api-server's /api/v2/monitor/health ({} when it does not answer)."""
        got = self._get(f"http://{HOST}:{self.layout.airflow_port}/api/v2/monitor/health")
        try:
            return json.loads(got[1]) if got and got[0] == 200 else {}
        except ValueError:
            return {}

    def healthy(self) -> bool:
        """api-server: answers its health endpoint with a healthy metadatabase. Scheduler: its own health
        server says its job heartbeats (per member). dag-processor and triggerers: the process runs and the
        api-server reports that kind healthy (Airflow 3.3's health names no instance; see docs)."""
        if self.kind == "scheduler":
            got = self._get(f"http://{HOST}:{self.health_port}/health")
            return got is not None and got[0] == 200
        if not self.running():
            return False
        part = {"api": "metadatabase", "dag": "dag_processor", "triggerer": "triggerer"}[self.kind]
        return self.api_health().get(part, {}).get("status") == "healthy"
