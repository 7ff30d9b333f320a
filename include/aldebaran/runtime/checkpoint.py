"""The auditor's checkpoint: one root (a local path or ``s3a://bucket/prefix``) and everything built from it.

    <root>/spark/                Spark's own state: offsets/, commits/, sources/, metadata
    <root>/books/                the books (aldebaran.audit.state): shard-NNNN/, plan.json, FINISHED.json
    leases/auditor/<digest>.json the lease in the object store (aldebaran.runtime.lease), named by the root

Every path and key of that layout is built here and nowhere else (tests/unit/test_house.py checks it), so
a change of layout is a change of this module. Pure strings: it imports nothing and touches no storage.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

LEASE_PREFIX = "leases/auditor"
FINISHED = "FINISHED.json"  # in the books: an expire-at-end run expired every book (sparkjob/endpass.py)
PLAN = "plan.json"  # in the books: the plan and partitioner they were written with (sparkjob/plans.py)


@dataclass(frozen=True)
class Checkpoint:
    root: str

    def __post_init__(self) -> None:
        if not self.root.strip("/"):
            raise ValueError("a checkpoint needs a root (ALDEBARAN_AUDIT_CHECKPOINT)")
        object.__setattr__(self, "root", self.root.rstrip("/"))

    @classmethod
    def of_books(cls, books: str) -> "Checkpoint":
        """The checkpoint whose books live at `books` (as the shard tasks know it)."""
        root, sep, _ = books.rstrip("/").rpartition("/books")
        if not sep:
            raise ValueError(f"{books} is not a checkpoint's books directory")
        return cls(root)

    @property
    def books(self) -> str:
        """The books' root (aldebaran.audit.state's ``state_root``)."""
        return f"{self.root}/books"

    @property
    def spark(self) -> str:
        """Spark's ``checkpointLocation``."""
        return f"{self.root}/spark"

    def spark_log(self, name: str) -> str:
        """One of Spark's logs in its checkpoint: ``offsets`` (written before a batch) or ``commits`` (after)."""
        if name not in ("offsets", "commits"):
            raise ValueError(f"no Spark log {name!r} in a checkpoint (offsets, commits)")
        return f"{self.spark}/{name}"

    @property
    def spark_commits(self) -> str:
        return self.spark_log("commits")

    def shard(self, shard: int) -> str:
        """One shard's books."""
        return f"{self.books}/shard-{shard:04d}"

    @property
    def lease_key(self) -> str:
        """The lease's object-store key: one per checkpoint, named by a digest of its root."""
        digest = hashlib.sha256(self.root.encode()).hexdigest()[:32]
        return f"{LEASE_PREFIX}/{digest}.json"

    def beside(self, name: str) -> str:
        """A folder next to this checkpoint (the replays' checkpoints live beside the live auditor's)."""
        parent, sep, _ = self.root.rpartition("/")
        if not sep or parent.endswith(":/"):
            raise ValueError(f"checkpoint {self.root} has no parent folder to put {name} in")
        return f"{parent}/{name}"

    @property
    def is_s3(self) -> bool:
        return self.root.startswith(("s3://", "s3a://"))
