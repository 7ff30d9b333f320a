"""Generated sections of docs/benchmarks.md: each benchmark owns the text between its two markers."""

from __future__ import annotations


def splice(existing: str, section: str, begin: str, end: str) -> str:
    """Replace the text from `begin` to `end` (markers included in `section`); append it if absent.
    Everything outside the markers — other sections, hand-written readings — is kept."""
    if begin in existing and end in existing:
        head, rest = existing.split(begin, 1)
        return head + section + rest.split(end, 1)[1]
    return existing.rstrip("\n") + "\n\n" + section + "\n"


def write_report(docs, key: str, result: dict, section: str, begin: str, end: str) -> None:
    """A bench mode's report: its section of docs/benchmarks.md (between its markers) and its key of
    docs/img/bench-results.json (``result[key]`` with the run's command and machine; other keys kept)."""
    import json
    from pathlib import Path

    docs = Path(docs)
    doc = docs / "benchmarks.md"
    doc.write_text(splice(doc.read_text(), section, begin, end))
    raw = docs / "img" / "bench-results.json"
    data = json.loads(raw.read_text()) if raw.exists() else {}
    data[key] = {**result[key], "command": result["command"], "machine": result["machine"]}
    raw.write_text(json.dumps(data, indent=1, default=str))
