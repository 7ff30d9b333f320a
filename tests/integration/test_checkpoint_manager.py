"""The platform's checkpoint file manager (include/aldebaran/jvm) on the real MinIO through s3a: a batch file
written once, a second writer of the same batch refused by the store (conditional create), an overwrite where
the caller allows one, a cancelled write invisible, a purged batch file deleted with one request. The auditor's own runs on it are in test_auditor_recovery
(SIGKILL and restart from an s3a:// checkpoint)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from aldebaran.settings import ObjectStoreSettings, load

APP = Path(__file__).with_name("checkpoint_manager_app.py")


def test_the_checkpoint_manager_writes_once_refuses_a_second_writer_and_cancels(services_up, tmp_path):
    base = f"s3a://{load(ObjectStoreSettings).bucket}/tests/checkpoint-manager/{uuid.uuid4().hex[:10]}"
    out = tmp_path / "seen.json"
    done = subprocess.run([sys.executable, str(APP), base, str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["manager"] == "io.aldebaran.spark.ObjectStoreCheckpointFileManager"
    assert seen["secret_on_command_line"] is False
    assert (seen["exists_before"], seen["exists_after"]) == (False, True)
    assert seen["second_write"] == "org.apache.hadoop.fs.FileAlreadyExistsException"
    assert seen["content"] == "v1"
    assert seen["content_after_overwrite"] == "v3"
    assert seen["cancelled_exists"] is False
    assert seen["is_metadata_log_file"] == [True, True, False, False]
    # a purged batch file: one request, no HEAD and no LIST around it; an absent one is no error
    assert seen["exists_after_delete"] is False
    got = seen["delete_requests"]
    assert got["object_delete_request"] + got["object_bulk_delete_request"] == 1, got
    assert (got["object_metadata_request"], got["object_list_request"], got["object_put_request"]) == (0, 0, 0), got
    assert sum(seen["delete_absent_requests"].values()) == 1, seen["delete_absent_requests"]
    # Spark's own path, kept behind `aldebaran.checkpoint.delete=filecontext` (for the A/B): it deletes too. Its
    # requests go through FileContext's own S3AFileSystem, so they are not counted here (a HEAD, a LIST, the
    # DELETE and a LIST, in the JFR stacks of docs/design.md §5)
    assert seen["filecontext_exists_after_delete"] is False
    assert "aldebaran.checkpoint.delete must be bulk or filecontext, not sometimes" in seen["bad_mode"]
