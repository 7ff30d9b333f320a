"""Where things live: the work tree, the run directory (service data, logs, PID files) and the
download cache that `make setup` fills (keyed by version, outside the work tree)."""

from __future__ import annotations

import hashlib
import os
import shutil
from functools import cache
from pathlib import Path

from aldebaran.exceptions import SetupError
from aldebaran.settings import PathSettings, load

ROOT = Path(__file__).resolve().parents[3]


def _settings() -> PathSettings:
    return load(PathSettings)


def run_dir() -> Path:
    """Service data, logs and PID files (ALDEBARAN_RUN_DIR, default <work tree>/.run)."""
    return (_settings().run_dir or ROOT / ".run").resolve()


def cache_dir() -> Path:
    """Download/build cache shared by every clone on this machine (ALDEBARAN_CACHE)."""
    return _settings().cache or Path.home() / ".cache" / "aldebaran"


def env_file() -> Path:
    """The git-ignored .env with generated credentials (ALDEBARAN_ENV_FILE, default <work tree>/.env)."""
    return _settings().env_file or ROOT / ".env"


@cache
def versions() -> dict[str, str]:
    """setup/versions.env, shared with scripts/setup.sh."""
    out = {}
    for line in (ROOT / "setup" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def jar_dir(name: str) -> Path:
    """The directory of one Maven-resolved jar set (setup/maven/<name>.xml), as setup.sh names it."""
    pom = ROOT / "setup" / "maven" / f"{name}.xml"
    key = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    path = cache_dir() / "jars" / f"{name}-{key}"
    if not (path / ".complete").exists():
        raise SetupError(f"jar set {name!r} is not installed at {path}: run `make setup`")
    return path


def jars(name: str) -> list[Path]:
    return sorted(jar_dir(name).glob("*.jar"))


#: The Spark job runtimes `make setup` builds (setup/runtimes/<name>.txt), by the version callers ask for.
SPARK_RUNTIMES = {"4.3": "spark-4.3"}


def spark_runtime(version: str) -> Path:
    """The venv of a Spark job runtime of its own (the lane's pyspark 4.3, apart from the control venv's
    4.2, whose Airflow provider needs pyspark-client 4.2), as setup.sh names it: keyed by its pins and the
    interpreter."""
    import platform

    if version not in SPARK_RUNTIMES:
        raise SetupError(f"no Spark runtime {version!r}: known are {sorted(SPARK_RUNTIMES)}")
    name = SPARK_RUNTIMES[version]
    pins = (ROOT / "setup" / "runtimes" / f"{name}.txt").read_bytes()
    # setup.sh hashes the pins followed by `python3 -V` ("Python 3.11.7\n").
    key = hashlib.sha256(pins + f"Python {platform.python_version()}\n".encode()).hexdigest()[:12]
    path = cache_dir() / "runtimes" / f"{name}-{key}"
    if not (path / ".complete").exists():
        raise SetupError(f"Spark runtime {version} is not installed at {path}: run `make setup`")
    return path


def minio_binary() -> Path:
    path = cache_dir() / "minio" / versions()["MINIO_VERSION"] / "bin" / "minio"
    if not path.exists():
        raise SetupError(f"MinIO is not built at {path}: run `make setup`")
    return path


def java() -> str:
    """The `java` binary of JAVA_HOME, else the one on PATH (the local Kafka and Kafka's own tools run on it)."""
    java_home = os.environ.get("JAVA_HOME")  # not configuration: the JDK's own convention (spark-submit reads it too)
    found = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not found:
        raise SetupError("no `java` on PATH and JAVA_HOME unset (JDK 17+ required)")
    return found


def pid_file(service: str) -> Path:
    """The PID file of a local service (``aldebaran services up`` writes it; a benchmark reads it to count
    the service's CPU)."""
    return run_dir() / service / f"{service}.pid"


def venv_bin(tool: str) -> Path:
    """A console script of the active virtualenv (the one running this code)."""
    import sys

    return Path(sys.executable).parent / tool
