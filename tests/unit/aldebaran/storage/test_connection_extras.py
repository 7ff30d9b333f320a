"""A connection's numbers and JSON, however hostile, fail as a ConfigError naming the connection and the field
(aldebaran.storage.connections): Infinity, NaN, integers too large for a float, numbers of too many digits and
nesting too deep for the parser raised OverflowError, ValueError or RecursionError instead."""

from __future__ import annotations

import json

import pytest

from aldebaran.storage.connections import Connection
from aldebaran.exceptions import ConfigError

SOURCE = "Airflow connection aldebaran_hook"


def conn(**fields) -> Connection:
    return Connection.parse(SOURCE, json.dumps({"conn_type": "http", "host": "https://example.test", **fields}))


@pytest.mark.parametrize("port", [float("inf"), float("-inf"), float("nan"), 10**400, 1.5, True, "http"])
def test_a_port_that_is_no_port_is_a_config_error(port):
    with pytest.raises(ConfigError, match=rf"^{SOURCE}: field port must be a number between 1 and 65535$"):
        conn(port=port)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 10**400, -(10**400), "1e999"])
def test_extra_numbers_out_of_any_range_are_config_errors(value):
    c = conn(extra={"batch": value, "timeout": value})
    with pytest.raises(ConfigError, match=rf"^{SOURCE}: field extra.batch must be a whole number"):
        c.extra_int("batch", 1)
    with pytest.raises(ConfigError, match=rf"^{SOURCE}: field extra.timeout must be a number of seconds"):
        c.extra_seconds("timeout", 3.0)


@pytest.mark.parametrize(("raw", "why"), [
    ('{"conn_type": "http", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ('{"conn_type": "http", "port": ' + "9" * 5000 + "}", "a number too large"),
    ('{"conn_type": "http", "extra": "{\\"timeout\\": ' + "9" * 5000 + '}"}', "a number too large"),
])
def test_json_the_parser_cannot_take_is_a_config_error_that_echoes_nothing(raw, why):
    with pytest.raises(ConfigError, match=rf"^{SOURCE}: .*not valid JSON \({why}\)$") as exc:
        Connection.parse(SOURCE, raw)
    assert "9999" not in str(exc.value)


def test_an_extra_in_the_uri_form_is_held_to_the_same_rules():
    with pytest.raises(ConfigError, match=r"field extra \(__extra__\) is not valid JSON \(nested too deeply\)"):
        Connection.parse(SOURCE, "http://host?__extra__=" + "[" * 100_000 + "]" * 100_000)
