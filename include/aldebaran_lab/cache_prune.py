"""Prune ~/.cache/aldebaran: the entries `make setup` made that no live checkout's pins use any more.

`scripts/setup.sh` runs it at its end and `make clean-cache` on demand (``python -m aldebaran_lab.cache_prune
[--dry-run]``). Every entry is keyed as setup.sh keys it (its header lists them). A **live checkout** is this
work tree and every tree a venv under ``venv/`` was made for (its ``.tree``, else the editable install's
``direct_url.json``) that still exists; what any live checkout's pins name is kept:

- ``venv/<key>``: kept while its tree exists and that tree's ``.venv`` links to it (or it is still being
  built); gone with its tree (CI clones into temporary directories) or replaced there by a newer venv.
  A venv whose tree cannot be told is kept.
- ``wheels/<key>``, ``runtimes/<name>-<key>``, ``jars/<pom>-<key>``, ``jars/aldebaran-jvm-<key>``,
  ``minio/<version>``, ``alertmanager/<version>``: kept if a live checkout's pins give that key.
- ``bench-shared/<runtime>`` (bench shared-jvm's Python): kept while ``runtimes/<runtime>`` is.
- ``cds/<key>.jsa`` (the test suite's class-data archives, aldebaran_lab.spark_cds): kept while a kept venv's
  pyspark and this JDK give that key.
- ``*.tmp.<pid>``: a step's staging directory, pruned once the setup process <pid> is gone.

Whatever a running process uses is kept whatever its keys say (a platform started before the pins changed
runs on the venv and jars it started with): its executable, open files, mapped libraries or arguments under
an entry (/proc).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import sys
from pathlib import Path

from aldebaran_lab.services.base import pid_alive

ROOT = Path(__file__).resolve().parents[2]
TMP = re.compile(r"\.tmp\.(\d+)$")


def _key(*parts: bytes) -> str:
    return hashlib.sha256(b"".join(parts)).hexdigest()[:12]


def _python_v() -> bytes:
    # setup.sh hashes `python3 -V`'s line; this runs on the venv's interpreter, the same version.
    return f"Python {platform.python_version()}\n".encode()


def _versions(tree: Path) -> dict[str, str]:
    out = {}
    for line in (tree / "setup" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def venv_key(tree: Path) -> str:
    pins = (tree / "requirements.txt").read_bytes() + (tree / "constraints.txt").read_bytes()
    return _key(pins, f"Python {platform.python_version()} {tree.resolve()}\n".encode())


def wanted(tree: Path) -> set[str]:
    """The cache entries (paths relative to the cache) `tree`'s pins name."""
    out = {f"wheels/{_key((tree / 'requirements.txt').read_bytes(), (tree / 'constraints.txt').read_bytes(), _python_v())}"}
    for pom in (tree / "setup" / "maven").glob("*.xml"):
        if pom.stem != "settings":
            out.add(f"jars/{pom.stem}-{_key(pom.read_bytes())}")
    for req in (tree / "setup" / "runtimes").glob("*.txt"):
        out.add(f"runtimes/{req.stem}-{_key(req.read_bytes(), _python_v())}")
    java = sorted((tree / "include" / "aldebaran" / "jvm").glob("*.java"))
    if java:
        from aldebaran.jvm import _digest  # the platform jar's own key

        out.add(f"jars/aldebaran-jvm-{_digest(java)}")
    versions = _versions(tree)
    for tool in ("minio", "alertmanager"):
        if f"{tool.upper()}_VERSION" in versions:
            out.add(f"{tool}/{versions[f'{tool.upper()}_VERSION']}")
    return out


def venv_tree(venv: Path) -> Path | None:
    """The work tree `venv` was made for: its ``.tree`` (setup.sh writes it), else the editable install."""
    marker = venv / ".tree"
    if marker.is_file():
        return Path(marker.read_text().strip())
    for found in venv.glob("lib/python*/site-packages/aldebaran-*.dist-info/direct_url.json"):
        url = json.loads(found.read_text()).get("url", "")
        if url.startswith("file://"):
            return Path(url[len("file://"):])
    return None


def open_paths(proc: Path = Path("/proc")) -> set[str]:
    """Every path a running process holds: executable, cwd, open files, mapped files, path arguments."""
    found: set[str] = set()
    for pid in proc.glob("[0-9]*"):
        try:
            for link in (pid / "exe", pid / "cwd", *(pid / "fd").iterdir()):
                try:
                    found.add(os.readlink(link))
                except OSError:
                    pass
            for line in (pid / "maps").read_text().splitlines():
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    found.add(parts[5])
            for arg in (pid / "cmdline").read_bytes().split(b"\0"):
                for word in arg.decode(errors="replace").replace(":", " ").replace(",", " ").split():
                    if word.startswith("/"):  # a classpath or a venv's python: the resolved path counts
                        found.add(word)
                        found.add(os.path.realpath(word))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _dirs, files in os.walk(path):  # symlinks not followed: a venv's wheelhouse link is not its size
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def plan(cache: Path, root: Path = ROOT) -> tuple[list[tuple[Path, str]], list[Path]]:
    """(entries to prune with the reason, live trees)."""
    prune: list[tuple[Path, str]] = []
    live = {root.resolve()}
    venvs = sorted(p for p in (cache / "venv").glob("*") if p.is_dir() and not TMP.search(p.name))
    for venv in venvs:
        tree = venv_tree(venv)
        if tree is None:
            continue  # cannot tell whose: kept
        if not (tree / "requirements.txt").is_file():
            prune.append((venv, f"its tree {tree} no longer exists"))
            continue
        link = tree / ".venv"
        in_use = link.exists() and link.resolve() == venv.resolve()
        if in_use or not (venv / ".complete").exists():
            live.add(tree.resolve())
        elif venv.name != venv_key(tree):
            prune.append((venv, f"{tree} now uses another venv"))
        else:
            live.add(tree.resolve())
    keep: set[str] = set()
    for tree in live:
        keep |= wanted(tree)
    kept_venvs = [v for v in venvs if v not in {p for p, _ in prune}]
    for venv in kept_venvs:  # the wheelhouse a kept venv links to (the install test installs from it)
        link = venv / "wheelhouse"
        if link.is_symlink() and link.resolve().parent == (cache / "wheels").resolve():
            keep.add(f"wheels/{link.resolve().name}")
    for kind in ("wheels", "runtimes", "jars", "minio", "alertmanager", "venv"):
        for entry in sorted((cache / kind).glob("*")) if (cache / kind).is_dir() else []:
            tmp = TMP.search(entry.name)
            if tmp:
                if not pid_alive(int(tmp.group(1))):
                    prune.append((entry, f"left by setup process {tmp.group(1)}, gone"))
            elif kind != "venv" and f"{kind}/{entry.name}" not in keep:
                prune.append((entry, "no live checkout's pins use it"))
    # bench shared-jvm's Python (the runtime plus the auditor's wheels) goes with the runtime it was built on.
    for entry in sorted((cache / "bench-shared").glob("*")) if (cache / "bench-shared").is_dir() else []:
        if f"runtimes/{entry.name}" not in keep:
            prune.append((entry, f"built on runtime {entry.name}, which no live checkout pins"))
    # The test suite's class-data archives (aldebaran_lab.spark_cds) go with the venv whose pyspark they map.
    if (cache / "cds").is_dir():
        from aldebaran_lab.spark_cds import archive_key

        homes = [h for v in kept_venvs for h in v.glob("lib/python*/site-packages/pyspark") if (h / "jars").is_dir()]
        current = {archive_key(h) for h in homes}
        for entry in sorted((cache / "cds").glob("*")):
            tmp = TMP.search(entry.name)
            if tmp and not pid_alive(int(tmp.group(1))):
                prune.append((entry, f"left by process {tmp.group(1)}, gone"))
            elif not tmp and entry.name.removesuffix(".jsa") not in current:
                prune.append((entry, "no kept venv's pyspark and JDK make this archive"))
    held = open_paths()
    prune = [(p, why) for p, why in prune if not any(h == str(p) or h.startswith(f"{p}/") for h in held)]
    return prune, sorted(live)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aldebaran_lab.cache_prune", description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="default: ALDEBARAN_CACHE, else ~/.cache/aldebaran")
    parser.add_argument("--dry-run", action="store_true", help="say what would be pruned, delete nothing")
    args = parser.parse_args(argv)
    if args.cache is None:
        from aldebaran.runtime import paths

        args.cache = paths.cache_dir()
    entries, live = plan(args.cache)
    total = 0
    for entry, why in entries:
        size = size_of(entry)
        total += size
        print(f"    {'would prune' if args.dry_run else 'pruned'} {entry} ({size / 2**20:.0f} MB): {why}")
        if not args.dry_run:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    verb = "would free" if args.dry_run else "freed"
    print(f"    cache {args.cache}: {len(entries)} entries {verb} {total / 2**20:.0f} MB; "
          f"kept what {len(live)} live checkout(s) use: {', '.join(map(str, live))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
