"""How `make test` spends its two cores (scripts/test.sh, tests/conftest.py).

- **Order.** The files none of whose tests need the services come first (the service-free integration files,
  then tests/unit and tests/dags): they run while the services start. Then the
  integration files that need the services, longest first, so that the last minutes are spent on short
  files and no worker is left alone with a long one. A file's length is its time in the last run
  (``.run/pytest-junit.xml``), else in ``tests/durations.json`` (a snapshot: ``python -m tests.schedule``
  writes it from the last run).
- **Services.** scripts/test.sh starts the services in the background and names a status file in
  ``TEST_SERVICES_STATUS``; a test whose file needs the services waits until it says ``up`` (or fails,
  naming the logs, when it says anything else). Run outside test.sh, there is nothing to wait for. (Running
  the ``serial`` tests in that background too, beside the tests without services, was measured and is
  slower: docs/operations.md, "Notes on the toolchain".)
"""

from __future__ import annotations

import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "durations.json"
LAST_RUN = ROOT / ".run" / "pytest-junit.xml"
START_TIMEOUT = 600.0


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


SERVICE_FILES: set[str] = set()  # files with a test that needs the services: order() fills it, the wait reads it


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


def needs_services(path: str) -> bool:
    return _file_path(path) in SERVICE_FILES


def _file(item) -> str:
    return _file_path(str(item.fspath))


def _file_path(path: str) -> str:
    """`path` relative to the work tree, as durations() keys it."""
    return str(Path(path).resolve().relative_to(ROOT)) if path.startswith(str(ROOT)) else path


_started = False


def wait_for_services() -> None:
    """Block until scripts/test.sh's background start of the services has ended; raise RuntimeError naming
    the logs if it failed or did not end in time."""
    global _started
    status_file = os.environ.get("TEST_SERVICES_STATUS")
    if _started or not status_file:
        return
    deadline = time.monotonic() + START_TIMEOUT
    status = Path(status_file)
    while time.monotonic() < deadline:
        text = status.read_text().strip() if status.is_file() else ""
        if text == "up":
            _started = True
            return
        if text:
            raise RuntimeError(f"the services did not start ({text}): see {ROOT / '.run' / 'logs'}")
        time.sleep(0.5)
    raise RuntimeError(f"the services were still starting after {START_TIMEOUT:.0f} s: "
                       f"see {ROOT / '.run' / 'logs'}")


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
