"""Policy tests for the container setup (docker-compose.yml, Dockerfile, .env.example): fast, no
Docker needed. They pin what docs/docker.md promises: the service names, loopback-only ports, no
default secrets, Airflow components that share their keys, an Astro Runtime 3 base image, and an
.env.example in tiers that, with the configuration reference of docs/operations.md, documents exactly the
variables the code reads."""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from aldebaran import settings
from aldebaran.runtime import envfile, paths

ROOT = paths.ROOT
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENV_EXAMPLE = ROOT / ".env.example"
OPERATIONS = ROOT / "docs" / "operations.md"
# The product and the capacity and lab packages beside it: .env.example documents what any of them reads.
PACKAGES = sorted((ROOT / "include").glob("aldebaran*/"))
# Handed by a test receiver's or benchmark client's parent to the child process it starts (a secret
# kept off the command line, a client's spec): nobody sets them, so .env.example does not list them.
CHILD_PROCESS_HANDOFF = {"ALDEBARAN_RECEIVER_SECRET", "ALDEBARAN_RECEIVER_TOKEN", "ALDEBARAN_BENCH_CLIENT_SPEC",
                         "ALDEBARAN_SUBMIT_SPEC"}

SERVICES = {
    "kafka", "kafka-init", "minio", "minio-init", "spark-master", "spark-worker", "postgres",
    "airflow-init", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
}
AIRFLOW_SERVICES = ["airflow-init", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
AIRFLOW_SHARED_SECRETS = {
    "AIRFLOW__API_AUTH__JWT_SECRET": "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__API__SECRET_KEY": "AIRFLOW__API__SECRET_KEY",
    "AIRFLOW__CORE__FERNET_KEY": "AIRFLOW__CORE__FERNET_KEY",
}
LOOPBACK = "127.0.0.1"

# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?message}, ${VAR?message}, ... ($${X} is an escape).
REFERENCE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}")
ENV_VAR_NAME = re.compile(r"\b((?:ALDEBARAN|AIRFLOW)_[A-Z0-9_]*[A-Z0-9])\b")


# --- helpers -------------------------------------------------------------------------------------
@cache
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict:
    return compose()["services"]


def required_reference(value) -> str | None:
    """The variable name if `value` is exactly one `${VAR:?message}` reference, else None."""
    match = REFERENCE.fullmatch(str(value).strip())
    if match and match.group(2) in (":?", "?"):
        return match.group(1)
    return None


def published_host_ips(port) -> list[str | None]:
    """Host addresses a `ports:` entry publishes on (None: every interface)."""
    if isinstance(port, dict):  # long syntax
        return [port.get("host_ip")] if port.get("published") is not None else []
    spec = REFERENCE.sub("X", str(port)).split("/", 1)[0]
    if spec.startswith("["):  # [ipv6]:host:container
        return [spec[1:spec.index("]")]]
    parts = spec.split(":")
    return [parts[0]] if len(parts) == 3 else [None]


def example_variables() -> dict[str, str]:
    """NAME -> line of every assignment in .env.example, commented out or not."""
    found = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.match(r"^#?\s?([A-Z][A-Z0-9_]*)=", line)
        if match:
            found[match.group(1)] = line
    return found


@cache
def package_sources() -> dict[Path, str]:
    return {path: path.read_text() for package in PACKAGES for path in sorted(package.rglob("*.py"))}


@cache  # parsed once per run, not once per variable (48 s in CI)
def settings_variables() -> dict[str, Path]:
    """Env vars of every pydantic-settings class: env_prefix + field name, upper-cased; a class also reads
    the fields of the package's classes it extends (aldebaran.settings.SupervisionSettings)."""
    classes: dict[str, tuple[str | None, list[str], list[str], Path]] = {}
    for path, source in package_sources().items():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ClassDef):
                continue
            prefix = None
            fields = []
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and any(getattr(t, "id", "") == "model_config" for t in stmt.targets):
                    for kw in getattr(stmt.value, "keywords", []):
                        if kw.arg == "env_prefix" and isinstance(kw.value, ast.Constant):
                            prefix = kw.value.value
                elif (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                      and not stmt.target.id.startswith("_")):  # a private attribute is no setting
                    fields.append(stmt.target.id)
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            classes[node.name] = (prefix, fields, bases, path)

    def inherited(name: str) -> list[str]:
        _, fields, bases, _ = classes.get(name, (None, [], [], None))
        return fields + [f for base in bases if base in classes for f in inherited(base)]

    found = {}
    for name, (prefix, _, _, path) in classes.items():
        if prefix:
            for field in inherited(name):
                if field != "model_config":
                    found[(prefix + field).upper()] = path
    return found


@cache
def literal_variables() -> dict[str, Path]:
    """ALDEBARAN_* / AIRFLOW_* names spelled out in the package (prefixes like ALDEBARAN_KAFKA_ excluded)."""
    found = {}
    for path, source in package_sources().items():
        for name in ENV_VAR_NAME.findall(source):
            found.setdefault(name, path)
    return found


def read_by_package(name: str) -> bool:
    return name in literal_variables() or name in settings_variables()


def final_from(dockerfile: str) -> str:
    images = re.findall(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", dockerfile, flags=re.MULTILINE | re.IGNORECASE)
    assert images, "the Dockerfile has no FROM"
    return images[-1]


ASTRO_RUNTIME_3 = re.compile(
    r"^(?:astrocrpublic\.azurecr\.io/runtime|quay\.io/astronomer/astro-runtime):3\.\d+(?:-\d+)?(?:-python-3\.\d+)?(?:-base)?$"
)


# --- the helpers themselves can say no --------------------------------------------------------
@pytest.mark.parametrize(
    ("port", "expected"),
    [
        ("127.0.0.1:8080:8080", [LOOPBACK]),
        ("127.0.0.1:${PORT:-8080}:8080", [LOOPBACK]),
        ("8080:8080", [None]),
        ("8080", [None]),
        ("0.0.0.0:9000:9000/tcp", ["0.0.0.0"]),
        ({"target": 80, "published": 8080}, [None]),
        ({"target": 80, "published": 8080, "host_ip": LOOPBACK}, [LOOPBACK]),
    ],
)
def test_port_parser(port, expected):
    assert published_host_ips(port) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${X:?missing}", "X"),
        ("${X?missing}", "X"),
        ("${X:-secret}", None),
        ("${X}", None),
        ("hunter2", None),
        ("prefix-${X:?missing}", None),
    ],
)
def test_required_reference_parser(value, expected):
    assert required_reference(value) == expected


def test_astro_runtime_pattern_rejects_other_images():
    assert ASTRO_RUNTIME_3.match("astrocrpublic.azurecr.io/runtime:3.3-8-python-3.12-base")
    for image in ("apache/airflow:3.3.2", "quay.io/astronomer/astro-runtime:12.6.0", "astrocrpublic.azurecr.io/runtime:2.3-1"):
        assert not ASTRO_RUNTIME_3.match(image), image


# --- docker-compose.yml --------------------------------------------------------------------------
def test_compose_parses():
    assert isinstance(compose(), dict)
    assert isinstance(services(), dict) and services()


def test_compose_names_every_service():
    missing = SERVICES - set(services())
    assert not missing, f"docker-compose.yml lacks services: {sorted(missing)}"


def test_published_ports_bind_loopback_only():
    offenders = []
    for name, service in services().items():
        assert service.get("network_mode") != "host", f"{name} uses the host network"
        for port in service.get("ports", []) or []:
            ips = published_host_ips(port)
            if any(ip != LOOPBACK for ip in ips):
                offenders.append(f"{name}: {port!r}")
    assert not offenders, f"ports published beyond {LOOPBACK}: {offenders}"


def test_postgres_is_not_published():
    # Its local credentials are only acceptable because nothing outside the compose network reaches it.
    assert not services()["postgres"].get("ports")


def test_airflow_services_share_image_and_secrets():
    envs = {name: services()[name].get("environment") or {} for name in AIRFLOW_SERVICES}
    for key, variable in AIRFLOW_SHARED_SECRETS.items():
        values = {name: env.get(key) for name, env in envs.items()}
        assert len(set(values.values())) == 1, f"{key} differs between Airflow services: {values}"
        assert required_reference(next(iter(values.values()))) == variable, f"{key} must be ${{{variable}:?...}}"
    images = {name: (services()[name].get("build"), services()[name].get("image")) for name in AIRFLOW_SERVICES}
    assert len(set(images.values())) == 1, f"Airflow services run different images: {images}"
    assert all(build == "." for build, _ in images.values()), "Airflow services must build from ./Dockerfile"


def test_airflow_environment_matches_the_brief():
    env = services()["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
    assert "@postgres:" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-api-server:8080/execution/"
    assert env["ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert env["ALDEBARAN_S3_ENDPOINT_URL"] == "http://minio:9000"
    # Spark: local mode unless ALDEBARAN_SPARK_MASTER says otherwise (the cluster is a profile).
    assert env["ALDEBARAN_SPARK_MASTER"] == "${ALDEBARAN_SPARK_MASTER:-local[*]}"
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "${ALDEBARAN_SPARK_MASTER:-local[*]}"
    watcher = json.loads(env["AIRFLOW_CONN_KAFKA_ALERTS_WATCHER"])
    assert watcher["extra"]["bootstrap.servers"] == "kafka:9092"
    assert watcher["extra"]["group.id"] == "aldebaran-alert-watcher"


def test_airflow_mounts_the_project():
    for name in AIRFLOW_SERVICES:
        volumes = services()[name].get("volumes") or []
        for part in ("dags", "plugins", "include", "spark_apps"):
            assert f"./{part}:/usr/local/airflow/{part}" in volumes, f"{name} does not mount ./{part}"


def test_secrets_are_required_never_defaulted():
    minio = services()["minio"]["environment"]
    assert required_reference(minio["MINIO_ROOT_USER"]) == "ALDEBARAN_S3_ACCESS_KEY"
    assert required_reference(minio["MINIO_ROOT_PASSWORD"]) == "ALDEBARAN_S3_SECRET_KEY"
    api = services()["airflow-api-server"]["environment"]
    assert required_reference(api["ALDEBARAN_AIRFLOW_ADMIN_PASSWORD"]) == "ALDEBARAN_AIRFLOW_ADMIN_PASSWORD"

    text = COMPOSE.read_text()
    assert "minioadmin" not in text.lower()
    referenced = {m.group(1): m.group(2) for m in REFERENCE.finditer(text) if m.group(1) in envfile.GENERATED}
    assert referenced, "docker-compose.yml references none of the generated secrets"
    for match in REFERENCE.finditer(text):
        if match.group(1) in envfile.GENERATED:
            assert match.group(2) in (":?", "?"), f"{match.group(0)}: a generated secret must be required (${{VAR:?...}})"


def test_admin_password_reaches_only_the_api_server():
    for name, service in services().items():
        if name != "airflow-api-server":
            assert "ALDEBARAN_AIRFLOW_ADMIN_PASSWORD" not in (service.get("environment") or {}), name


def test_depends_on_uses_conditions():
    for name, service in services().items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on must use conditions"
        for target, spec in depends.items():
            assert target in services(), f"{name} depends on unknown {target}"
            assert spec.get("condition") in {"service_healthy", "service_completed_successfully"}, (name, target)
            if spec["condition"] == "service_healthy":
                assert services()[target].get("healthcheck"), f"{name} waits for {target}, which has no healthcheck"


def test_compose_variables_are_documented():
    documented = example_variables()
    used = {m.group(1) for m in REFERENCE.finditer(COMPOSE.read_text())}
    assert used - set(documented) == set(), f"used in docker-compose.yml, missing from .env.example: {sorted(used - set(documented))}"


# --- .env.example --------------------------------------------------------------------------------
def test_env_example_documents_generated_secrets_without_values():
    documented = example_variables()
    for name in envfile.GENERATED:
        assert name in documented, f".env.example does not document {name}"
        assert documented[name].startswith("#"), f"{name} must stay commented out in .env.example"
        assert re.search(r"=<[^>]+>$", documented[name]), f"{name} needs a <placeholder>, not a value"


def test_env_example_entries_have_a_comment():
    lines = ENV_EXAMPLE.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^#?\s?[A-Z][A-Z0-9_]*=", line):
            above = lines[i - 1] if i else ""
            assert above.startswith("# ") and not re.match(r"^#\s?[A-Z][A-Z0-9_]*=", above), f"no comment above: {line}"


def test_env_example_aldebaran_variables_are_read_by_the_package():
    unread = sorted(name for name in example_variables() if name.startswith("ALDEBARAN_") and not read_by_package(name))
    assert not unread, f".env.example documents variables nothing under include/ reads: {unread}"


def reference_variables() -> set[str]:
    """The variables of docs/operations.md's configuration reference: the first column of its tables
    (the generated one of the settings classes and the hand-written one of the others)."""
    text = OPERATIONS.read_text().split("\n## Configuration reference\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `([A-Z][A-Z0-9_]*)` \|", text, flags=re.MULTILINE)}


def example_blocks() -> dict[str, list[str]]:
    """The ALDEBARAN_ variables of each numbered block of .env.example (``# --- 1. Required …``)."""
    blocks, current = {}, None
    for line in ENV_EXAMPLE.read_text().splitlines():
        heading = re.match(r"^# --- (\d)\. ", line)
        if heading:
            current = blocks.setdefault(heading.group(1), [])
        match = re.match(r"^# (ALDEBARAN_[A-Z0-9_]*)=", line)
        if match and current is not None:
            current.append(match.group(1))
    return blocks


def test_env_example_opens_with_what_a_deployment_must_set_then_what_is_often_tuned():
    blocks = example_blocks()
    assert blocks["1"] == list(settings.DEPLOYMENT) and len(blocks["1"]) <= 15
    assert blocks["2"] == list(settings.OFTEN_TUNED)
    everything = [name for names in blocks.values() for name in names]
    assert len(everything) <= 40, f".env.example has {len(everything)} ALDEBARAN_ lines (at most 40)"
    assert not set(everything) & set(settings.TEST_ONLY), "a test-only setting in .env.example"


def test_the_tiers_name_settings_that_exist():
    for name in (*settings.DEPLOYMENT, *settings.OFTEN_TUNED, *settings.TEST_ONLY):
        assert name in settings_variables(), f"{name} is named in a tier of aldebaran.settings but is no setting"


def test_the_reference_scan_finds_both_tables():
    found = reference_variables()
    assert {"ALDEBARAN_S3_BUCKET", "ALDEBARAN_AUDIT_TTL_SECONDS", "ALDEBARAN_KAFKA_HEAP"} <= found


def test_variables_read_by_the_package_are_documented():
    documented = set(example_variables()) | reference_variables()
    read = {n for n in literal_variables() if n.startswith("ALDEBARAN_") or n.startswith("AIRFLOW_CONN_")}
    read |= set(settings_variables()) | set(envfile.GENERATED)
    read -= CHILD_PROCESS_HANDOFF
    missing = {name: str((literal_variables().get(name) or settings_variables().get(name) or ROOT / "include").relative_to(ROOT))
               for name in sorted(read - documented)}
    assert not missing, f"read by the package but documented neither in .env.example nor docs/operations.md: {missing}"


def test_settings_scan_finds_the_known_settings():
    # Guards the AST scan itself: if it silently found nothing, the two tests above would pass vacuously.
    found = settings_variables()
    for name in ("ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS", "ALDEBARAN_S3_BUCKET", "ALDEBARAN_AUDIT_CHECKPOINT", "ALDEBARAN_AUDIT_TTL_SECONDS"):
        assert name in found, name
    assert "ALDEBARAN_KAFKA_" not in literal_variables()


# --- Dockerfile ----------------------------------------------------------------------------------
def test_dockerfile_builds_on_astro_runtime_3():
    image = final_from(DOCKERFILE.read_text())
    assert ASTRO_RUNTIME_3.match(image), f"final FROM {image!r} is not an Astro Runtime 3.x image"


def test_dockerfile_never_copies_the_whole_context():
    # `COPY . .` would bake the git-ignored .env (generated secrets), .venv and .run into the image.
    for line in DOCKERFILE.read_text().splitlines():
        assert not re.match(r"^\s*(COPY|ADD)\s+(--\S+\s+)*\.\s", line, flags=re.IGNORECASE), line


def test_dockerfile_installs_java_from_packages_txt():
    packages = [p.split("#")[0].strip() for p in (ROOT / "packages.txt").read_text().splitlines()]
    # a JDK: the image compiles include/aldebaran/jvm's classes (javac) at build time
    assert any(re.fullmatch(r"(default|openjdk-\d+)-jdk-headless", p) for p in packages if p)
    assert "connector_jars(s3a=True)" in DOCKERFILE.read_text()
    assert "packages.txt" in DOCKERFILE.read_text()
