"""The shard hosts' socket directory: ours alone, or refused (the hosts unpickle what arrives there)."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from aldebaran.audit.sparkjob import shardwire
from aldebaran.audit.sparkjob.shardwire import UnsafeShardDirectory
from aldebaran.exceptions import AuditorError


@pytest.fixture
def tmp(monkeypatch, tmp_path):
    """tempfile.gettempdir() is `tmp_path` for the test (a 1777 directory, as /tmp is)."""
    tmp_path.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def where(tmp, uid: int | None = None) -> str:
    return str(tmp / f"aldebaran-shards-{os.getuid() if uid is None else uid}")


def test_the_directory_is_created_private_and_found_again(tmp):
    path = shardwire._dir()
    assert path == where(tmp) and stat.S_IMODE(os.lstat(path).st_mode) == 0o700
    assert shardwire._dir() == path  # the next worker finds the same one and accepts it
    assert shardwire.socket_path("s3a://b/cp", 3, 1234).startswith(path + os.sep)


@pytest.mark.parametrize("mode", [0o777, 0o750, 0o701, 0o1777])
def test_a_planted_directory_others_can_use_is_refused(tmp, mode):
    os.mkdir(where(tmp))
    os.chmod(where(tmp), mode)
    with pytest.raises(UnsafeShardDirectory, match=f"has mode {mode & 0o7777:04o} .group or others may use it."):
        shardwire._dir()
    with pytest.raises(UnsafeShardDirectory):
        shardwire.socket_path("s3a://b/cp", 0, 1)  # no socket is made or reached there
    assert isinstance(UnsafeShardDirectory("x"), AuditorError)


def test_a_directory_of_another_owner_is_refused(tmp, monkeypatch):
    me, other = os.getuid(), os.getuid() + 4242
    os.mkdir(where(tmp, other), 0o700)  # ours, under the name of uid `other`: to it, another owner's
    monkeypatch.setattr(shardwire.os, "getuid", lambda: other)
    with pytest.raises(UnsafeShardDirectory, match=f"is owned by uid {me}$|is owned by uid {me}:"):
        shardwire._dir()


def test_a_symlink_is_refused_even_to_a_private_directory(tmp):
    target = tmp / "elsewhere"
    target.mkdir(mode=0o700)
    os.symlink(target, where(tmp))
    with pytest.raises(UnsafeShardDirectory, match="is a symbolic link"):
        shardwire._dir()


def test_a_file_in_its_place_is_refused(tmp):
    with open(where(tmp), "w"):
        pass
    os.chmod(where(tmp), 0o600)
    with pytest.raises(UnsafeShardDirectory, match="is not a directory"):
        shardwire._dir()
