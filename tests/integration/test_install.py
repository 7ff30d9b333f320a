"""`pip install . -c constraints.txt` into a fresh virtualenv gives a working `aldebaran` (issue 27).

Offline and fast: the packages come from the wheelhouse `make setup` fills (.venv/wheelhouse →
~/.cache/aldebaran/wheels/<pins>, scripts/setup.sh) with `--no-index`, so the test measures pip, not the
network; the build backend (setuptools) is in the wheelhouse too. The fresh venv has no pip of its own:
the suite's pip installs into it (`pip --python`). ~60 s on the 2-core box, most of it unpacking pyspark.

Installed from a copy of the tree (what a clone holds: pyproject.toml, setup.py, README.md, include/), so
pip's in-tree build leaves nothing in the shared work tree. A second copy without include/aldebaran_lab (the
Docker image's context, .dockerignore) builds a wheel whose metadata names no lab entry point.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from aldebaran.runtime import paths

log = logging.getLogger(__name__)

ROOT = paths.ROOT
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"
IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")


def copy_tree(dest: Path, *, lab: bool = True) -> Path:
    dest.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "include", dest / "include", ignore=IGNORE)
    if not lab:
        shutil.rmtree(dest / "include" / "aldebaran_lab")
    return dest


def pip(*args: str, python: Path | None = None) -> subprocess.CompletedProcess:
    target = ["--python", str(python)] if python else []
    cmd = [sys.executable, "-m", "pip", *target, *args, "--no-index", "--find-links", str(WHEELHOUSE),
           "--disable-pip-version-check", "--progress-bar", "off"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def aldebaran(venv: Path, *args: str) -> str:
    proc = subprocess.run([str(venv / "bin" / "aldebaran"), *args], capture_output=True, text=True, timeout=120,
                          cwd=venv, env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(venv)})
    assert proc.returncode == 0, f"aldebaran {' '.join(args)}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    assert (WHEELHOUSE / ".complete").is_file(), (
        f"no wheelhouse at {WHEELHOUSE}: `make setup` fills it (scripts/setup.sh, wheels/ of the cache)")
    base = tmp_path_factory.mktemp("install")
    venv = base / "venv"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip("install", str(copy_tree(base / "tree")), "-c", str(ROOT / "constraints.txt"), python=venv / "bin" / "python")
    log.info("fresh venv + pip install . -c constraints.txt: %.1f s", time.monotonic() - t0)
    return venv


def test_the_installed_cli_lists_every_command(installed):
    out = aldebaran(installed, "--help")
    for command in ("auditor", "dispatch", "deliveries", "explain", "lanes", "loadgen", "bench", "services", "chaos"):
        assert f"\n    {command} " in out, out


def test_bench_modes_come_from_both_packages(installed):
    out = aldebaran(installed, "bench", "--help")
    for mode in ("dispatch", "all", "e2e", "low-latency", "deployed", "steady"):
        assert f"\n    {mode} " in out, out
    deployed = aldebaran(installed, "bench", "deployed", "--help")
    assert "--drain-seconds" in deployed and "--quick" not in deployed, deployed


def test_a_deployment_without_the_lab_has_no_lab_entry_point(installed, tmp_path):
    tree = copy_tree(tmp_path / "tree", lab=False)
    pip("wheel", "--no-deps", "--wheel-dir", str(tmp_path / "dist"), str(tree))
    (wheel,) = (tmp_path / "dist").glob("aldebaran-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert not [n for n in names if n.startswith("aldebaran_lab/")]
    assert "aldebaran_capacity.cli" in points and "aldebaran_lab" not in points, points
    # Installed over the full one, the CLI has the capacity package's commands and none of the lab's.
    pip("install", "--no-deps", "--force-reinstall", str(wheel), python=installed / "bin" / "python")
    out = aldebaran(installed, "--help")
    assert "\n    bench " in out and "\n    chaos " not in out and "\n    services " not in out, out
    assert "\n    deployed " not in aldebaran(installed, "bench", "--help")
