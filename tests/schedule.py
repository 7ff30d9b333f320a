"""How `make test` spends its two cores (scripts/test.sh, tests/conftest.py).

- **Order.** The files none of whose tests need the services come first (the service-free integration files,
  then tests/unit and tests/dags), then the integration files that need them, longest first, so that the
  last minutes are spent on short files and no worker is left alone with a long one. A file's length is its
  time in the last run (``.run/pytest-junit.xml``), else in ``tests/durations.json`` (a snapshot:
  ``python -m tests.schedule`` writes it from the last run).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "durations.json"
LAST_RUN = ROOT / ".run" / "pytest-junit.xml"


def junit_durations(path: Path) -> dict[str, float]:
    """Seconds per test file in a pytest junit XML (its classnames are dotted paths)."""
    out: dict[str, float] = {}
    for case in ET.parse(path).iter("testcase"):
        parts = [p for p in case.get("classname", "").split(".") if not p[:1].isupper()]
        key = "/".join(parts) + ".py"
        out[key] = out.get(key, 0.0) + float(case.get("time") or 0)
    return out


def durations() -> dict[str, float]:
    out: dict[str, float] = {}
    if SNAPSHOT.is_file():
        out.update(json.loads(SNAPSHOT.read_text()))
    if LAST_RUN.is_file():
        try:
            out.update(junit_durations(LAST_RUN))
        except (ET.ParseError, OSError, ValueError):
            pass  # a run cut short: the snapshot's order
    return out


SERVICE_FILES: set[str] = set()  # files with a test that needs the services (order() fills it)


def order(items: list) -> None:
    """Sort `items` in place: first the files none of whose tests need the services (integration ones longest
    first, then tests/unit and tests/dags), then the integration files that need them, longest first; a file's
    tests stay together and in their own order."""
    known = durations()
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        path = _file(item)
        first_seen.setdefault(path, i)
        if "services_up" in getattr(item, "fixturenames", ()):
            SERVICE_FILES.add(path)

    def key(pair):
        i, item = pair
        path = _file(item)
        integration = "/integration/" in f"/{path}"
        group = 2 if path in SERVICE_FILES else (0 if integration else 1)
        return (group, -known.get(path, 0.0) if integration else 0.0, first_seen[path], i)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def _file(item) -> str:
    return _file_path(str(item.fspath))


def _file_path(path: str) -> str:
    """`path` relative to the work tree, as durations() keys it."""
    return str(Path(path).resolve().relative_to(ROOT)) if path.startswith(str(ROOT)) else path


def main() -> int:
    if not LAST_RUN.is_file():
        print(f"no {LAST_RUN}: run `make test` first", file=sys.stderr)
        return 1
    found = {k: round(v, 1) for k, v in sorted(junit_durations(LAST_RUN).items()) if "/integration/" in f"/{k}"}
    SNAPSHOT.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{SNAPSHOT}: {len(found)} integration files, {sum(found.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
