"""docker-compose.yml's Airflow environment against what the code reads, and the images against the
local pins: the static half of "compose starts without edits" (no Docker on the machine that wrote
these; docs/docker.md says so).

- every Airflow connection the DAGs, plugins and package name (``conn_id=``, ``*_conn_id=``,
  ``kafka_config_id=``, ``get_connection("...")``) is defined, and nothing else is (no dead
  ``aws_default``); the configured channels build from compose's environment;
- every Airflow Variable read has a fallback setting that compose sets, and compose does not shadow
  the Variable with ``AIRFLOW_VAR_*`` (Airflow reads the environment before its database, so the UI
  could no longer change it);
- every settings class validates with compose's values, a setting whose default is this host is
  pointed at a container, and every ALDEBARAN_* compose sets is read by the package;
- Spark is local unless asked; the cluster is a profile nothing else waits for;
- MinIO, Python, Airflow and Spark match setup/versions.env, the venv, constraints.txt and
  requirements.txt; the Dockerfile installs with constraints.txt.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from functools import cache
from pathlib import Path

import pytest

from aldebaran.runtime import paths
from aldebaran.delivery.channels import channel_from_connection, channel_names, env_connection
from aldebaran.delivery.channels.sources import CHANNELS_SETTING, CHANNELS_VARIABLE
from aldebaran_lab import docsgen
from tests.unit.deploy.test_compose import REFERENCE, final_from, read_by_package, services

ROOT = paths.ROOT
SOURCES = [*sorted((ROOT / "dags").glob("*.py")), *sorted((ROOT / "plugins").rglob("*.py")),
           *sorted((ROOT / "include" / "aldebaran").rglob("*.py"))]
CLUSTER_PROFILE = "spark-cluster"
LOOPBACK = re.compile(r"127\.0\.0\.1|localhost")


# --- helpers -------------------------------------------------------------------------------------
def resolve(value) -> str:
    """A compose value as it reaches the container on a first run with only the generated secrets
    set: ``${X:-d}`` → d, ``${X:?msg}`` → a placeholder, ``${X}`` → empty, ``$$`` → ``$``."""
    def one(match: re.Match) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        if op in (":-", "-"):
            return arg
        if op in (":?", "?"):
            return f"placeholder-{name.lower().replace('_', '-')}"
        return ""
    return REFERENCE.sub(one, str(value)).replace("$$", "$")


@cache
def airflow_env() -> dict[str, str]:
    """The Airflow containers' environment, resolved (scheduler: it runs the tasks)."""
    return {k: resolve(v) for k, v in services()["airflow-scheduler"]["environment"].items()}


@cache
def trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), filename=str(path)) for path in SOURCES}


def constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "string" assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def string_of(node: ast.expr, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


@cache
def connections_read() -> dict[str, Path]:
    """Connection ids spelled out in the code: keyword arguments naming a connection and
    ``get_connection("id")`` calls. (Channel connections are per channel: see the channel test.)"""
    found = {}
    for path, tree in trees().items():
        names = constants(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg and (kw.arg == "conn_id" or kw.arg.endswith("_conn_id") or kw.arg == "kafka_config_id"):
                    value = string_of(kw.value, names)
                    if value:
                        found.setdefault(value, path)
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get_connection" and node.args:
                value = string_of(node.args[0], names)
                if value:
                    found.setdefault(value, path)
    return found


@cache
def variables_read() -> dict[str, bool]:
    """Airflow Variable keys read with ``Variable.get`` → whether the call passes a default."""
    found = {}
    for tree in trees().values():
        names = constants(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "Variable" and node.args):
                key = string_of(node.args[0], names)
                assert key, f"Variable.get with a key this test cannot read: {ast.unparse(node)}"
                found[key] = any(kw.arg == "default" for kw in node.keywords) or len(node.args) > 1
    return found


def conn_var(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def settings_connections() -> set[str]:
    """Connection ids the settings name by default (``ALDEBARAN_*_CONNECTION``): read where defined, with
    the settings as the fallback, so compose may define them or not."""
    return {field.default for cls in docsgen.settings_classes() for name, field in cls.model_fields.items()
            if name == "connection" and field.default}


# --- connections ---------------------------------------------------------------------------------
def test_the_scans_find_what_the_dags_read():
    # Guards the scans: if they silently found nothing, the tests below would pass vacuously.
    assert {"spark_default", "kafka_alerts_watcher"} <= set(connections_read())
    assert CHANNELS_VARIABLE in variables_read()


def test_every_connection_the_code_names_is_defined():
    kinds = {"spark_default": "spark", "kafka_alerts_watcher": "kafka"}
    for conn_id, path in connections_read().items():
        var = conn_var(conn_id)
        assert var in airflow_env(), f"{conn_id} (named in {path.relative_to(ROOT)}) is not defined in docker-compose.yml"
        conn = json.loads(airflow_env()[var])
        assert conn["conn_type"] == kinds.get(conn_id, conn["conn_type"]), conn_id


def test_compose_defines_no_connection_nothing_reads():
    read = {conn_var(c) for c in [*connections_read(), *settings_connections()]}
    channels = {f"AIRFLOW_CONN_ALDEBARAN_{name.upper()}" for name in channel_names(environ=airflow_env())}
    dead = sorted(k for k in airflow_env() if k.startswith("AIRFLOW_CONN_") and k not in read | channels)
    assert not dead, f"docker-compose.yml defines connections nothing reads: {dead}"


def test_connections_point_at_the_containers():
    env = airflow_env()
    watcher = json.loads(env[conn_var("kafka_alerts_watcher")])
    assert watcher["extra"]["bootstrap.servers"] == env["ALDEBARAN_KAFKA_BOOTSTRAP_SERVERS"]
    assert json.loads(env[conn_var("spark_default")])["host"] == env["ALDEBARAN_SPARK_MASTER"]


def test_the_object_store_connection_points_at_the_minio_container():
    from aldebaran.storage.connections import Connection
    from aldebaran.storage.s3access import from_connection

    env = airflow_env()
    var = conn_var("aldebaran_s3")
    access = from_connection(Connection.parse(var, env[var]))
    assert access.endpoint_url == env["ALDEBARAN_S3_ENDPOINT_URL"] and access.credentials == "keys"
    assert access.region == env["ALDEBARAN_S3_REGION"]


def test_the_configured_channels_build_from_compose_environment():
    env = airflow_env()
    names = channel_names(environ=env)
    for name in names:
        channel = channel_from_connection(name, env_connection(name, env))
        assert channel.name == name


# --- variables -----------------------------------------------------------------------------------
def test_every_variable_has_a_fallback_that_compose_sets():
    fallbacks = {CHANNELS_VARIABLE: CHANNELS_SETTING}
    for key, has_default in variables_read().items():
        assert has_default, f"Variable.get({key!r}) has no default: a fresh deployment would fail on it"
        assert key in fallbacks, f"Variable {key!r}: name its fallback setting in this test"
        assert fallbacks[key] in airflow_env(), f"{fallbacks[key]} (fallback of Variable {key}) is not set in compose"


def test_compose_does_not_shadow_variables_the_ui_changes():
    # Airflow looks a variable up in the environment before its database.
    shadowed = sorted(f"AIRFLOW_VAR_{key.upper()}" for key in variables_read()
                      if f"AIRFLOW_VAR_{key.upper()}" in airflow_env())
    assert not shadowed, f"set in docker-compose.yml, these hide the Airflow Variables of the same name: {shadowed}"


# --- settings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", docsgen.settings_classes(), ids=lambda c: c.__name__)
def test_settings_validate_with_compose_values(cls, monkeypatch):
    for name in list(os.environ):
        if name.startswith(("ALDEBARAN_", "AIRFLOW_")):
            monkeypatch.delenv(name)
    for name, value in airflow_env().items():
        monkeypatch.setenv(name, value)
    cls()  # raises a ValidationError naming the field if compose's value is invalid or a required one is missing


def test_settings_that_default_to_this_host_point_at_containers():
    for cls in docsgen.settings_classes():
        for name, field in cls.model_fields.items():
            if isinstance(field.default, str) and LOOPBACK.search(field.default):
                var = docsgen.env_var(cls, name, field)
                assert var in airflow_env(), f"{var} defaults to {field.default} and compose does not set it"
                assert not LOOPBACK.search(airflow_env()[var]), f"{var} in compose still points at the container itself"


def test_compose_sets_only_variables_the_package_reads():
    unread = sorted(k for k in airflow_env() if k.startswith("ALDEBARAN_") and not read_by_package(k))
    assert not unread, f"docker-compose.yml sets ALDEBARAN_* nothing reads: {unread}"


# --- Spark ---------------------------------------------------------------------------------------
def test_spark_is_local_unless_asked():
    assert airflow_env()["ALDEBARAN_SPARK_MASTER"].startswith("local")
    for name in ("spark-master", "spark-worker"):
        assert services()[name].get("profiles") == [CLUSTER_PROFILE], name
    for name, service in services().items():
        if not service.get("profiles"):
            waits_for = set(service.get("depends_on") or {})
            opt_in = sorted(t for t in waits_for if services()[t].get("profiles"))
            assert not opt_in, f"{name} (always started) waits for opt-in services {opt_in}"


# --- versions ------------------------------------------------------------------------------------
def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match:
            out[match.group(1).lower()] = match.group(2)
    return out


def test_minio_is_the_local_version():
    local = re.search(r"^MINIO_VERSION=(\S+)$", (ROOT / "setup" / "versions.env").read_text(), re.MULTILINE).group(1)
    minio = services()["minio"]
    assert minio["build"]["args"]["MINIO_VERSION"] == local
    assert local in minio["image"]
    assert "MINIO_VERSION" in (ROOT / "setup" / minio["build"]["dockerfile"]).read_text()


def test_the_image_has_the_local_python_and_airflow():
    image = final_from((ROOT / "Dockerfile").read_text())
    tag = re.search(r":(\d+)\.(\d+)-\d+-python-(\d+)\.(\d+)", image)
    assert tag, image
    # The venv running this test is the one constraints.txt was resolved and tested with.
    assert (int(tag.group(3)), int(tag.group(4))) == sys.version_info[:2], f"{image}: not Python {sys.version_info[:2]}"
    constraints = pins(ROOT / "constraints.txt")
    assert pins(ROOT / "requirements.txt")["apache-airflow"] == constraints["apache-airflow"]
    major, minor = constraints["apache-airflow-core"].split(".")[:2]
    assert (tag.group(1), tag.group(2)) == (major, minor), f"{image}: not an Airflow {major}.{minor} Runtime"


def test_the_dockerfile_installs_with_constraints_and_checks_the_airflow_patch():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY [^\n]*\bconstraints\.txt\b", text, re.MULTILINE)
    assert re.search(r"pip install [^;]*-c constraints\.txt", text)
    # The Runtime tag names only Airflow's minor version; the build compares the patch.
    assert "apache-airflow-core==" in text and "airflow.__version__" in text


def test_spark_images_are_the_pinned_spark():
    pyspark = pins(ROOT / "requirements.txt")["pyspark"]
    for name in ("spark-master", "spark-worker"):
        assert services()[name]["image"].split(":", 1)[1].startswith(pyspark + "-"), name
