"""The auditor's launch (aldebaran.platform.auditor_submit.launch): ALDEBARAN_SUPERVISOR_NICE reaches the
process it starts and, through it, everything spark-submit starts (a real child process reports its nice)."""

from __future__ import annotations

import os
import sys

import pytest

from aldebaran.platform import auditor_submit

# What spark-submit would be: a process that reports its nice level and starts a child that reports its own.
CHILD = "import os; print(os.nice(0))"
REPORT = [sys.executable, "-c", "import os, subprocess, sys; print('self', os.nice(0)); sys.stdout.flush(); "
          f"subprocess.run([sys.executable, '-c', {CHILD!r}])"]


@pytest.mark.parametrize("setting, expected", [(None, 0), ("7", 7)])
def test_the_auditor_starts_at_its_nice_level_and_its_children_inherit_it(setting, expected, monkeypatch, tmp_path):
    monkeypatch.setenv("ALDEBARAN_RUN_DIR", str(tmp_path))
    if setting is None:
        monkeypatch.delenv("ALDEBARAN_SUPERVISOR_NICE", raising=False)
    else:
        monkeypatch.setenv("ALDEBARAN_SUPERVISOR_NICE", setting)
    base = os.nice(0)
    proc, log_path = auditor_submit.launch(REPORT, dict(os.environ), "nice-test")
    assert proc.wait(60) == 0
    lines = log_path.read_text().split()
    assert lines == ["self", str(min(19, base + expected)), str(min(19, base + expected))]
