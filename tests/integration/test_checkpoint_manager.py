"""The platform's checkpoint file manager (include/aldebaran/jvm) on the real MinIO through s3a: a batch file
written once, a second writer of the same batch refused by the store (conditional create), an overwrite where
the caller allows one, a cancelled write invisible. The auditor's own runs on it are in test_auditor_recovery
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
    assert (seen["exists_before"], seen["exists_after"]) == (False, True)
    assert seen["second_write"] == "org.apache.hadoop.fs.FileAlreadyExistsException"
    assert seen["content"] == "v1"
    assert seen["content_after_overwrite"] == "v3"
    assert seen["cancelled_exists"] is False
    assert seen["is_metadata_log_file"] == [True, True, False, False]
