"""Generated sections of docs/benchmarks.md: each benchmark owns the text between its two markers."""

from __future__ import annotations


def splice(existing: str, section: str, begin: str, end: str) -> str:
    """Replace the text from `begin` to `end` (markers included in `section`); append it if absent.
    Everything outside the markers — other sections, hand-written readings — is kept."""
    if begin in existing and end in existing:
        head, rest = existing.split(begin, 1)
        return head + section + rest.split(end, 1)[1]
    return existing.rstrip("\n") + "\n\n" + section + "\n"
