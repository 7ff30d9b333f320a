"""The checkpoint's layout (aldebaran.runtime.checkpoint.Checkpoint): one root, every path and key built from it."""

from __future__ import annotations

import pytest

from aldebaran.runtime import lease
from aldebaran.runtime.checkpoint import Checkpoint


def test_the_layout_hangs_off_the_root_whatever_its_trailing_slash():
    cp = Checkpoint("s3a://aldebaran/checkpoints/auditor/")
    assert cp == Checkpoint("s3a://aldebaran/checkpoints/auditor")
    assert cp.books == "s3a://aldebaran/checkpoints/auditor/books"
    assert cp.spark == "s3a://aldebaran/checkpoints/auditor/spark"
    assert cp.spark_commits == "s3a://aldebaran/checkpoints/auditor/spark/commits"
    assert cp.spark_log("offsets") == "s3a://aldebaran/checkpoints/auditor/spark/offsets"
    assert cp.shard(3) == "s3a://aldebaran/checkpoints/auditor/books/shard-0003"
    assert cp.is_s3 and not Checkpoint("/tmp/ckpt").is_s3


def test_the_books_lead_back_to_their_checkpoint():
    assert Checkpoint.of_books("/tmp/run/ckpt/books") == Checkpoint("/tmp/run/ckpt")
    with pytest.raises(ValueError, match="not a checkpoint's books"):
        Checkpoint.of_books("/tmp/run/ckpt/spark")


def test_one_lease_per_checkpoint_named_by_its_root():
    a, b = Checkpoint("/tmp/a"), Checkpoint("/tmp/b")
    assert a.lease_key.startswith("leases/auditor/") and a.lease_key.endswith(".json")
    assert a.lease_key == Checkpoint("/tmp/a/").lease_key != b.lease_key
    assert lease.lease_key("/tmp/a/") == a.lease_key  # the lease module asks the checkpoint


def test_a_checkpoint_needs_a_root_and_spark_has_two_logs():
    with pytest.raises(ValueError, match="ALDEBARAN_AUDIT_CHECKPOINT"):
        Checkpoint("/")
    with pytest.raises(ValueError, match="offsets, commits"):
        Checkpoint("/tmp/a").spark_log("state")


def test_the_replays_live_beside_the_checkpoint():
    assert Checkpoint("s3a://aldebaran/checkpoints/auditor/").beside("replays") == "s3a://aldebaran/checkpoints/replays"
    assert Checkpoint("/tmp/run/auditor").beside("replays") == "/tmp/run/replays"
    with pytest.raises(ValueError, match="no parent folder"):
        Checkpoint("s3a://bucket").beside("replays")
