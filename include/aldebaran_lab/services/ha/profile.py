"""The HA profile's layout: members, ports and the generated `.env.ha` (pure: no processes, no I/O but the
env file). Its ports sit in the 19xxx range, apart from the core services (Kafka 9092, MinIO 9000,
Airflow 8080, Spark 7077/8081-8083), so both profiles run side by side on one machine."""

from __future__ import annotations

import datetime as dt
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from aldebaran.runtime import envfile, paths

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Layout:
    kafka_ports: tuple[int, ...] = (19092, 19093, 19094)
    controller_ports: tuple[int, ...] = (19192, 19193, 19194)
    minio_ports: tuple[int, ...] = (19000, 19001, 19002, 19003)
    # The clients' one S3 endpoint: HAProxy over the MinIO nodes (a dead node is taken out within ~1 s).
    minio_lb_port: int = 19010
    # HAProxy's own status page (CSV at /stats;csv): which MinIO nodes it holds UP or DOWN.
    minio_lb_stats_port: int = 19011
    postgres_port: int = 19432
    airflow_port: int = 19080
    scheduler_health_ports: tuple[int, ...] = (19974, 19975)
    triggerers: int = 2
    spark_port: int = 19077
    spark_ui_port: int = 19081
    spark_worker_ui_ports: tuple[int, ...] = (19082, 19083)
    replication_factor: int = 3
    min_insync_replicas: int = 2
    kafka_heap: str = "-Xmx320m"
    # Failover in seconds: a SIGKILLed broker is fenced, its partitions' leadership moved and it
    # leaves their ISRs once the controller misses its heartbeats for broker.session.timeout.ms (Kafka's
    # default 9 s, heartbeats every 2 s). 3 s here, heartbeats every 0.5 s: a broker frozen for 3 s (a GC
    # pause, a starved machine) is fenced too and rejoins by itself; acks=all with min ISR 2 loses nothing.
    kafka_broker_session_ms: int = 3000
    kafka_broker_heartbeat_ms: int = 500
    # A follower that stops fetching leaves the ISR after this long (default 30 s), so acks=all stops
    # waiting for it even when it is not fenced (alive but stuck).
    kafka_replica_lag_ms: int = 10000
    spark_daemon_memory: str = "256m"
    # Executor slots per worker (not physical cores): two, so that when a worker dies the applications it
    # ran get their executors on the other one at once instead of waiting for it to come back.
    spark_worker_cores: int = 2
    spark_worker_memory: str = "2g"
    # MinIO sizes its caches from the machine's memory; a soft Go heap limit keeps each node lean.
    minio_memlimit: str = "384MiB"

    def __post_init__(self) -> None:
        if len(self.kafka_ports) != len(self.controller_ports):
            raise ValueError("one controller port per Kafka broker")
        if not 1 <= self.min_insync_replicas < self.replication_factor <= len(self.kafka_ports):
            raise ValueError("need min.insync.replicas < replication factor <= brokers (one broker may die)")
        if len(self.minio_ports) < 4:
            raise ValueError("MinIO erasure coding over separate nodes needs at least 4 drives")

    def bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{p}" for p in self.kafka_ports)

    def controller_voters(self) -> str:
        """KRaft's static voter set: ``<node id>@host:port`` for every broker (each is also a controller)."""
        return ",".join(f"{i}@{HOST}:{p}" for i, p in enumerate(self.controller_ports, start=1))

    def minio_endpoints(self, root: Path) -> list[str]:
        """One drive per node: the same argument list for every MinIO server. Each node serves its own path
        (MinIO refuses one path served on two ports of one address)."""
        return [f"http://{HOST}:{p}{root / f'minio-{i}' / 'data'}" for i, p in enumerate(self.minio_ports, start=1)]

    def members(self) -> dict[str, str]:
        """Member name -> kind, in start order (a member's dependencies come before it)."""
        out = {"postgres": "postgres"}
        out |= {f"kafka-{i}": "kafka" for i in range(1, len(self.kafka_ports) + 1)}
        out |= {f"minio-{i}": "minio" for i in range(1, len(self.minio_ports) + 1)}
        out |= {"minio-lb": "minio-lb"}
        out |= {"spark-master": "spark-master"}
        out |= {f"spark-worker-{i}": "spark-worker" for i in range(1, len(self.spark_worker_ui_ports) + 1)}
        out |= {"airflow-api-server": "airflow", "airflow-dag-processor": "airflow"}
        out |= {f"airflow-scheduler-{i}": "airflow" for i in range(1, len(self.scheduler_health_ports) + 1)}
        out |= {f"airflow-triggerer-{i}": "airflow" for i in range(1, self.triggerers + 1)}
        return out

    def groups(self) -> dict[str, tuple[str, ...]]:
        """Members started together: a quorum's members cannot become healthy one at a time."""
        out: dict[str, list[str]] = {}
        for name, kind in self.members().items():
            key = name if kind == "postgres" else (
                "airflow" if name.startswith("airflow-") else kind.split("-")[0])
            out.setdefault(key, []).append(name)
        return {k: tuple(v) for k, v in out.items()}


LAYOUT = Layout()

DB_USER = "aldebaran"
DB_NAME = "airflow"
POSTGRES_PASSWORD = "ALDEBARAN_HA_POSTGRES_PASSWORD"
SECRETS = {**envfile.GENERATED, POSTGRES_PASSWORD: lambda: secrets.token_urlsafe(24)}


def root() -> Path:
    """The HA profile's subtree of the run directory: data, logs and PID files of every member."""
    return paths.run_dir() / "ha"


def env_path() -> Path:
    """`.env.ha`, beside the core `.env` (git-ignored)."""
    return paths.env_file().with_name(".env.ha")


def env_values(existing: dict[str, str], layout: Layout = LAYOUT, run_root: Path | None = None) -> dict[str, str]:
    """Every variable of `.env.ha`: the secrets already in ``existing`` are kept (else generated), the
    addresses are derived from the layout (always rewritten, so a changed port takes effect)."""
    run_root = run_root or root()
    values = {k: existing.get(k) or gen() for k, gen in SECRETS.items()}
    password = values[POSTGRES_PASSWORD]
    values |= {
        "ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS": layout.bootstrap_servers(),
        "ALDEBARAN_KAFKA_REPLICATION_FACTOR": str(layout.replication_factor),
        # The balancer's endpoint: clients reach whichever MinIO nodes are alive (see docs).
        "ALDEBARAN_S3_ENDPOINT_URL": f"http://{HOST}:{layout.minio_lb_port}",
        "ALDEBARAN_AIRFLOW_HOST": HOST,
        "ALDEBARAN_AIRFLOW_PORT": str(layout.airflow_port),
        "ALDEBARAN_SPARK_MASTER": f"spark://{HOST}:{layout.spark_port}",
        "ALDEBARAN_LOG_CHANNEL_PATH": str(run_root / "alerts.log.jsonl"),
        # A standby on another host takes over once the dead active's lease expires: 6 s (renewed every
        # 2 s) instead of the single-machine default 30 s (docs/design.md, "Failover on three hosts").
        "ALDEBARAN_AUDIT_LEASE_SECONDS": "6",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
            f"postgresql+psycopg2://{DB_USER}:{password}@{HOST}:{layout.postgres_port}/{DB_NAME}",
    }
    return values


def render(values: dict[str, str]) -> str:
    header = (
        f"# Generated by `aldebaran services up --ha` on {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}: the HA\n"
        "# profile's addresses and credentials. Git-ignored; .env.example describes it. Point any aldebaran\n"
        "# command at the HA profile with ALDEBARAN_ENV_FILE=.env.ha. Delete to regenerate the secrets.\n"
    )
    return header + "".join(f"{k}={v}\n" for k, v in values.items())


def ensure_env(path: Path | None = None, layout: Layout = LAYOUT) -> dict[str, str]:
    """Write `.env.ha` (mode 0600), keeping its secrets; return its values."""
    path = path or env_path()
    existing = envfile.parse(path.read_text()) if path.exists() else {}
    values = env_values(existing, layout)
    if values != existing:
        path.write_text(render(values))
    os.chmod(path, 0o600)
    return values


def read_env(path: Path | None = None) -> dict[str, str]:
    """The values of an existing `.env.ha` (the members' credentials); {} when there is none yet."""
    path = path or env_path()
    return envfile.parse(path.read_text()) if path.exists() else {}
