"""PostgreSQL from Debian's `postgresql` package (`make setup-ha` installs it), with its data under the
run directory: Airflow's metadata database in the HA profile.

initdb and postgres refuse to run as root. When this code runs as root (this machine's sessions do), both
run as the package's `postgres` OS user (subprocess ``user=``); the data directory is handed to that user.
Run as any other user, they run as that user. The server listens on 127.0.0.1 only, keeps its socket in
its own directory (not /var/run/postgresql), and authenticates TCP clients with SCRAM.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from aldebaran.exceptions import ConfigError, ServiceError, SetupError
from aldebaran_lab.services.base import Service

log = logging.getLogger(__name__)

OS_USER = "postgres"  # the Debian package's system user


def bindir() -> Path:
    """The newest /usr/lib/postgresql/<major>/bin holding `postgres` (Debian's layout)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise SetupError("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres): run `make setup-ha`")
    return found[-1].parent


def server_options(*, host: str, port: int, socket_dir: Path, max_connections: int = 150) -> list[str]:
    """`postgres -c` settings: loopback only, own socket directory, lean memory (a lab, not a tuned DB)."""
    settings = {
        "listen_addresses": host,
        "port": str(port),
        "unix_socket_directories": str(socket_dir),
        "max_connections": str(max_connections),
        "shared_buffers": "32MB",
        "work_mem": "2MB",
        "maintenance_work_mem": "16MB",
        "logging_collector": "off",
        "log_min_messages": "warning",
    }
    return [arg for k, v in settings.items() for arg in ("-c", f"{k}={v}")]


class Postgres(Service):
    name = "postgres"
    start_timeout = 60.0
    stop_timeout = 30.0
    stop_signal = signal.SIGINT  # "fast shutdown": roll back open transactions, then exit cleanly

    def __init__(self, *, root: Path, port: int, user: str, password: str, database: str,
                 host: str = "127.0.0.1") -> None:
        super().__init__(root)
        self.host, self.port, self.user, self.password, self.database = host, port, user, password, database
        self.address = f"{host}:{port}"
        self.data = self.home / "data"
        self.sockets = self.home / "socket"

    # Root: run as the package's user. Anyone else: as themselves.
    def _as_user(self) -> dict:
        return {"user": OS_USER, "group": OS_USER, "extra_groups": []} if os.geteuid() == 0 else {}

    def popen_options(self) -> dict:
        return self._as_user()

    def _chown(self, *paths: Path) -> None:
        if os.geteuid() == 0:
            pw = pwd.getpwnam(OS_USER)
            for p in paths:
                shutil.chown(p, pw.pw_uid, pw.pw_gid)

    def prepare(self) -> None:
        if not self.password:
            raise ConfigError("the Postgres password is empty (the HA profile's: ALDEBARAN_HA_POSTGRES_PASSWORD in .env.ha)")
        self.sockets.mkdir(parents=True, exist_ok=True)
        self._chown(self.home, self.sockets)
        if (self.data / "PG_VERSION").exists():
            return
        pwfile = self.home / ".pwfile"
        pwfile.write_text(self.password + "\n")
        os.chmod(pwfile, 0o600)
        self._chown(pwfile)
        log.info("postgres: initdb %s (superuser %s)", self.data, self.user)
        try:
            self._run([str(bindir() / "initdb"), "-D", str(self.data), "-U", self.user, f"--pwfile={pwfile}",
                       "--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8", "--no-instructions"])
        finally:
            pwfile.unlink(missing_ok=True)

    def _run(self, args: list[str]) -> None:
        result = subprocess.run(args, capture_output=True, text=True, cwd=self.home, **self._as_user())
        if result.returncode != 0:
            hint = (f"\n(running as the `{OS_USER}` OS user: every parent of {self.home} must be searchable by it; "
                    "a private temporary directory (mode 0700) is not)" if "Permission denied" in result.stderr else "")
            raise ServiceError(
                f"postgres: {Path(args[0]).name} failed ({result.returncode}): {result.stderr[-2000:]}{hint}")

    def command(self) -> list[str]:
        return [str(bindir() / "postgres"), "-D", str(self.data),
                *server_options(host=self.host, port=self.port, socket_dir=self.sockets)]

    def healthy(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1):
                pass
        except OSError:
            return False
        return self._query("SELECT 1") is not None

    def _query(self, sql: str, database: str = "postgres"):
        import psycopg2

        try:
            conn = psycopg2.connect(host=self.host, port=self.port, user=self.user, password=self.password,
                                    dbname=database, connect_timeout=2)
        except psycopg2.OperationalError:  # starting up, shutting down or not there
            return None
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def after_start(self) -> None:
        rows = self._query(f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'")
        if not rows:
            self._query(f'CREATE DATABASE "{self.database}" OWNER "{self.user}"')
            log.info("postgres: created database %s", self.database)

    def url(self, driver: str = "postgresql+psycopg2") -> str:
        """SQLAlchemy URL of the database (Airflow's sql_alchemy_conn)."""
        return f"{driver}://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"
