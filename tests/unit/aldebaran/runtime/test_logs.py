"""The platform's log lines (aldebaran.runtime.logs): an ISO-8601 UTC time on every line, text or one JSON object
per line (ALDEBARAN_LOG_FORMAT), and the same date in the log4j2 configs the project writes for Spark and
Kafka."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from aldebaran.runtime import logs
from aldebaran.runtime import spark as sparkmod
from aldebaran.exceptions import ConfigError
from aldebaran.settings import LogSettings, load


def _emit(formatter: logging.Formatter, msg: str, *args, exc: bool = False, **extra) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger(f"aldebaran.test_logs.{id(stream)}")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        if exc:
            try:
                raise ValueError("bad\nvalue")
            except ValueError:
                logger.exception(msg, *args, extra=extra)
        else:
            logger.warning(msg, *args, extra=extra)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def _near_now(stamp: str) -> datetime:
    at = datetime.fromisoformat(stamp)
    assert at.tzinfo is not None and at.utcoffset() == timedelta(0)
    assert abs(datetime.now(timezone.utc) - at) < timedelta(minutes=1)
    return at


def test_the_text_line_starts_with_a_date_and_a_zone():
    line = _emit(logs.TextFormatter(), "webhook: partition %d retries", 1)
    stamp, level, rest = line.split(" ", 2)
    assert stamp.endswith("Z") and len(stamp) == len("2026-11-28T05:09:05.123Z")
    _near_now(stamp)
    assert level == "WARNING"
    assert rest.startswith("aldebaran.test_logs.") and rest.endswith(": webhook: partition 1 retries\n")


def test_a_json_line_is_one_object_with_the_fields_the_call_site_knows():
    fmt = logs.JsonFormatter("dispatch")
    out = _emit(fmt, "%s/%s: rescued\nby another worker", "webhook", "a-1",
                **logs.fields(channel="webhook", partition=3, alert_id="a-1", batch_id=None))
    assert out.count("\n") == 1  # the message's own newline is escaped inside the string
    line = json.loads(out)
    _near_now(line["time"])
    assert line["time"].endswith("Z")
    assert {k: line[k] for k in ("level", "message", "role", "channel", "partition", "alert_id")} == {
        "level": "WARNING", "message": "webhook/a-1: rescued\nby another worker", "role": "dispatch",
        "channel": "webhook", "partition": 3, "alert_id": "a-1"}
    assert line["logger"].startswith("aldebaran.test_logs.")
    assert "batch_id" not in line  # unknown: left out, not null


def test_a_json_line_carries_the_traceback_and_objects_it_cannot_encode():
    line = json.loads(_emit(logs.JsonFormatter("auditor"), "batch %d failed", 7, exc=True,
                            batch_id=7, batch={"at": datetime(2026, 11, 28, tzinfo=timezone.utc)}))
    assert line["batch_id"] == 7 and line["batch"] == {"at": "2026-11-28 00:00:00+00:00"}
    assert "ValueError: bad\nvalue" in line["exception"]


def test_the_format_setting():
    assert load(LogSettings).format in ("text", "json")
    assert load(LogSettings, format="JSON").format == "json"
    with pytest.raises(ConfigError, match="ALDEBARAN_LOG_FORMAT"):
        load(LogSettings, format="xml")
    assert isinstance(logs.formatter("x", "json"), logs.JsonFormatter)
    assert isinstance(logs.formatter("x", "text"), logs.TextFormatter)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_setup_configures_a_fresh_process_from_the_environment(log_format):
    # A process of its own: pytest's capture handlers sit on this one's root logger.
    code = ("import logging; from aldebaran.runtime import logs; logs.setup('dispatch'); "
            "logging.getLogger('aldebaran.delivery.dispatcher').warning('webhook: down', "
            "extra=logs.fields(channel='webhook', partition=0)); "
            "logging.getLogger('botocore').info('noise'); logging.getLogger('httpx').info('HTTP Request: POST')")
    env = {**os.environ, "ALDEBARAN_LOG_FORMAT": log_format}
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stderr
    lines = err.splitlines()
    assert len(lines) == 1, err  # botocore's and httpx's INFO are quieted
    if log_format == "json":
        line = json.loads(lines[0])
        _near_now(line["time"])
        assert (line["role"], line["channel"], line["partition"], line["message"]) == ("dispatch", "webhook", 0,
                                                                                         "webhook: down")
    else:
        _near_now(lines[0].split(" ", 1)[0])
        assert lines[0].endswith(" aldebaran.delivery.dispatcher: webhook: down")


# --- the JVMs' log4j2 configs ------------------------------------------------------------------------
def test_the_log4j2_date_is_iso_8601_in_utc():
    assert logs.LOG4J2_DATE == "%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX}{UTC}"


def test_the_spark_config_is_written_to_the_run_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(sparkmod.paths, "run_dir", lambda: tmp_path)
    path = sparkmod.log4j2_file()
    assert path == tmp_path / "spark-log4j2.properties" and path.read_text() == sparkmod.SPARK_LOG4J2
    path.write_text("stale")
    assert sparkmod.log4j2_file().read_text() == sparkmod.SPARK_LOG4J2


@pytest.fixture
def log4j2(tmp_path, monkeypatch):
    monkeypatch.setattr(sparkmod.paths, "run_dir", lambda: tmp_path)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    return f"-Dlog4j2.configurationFile={tmp_path / 'spark-log4j2.properties'}"


@pytest.mark.parametrize("master, executors", [("local[2]", True), ("spark://127.0.0.1:7077", True),
                                               ("spark://10.0.0.5:7077", False), (None, False)])
def test_spark_jvms_on_this_host_get_the_config(log4j2, master, executors):
    out = sparkmod.with_log4j2(dict(sparkmod.SUBMIT_CONF), {}, master)
    assert out["spark.driver.extraJavaOptions"] == f"{sparkmod.JVM_OPTIONS} {log4j2}"
    assert (log4j2 in out["spark.executor.extraJavaOptions"]) is executors


def test_the_users_own_spark_logging_wins(log4j2, tmp_path, monkeypatch):
    user = {"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=/etc/spark/log4j2.properties"}
    assert sparkmod.with_log4j2(dict(sparkmod.SUBMIT_CONF), user, "local[2]") == sparkmod.SUBMIT_CONF
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "log4j2.properties").write_text("rootLogger.level = warn\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    assert sparkmod.with_log4j2(dict(sparkmod.SUBMIT_CONF), {}, "local[2]") == sparkmod.SUBMIT_CONF
