"""The entry points of `aldebaran`'s extension packages, for those present in the tree being installed.

Everything else is in pyproject.toml (``dynamic = ["entry-points", "scripts"]``: setuptools reads every
entry point from here then, the console script `aldebaran` too). A package under include/ adds its
commands to `aldebaran` through the ``aldebaran.commands`` group (its ``cli`` module: ``USAGE`` and
``register(subparsers)``) and bench modes through ``aldebaran.bench`` (a function of the bench subparsers).
Declared here rather than in pyproject.toml so that a build which leaves a package out (the Docker
image: .dockerignore drops include/aldebaran_lab) has no entry point naming it.
"""

from pathlib import Path

from setuptools import setup

INCLUDE = Path(__file__).resolve().parent / "include"

# package → {group: entry point}; listed under each group by entry-point name (capacity before lab).
EXTENSIONS = {
    "aldebaran_capacity": {"aldebaran.commands": "capacity = aldebaran_capacity.cli"},
    "aldebaran_lab": {"aldebaran.commands": "lab = aldebaran_lab.cli",
                      "aldebaran.bench": "lab = aldebaran_lab.cli:add_bench_modes"},
}


def entry_points() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {"console_scripts": ["aldebaran = aldebaran.cli.main:main"]}
    for package, points in EXTENSIONS.items():
        if (INCLUDE / package / "cli.py").is_file():
            for group, point in points.items():
                groups.setdefault(group, []).append(point)
    return groups


setup(entry_points=entry_points())
