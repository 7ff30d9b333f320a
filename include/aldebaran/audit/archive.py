"""The alert archive: one JSON-lines object per micro-batch that produced alerts, keyed by query and
batch id, so a re-executed batch overwrites its own object instead of adding a second one."""

from __future__ import annotations

from aldebaran.storage.store import safe_segment, Store


class Archive:
    def __init__(self, store: Store, prefix: str, query_name: str) -> None:
        self.store = store
        self.prefix = f"{prefix.strip('/')}/{safe_segment(query_name, 'query name')}"

    def key(self, batch_id: int) -> str:
        return f"{self.prefix}/batch-{batch_id:012d}.jsonl"

    def write(self, batch_id: int, alert_lines: list[str]) -> str:
        key = self.key(batch_id)
        self.store.put(key, ("\n".join(alert_lines) + "\n").encode(), content_type="application/x-ndjson")
        return key

    def read_all(self) -> list[str]:
        lines: list[str] = []
        for obj in self.store.list(self.prefix + "/"):
            lines += [l for l in self.store.get(obj["Key"]).body.decode().splitlines() if l]
        return lines
