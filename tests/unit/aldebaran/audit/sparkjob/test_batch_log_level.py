"""The auditor's per-batch log line: INFO when the batch did something, DEBUG when it was empty."""

from __future__ import annotations

import logging

import pytest

from aldebaran.audit.sparkjob.batch import ACTIVITY_FIGURES, batch_log_level

EMPTY = {
    "batch_id": 7, "alerts": 0, "alert_kinds": {}, "dlq": 0, "open_books": 3, "opened": 0, "expired": 0,
    "applied": 0, "duplicates": 0, "state_ms_max": 1.5, "shard_loads": {"cache": 2}, "worker_rss_mib_max": 80.0,
    "batch_ms": 40.0, "steps_ms": {"parse_shards": 39.0},
}


def test_an_empty_batch_is_debug_even_with_open_books_and_timings():
    assert batch_log_level(EMPTY) == logging.DEBUG


@pytest.mark.parametrize("figure", ACTIVITY_FIGURES)
def test_any_activity_keeps_the_batch_at_info(figure):
    assert batch_log_level({**EMPTY, figure: 1}) == logging.INFO
