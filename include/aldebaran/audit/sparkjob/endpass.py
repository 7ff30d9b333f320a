"""Expire at end: a bounded run (``--trigger available-now``) that reports the books still open when its
input ends, as if their time had run out (``ALDEBARAN_AUDIT_EXPIRE_AT_END``).

A streaming auditor expires a book Δt after its first event; a bounded run stops before that for the
books its last minutes opened, so their ORPHAN alerts would never come. With expire-at-end, once the
query has drained its input the auditor runs one more version of every shard, with no events, in
which every open book expires and its rules speak (``ShardStore.apply(expire_all=True)``). The alerts
go out like a batch's: to the alerts topic and the archive, before the run reports success.

The books are then gone, so the checkpoint is *finished*: a marker next to the books says so, and an
auditor started on it later refuses (:func:`refuse_if_finished`) instead of carrying on from empty
books. A bounded run meant to be resumed leaves expire-at-end off. Replays leave it off by default:
a replay then equals what the live auditor emitted for the same input (the live auditor had not
expired those books either when it read the range's last event); see trades_replay's ``expire_at_end``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time

from aldebaran.audit.state.files import files_for, versions
from aldebaran.runtime.checkpoint import FINISHED, Checkpoint
from aldebaran.exceptions import AuditorError

log = logging.getLogger(__name__)


def refuse_if_finished(checkpoint: Checkpoint) -> None:
    """At start: a checkpoint whose books an expire-at-end run expired cannot be resumed."""
    try:
        marker = json.loads(files_for(checkpoint.books).get(FINISHED))
    except FileNotFoundError:
        return
    raise AuditorError(
        f"checkpoint {checkpoint.root} was finished by a bounded run with expire-at-end "
        f"(query {marker.get('query')}, after batch {marker.get('last_batch')}, at {marker.get('at_iso')}): "
        "every book was expired, so resuming it would audit from empty books. Use a fresh checkpoint "
        "(ALDEBARAN_AUDIT_CHECKPOINT)")


def expire_at_end(spark, writer, query_name: str) -> dict | None:
    """After the last batch: one more version of every shard in which every open book expires. Returns the
    pass's figures (as a batch's), or None when this run wrote no batch (nothing to follow)."""
    last = writer.last.get("batch_id")
    if last is None:  # no new input in this run: follow the checkpoint's last version
        deltas, snapshots = versions(files_for(Checkpoint.of_books(writer.ctx.state_root).shard(0)))
        last = max([*deltas, *snapshots], default=None)
        if last is None:
            log.info("expire-at-end: the checkpoint holds no books yet; nothing to expire")
            return None
    t0 = time.perf_counter()
    batch_id = last + 1
    plan = writer.plan
    ctx = dataclasses.replace(writer.ctx, expire_all=True)
    shards = list(range(plan.shards))
    if plan.copartitioned:
        from aldebaran.audit.sparkjob.shardtasks import idle_shards_function

        body = idle_shards_function(ctx, batch_id, plan.shards)
    else:
        from aldebaran.audit.sparkjob.shuffle import expire_all_function

        body = expire_all_function(ctx, batch_id)
    rows = spark.sparkContext.parallelize(shards, len(shards)).mapPartitions(body).collect()
    writer.emit(batch_id, rows, t0, {"expire_all": round((time.perf_counter() - t0) * 1000, 1)})
    files_for(ctx.state_root).put(FINISHED, json.dumps({
        "query": query_name, "last_batch": batch_id, "expired": writer.last.get("expired"),
        "alerts": writer.last.get("alerts"), "at": time.time(),
        "at_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode())
    log.info("expire-at-end: %s open books expired, %s alerts (%s)", writer.last.get("expired"),
             writer.last.get("alerts"), json.dumps(writer.last.get("alert_kinds")))
    return writer.last
