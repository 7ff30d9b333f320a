"""The books' state store: frozen rows and line files (rows), the deadline index (deadlines), one
shard's books in memory (shard), where the files live (files), background snapshots (snapshots), one
batch's walk over a shard's books (batchstep), and the versioned shard store that owns a batch's commit
order (store)."""

from aldebaran.audit.state.batchstep import Outcome
from aldebaran.audit.state.store import Config, Shard, ShardStore

__all__ = ["Config", "Outcome", "Shard", "ShardStore"]
