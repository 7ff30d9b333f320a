"""How a replay's range Params become exact per-partition offsets (no services: the watermarks and
the offsets-for-times lookup are given)."""

from __future__ import annotations

import pytest

from aldebaran.exceptions import ConfigError
from aldebaran.platform.replay import resolve

MARKS = {0: (5, 100), 1: (0, 40)}


def lookup(at_ms: int) -> dict[int, int]:
    return {0: 50, 1: -1}  # partition 1 has nothing at or after that time


def test_earliest_and_latest():
    assert resolve("earliest", "t", "start", MARKS) == {0: 5, 1: 0}
    assert resolve("latest", "t", "end", MARKS) == {0: 100, 1: 40}
    assert resolve(None, "t", "start", MARKS) == {0: 5, 1: 0}
    assert resolve("", "t", "end", MARKS) == {0: 100, 1: 40}


def test_json_offsets_per_partition_or_spark_form_fill_the_rest():
    assert resolve('{"0": 20}', "t", "start", MARKS) == {0: 20, 1: 0}
    assert resolve('{"t": {"1": 7}}', "t", "end", MARKS) == {0: 100, 1: 7}
    assert resolve('{"0": -2, "1": -1}', "t", "start", MARKS) == {0: 5, 1: 40}


def test_times_use_offsets_for_times_and_the_end_when_nothing_follows():
    assert resolve("2026-11-22T09:00:00Z", "t", "start", MARKS, lookup) == {0: 50, 1: 40}
    assert resolve("1795338000000", "t", "end", MARKS, lookup) == {0: 50, 1: 40}


@pytest.mark.parametrize("spec, message", [
    ("{nope", "not valid JSON"),
    ('{"7": 1}', "has no partition(s) [7]"),
    ('{"0": "x"}', "expected"),
    ("yesterday", "use earliest, latest, JSON offsets"),
])
def test_bad_ranges_name_the_param(spec, message):
    with pytest.raises(ConfigError, match="replay start") as err:
        resolve(spec, "t", "start", MARKS, lookup)
    assert message in str(err.value)
