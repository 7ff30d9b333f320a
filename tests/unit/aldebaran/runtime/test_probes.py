"""/healthz and /readyz (aldebaran.runtime.probes), pure: the readiness rules on heartbeat bodies, and that a
dispatcher's /readyz and its supervisor agree on every body (one rule, aldebaran.runtime.heartbeat.stalled, with
the supervisor's settings); the WSGI wrapper's codes and JSON, /metrics passed through."""

from __future__ import annotations

import json
import threading

import pytest

from aldebaran.runtime import probes
from aldebaran.platform.processes import diagnose
from aldebaran.platform.settings import DispatchSupervisorSettings
from aldebaran.runtime.probes import Verdict, Watched, auditor_ready, dispatcher_ready, lane_ready

NOW = 1_000_000.0
S = DispatchSupervisorSettings(stale_after_seconds=30, progress_limit_seconds=120)


def unit(progress_ago: float, loop_ago: float | None = 0.5, pending: bool = True) -> dict:
    return {"progress_at": NOW - progress_ago, "loop_at": None if loop_ago is None else NOW - loop_ago,
            "pending": pending, "outcomes": 10}


def body(progress: dict | None, at_ago: float = 3, status: str = "running", **extra) -> dict:
    return {"status": status, "name": "log", "channels": ["log"], "at": NOW - at_ago, "progress": progress, **extra}


def ready(b: dict | None) -> Verdict:
    return dispatcher_ready(b, NOW, S.stale_after_seconds, S.progress_limit_seconds)


# --- a dispatcher ----------------------------------------------------------------------------------
def test_a_consuming_dispatcher_is_ready():
    assert ready(body({"log": unit(progress_ago=5)})) == Verdict(True, "ok", "1 channel(s) consuming")


def test_an_idle_channel_is_ready_however_long_nothing_arrives():
    assert ready(body({"log": unit(progress_ago=3600, loop_ago=0.2, pending=False)})).ok


def test_a_slow_channel_whose_marks_move_is_ready_however_long_its_loop_turn():
    assert ready(body({"log": unit(progress_ago=20, loop_ago=600)})).ok


def test_pending_work_without_progress_for_the_limit_is_not_ready():
    v = ready(body({"log": unit(progress_ago=121)}))
    assert (v.ok, v.status) == (False, "stalled")
    assert v.reason == ("log: work pending and no progress for 121s "
                        "(limit 120s, ALDEBARAN_DISPATCH_SUPERVISOR_PROGRESS_LIMIT_SECONDS)")


def test_a_loop_that_has_not_polled_yet_is_starting_then_stalled_after_the_limit():
    assert ready(body({"log": unit(progress_ago=5, loop_ago=None, pending=False)})).status == "starting"
    assert ready(body({"log": unit(progress_ago=130, loop_ago=None, pending=False)})).status == "stalled"


@pytest.mark.parametrize("b, status", [
    (None, "starting"),
    (body({"log": unit(5)}, at_ago=31), "stale"),
    (body({"log": unit(5)}, status="failed", error="KafkaException: boom"), "failed"),
    (body({"log": unit(5)}, status="stopped"), "stopped"),
])
def test_no_body_a_stale_one_or_an_ended_dispatcher_is_not_ready(b, status):
    v = ready(b)
    assert (v.ok, v.status) == (False, status)
    if status == "failed":
        assert v.reason == "dispatcher failed: KafkaException: boom"


@pytest.mark.parametrize("progress, at_ago", [
    ({"log": unit(5)}, 3), ({"log": unit(119)}, 3), ({"log": unit(121)}, 3), ({"log": unit(600, 0.2, False)}, 3),
    ({"log": unit(300, 300, False)}, 3), ({"log": unit(130, None, False)}, 3), ({"log": unit(5)}, 31),
    ({"sms": unit(500), "webhook": unit(1)}, 3),
])
def test_the_probe_and_the_supervisor_judge_a_body_alike(progress, at_ago):
    """Where the supervisor finds a problem in a live process's heartbeat, /readyz is 503, and the reverse."""
    b = body(progress, at_ago=at_ago)
    facts = {"now": NOW, "host": "h", "name": "log", "channels": sorted(progress), "kind": "dispatcher",
             "heartbeat_uri": "s3://b/hb.json", "heartbeat": {**b, "channels": sorted(progress), "pid": 1},
             "heartbeat_alive": True, "launch": None, "launch_alive": None}
    assert ready(b).ok == (diagnose(facts, S) == [])


# --- the auditor and the lane ----------------------------------------------------------------------
def record(status: str, ago: float, batch_id: int | None = 7) -> dict:
    return {"status": status, "batch_id": batch_id, "updated_at_ms": int((NOW - ago) * 1000)}


@pytest.mark.parametrize("r, ok, status", [
    (None, False, "starting"),
    (record("started", 2, None), False, "starting"),
    (record("started", 121, None), False, "stalled"),  # its first batch hangs
    (record("running", 2), True, "ok"),
    (record("idle", 100), True, "ok"),  # nothing to read: the idle record is fresh progress
    (record("running", 121), False, "stalled"),
    (record("failed", 1), False, "failed"),
])
def test_the_auditor_is_ready_while_its_batches_or_idle_records_are_fresh(r, ok, status):
    v = auditor_ready(r, NOW, 120)
    assert (v.ok, v.status) == (ok, status), v
    if status == "stalled" and r["status"] == "running":
        assert v.reason == ("no progress for 121s (limit 120s, ALDEBARAN_SUPERVISOR_STALE_AFTER_SECONDS; "
                            "last batch 7)")


@pytest.mark.parametrize("b, ok, status", [
    (None, False, "starting"),
    ({"status": "starting", "at": NOW - 1}, False, "starting"),
    ({"status": "rotating", "at": NOW - 1}, False, "rotating"),
    ({"status": "running", "at": NOW - 1}, True, "ok"),
    ({"status": "running", "at": NOW - 31}, False, "stale"),
    ({"status": "failed", "at": NOW - 1, "error": "the lane exited"}, False, "failed"),
])
def test_the_lane_is_ready_while_running_and_its_loop_beats(b, ok, status):
    v = lane_ready(b, NOW, 30)
    assert (v.ok, v.status) == (ok, status), v


# --- liveness, and the HTTP answers ------------------------------------------------------------------
@pytest.fixture
def watched():
    keys: list[str] = []
    yield lambda key, w: keys.append(probes.watch(key, w))
    for key in keys:
        probes.unwatch(key)


def call(app, path: str) -> tuple[str, dict | bytes]:
    got = {}
    out = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET"},
                       lambda status, headers: got.update(status=status, headers=dict(headers))))
    if got["headers"].get("Content-Type") == "application/json":
        return got["status"], json.loads(out)
    return got["status"], out


def metrics_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"# metrics\n"]


def test_before_a_main_loop_exists_it_is_alive_and_not_ready():
    app = probes.wsgi(metrics_app)
    assert call(app, "/healthz") == ("200 OK", {"status": "starting", "reason": "starting: no main loop yet"})
    assert call(app, "/readyz")[0] == "503 Service Unavailable"
    assert call(app, "/metrics") == ("200 OK", b"# metrics\n")


def test_healthz_follows_the_main_loop_thread_and_readyz_the_rule(watched):
    done = threading.Event()
    loop = threading.Thread(target=done.wait, name="loop")
    loop.start()
    state = {"body": {"status": "running", "at": 0.0}}
    watched("lane/x", Watched("lane x", loop, lambda: state["body"], lambda b, now: lane_ready(b, now, 30)))
    app = probes.wsgi(metrics_app)
    import time

    state["body"]["at"] = time.time()
    assert call(app, "/healthz") == ("200 OK", {"status": "ok", "reason": "lane x: main loop running"})
    assert call(app, "/readyz/") == ("200 OK", {"status": "ok", "reason": "lane x: lane query active"})
    state["body"]["at"] = time.time() - 40
    status, got = call(app, "/readyz")
    assert status == "503 Service Unavailable" and got["status"] == "stale", got
    assert call(app, "/healthz")[0] == "200 OK"  # a loop that is slow to beat is still alive
    done.set()
    loop.join()
    assert call(app, "/healthz") == ("503 Service Unavailable",
                                      {"status": "dead", "reason": "lane x: its main loop thread loop has ended"})


# --- the roles, on the real /metrics server ----------------------------------------------------------
@pytest.fixture
def served(tmp_path, monkeypatch):
    """This process's /metrics server (process-global), stopped afterwards."""
    from aldebaran.runtime import metrics

    metrics.stop()
    monkeypatch.setenv("ALDEBARAN_METRICS_TARGETS_DIR", str(tmp_path / "targets"))
    yield metrics.serve("dispatcher", "log")
    metrics.stop()


def get(address: str, path: str) -> tuple[int, dict | str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as resp:
            text = resp.read().decode()
            return resp.status, json.loads(text) if path != "/metrics" else text
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_dispatchers_heartbeat_is_judged_on_its_metrics_port(served, monkeypatch):
    from aldebaran.delivery.stats import DispatchStats
    from aldebaran.delivery.service import Heartbeat

    monkeypatch.setenv("ALDEBARAN_DISPATCH_SUPERVISOR_STALE_AFTER_SECONDS", "30")
    hb = Heartbeat(None, "log", ["log"], "me", DispatchStats(), period=5)
    key = probes.watch_dispatcher(hb)
    try:
        assert get(served, "/readyz") == (503, {"status": "starting",
                                                "reason": "dispatcher log: no heartbeat computed yet"})
        hb.body()  # what the heartbeat's thread computes every period
        assert get(served, "/readyz") == (503, {"status": "starting",
                                                "reason": "dispatcher log: channel(s) log not consuming yet"})
        hb._units["log"].progress.turned()  # its channel loop polled
        hb.body()
        assert get(served, "/readyz") == (200, {"status": "ok", "reason": "dispatcher log: 1 channel(s) consuming"})
        assert get(served, "/healthz")[0] == 200
        hb.body("stopped")
        assert get(served, "/healthz") == (503, {"status": "stopped", "reason": "dispatcher log stopped"})
        code, text = get(served, "/metrics")
        assert code == 200 and "process_resident_memory_bytes" in text  # /metrics as before, same port
    finally:
        probes.unwatch(key)


def test_the_lane_keepers_last_beat_is_judged_with_its_stale_limit(served):
    import time
    from types import SimpleNamespace

    keeper = SimpleNamespace(name="realtime", settings=SimpleNamespace(stale_after_seconds=30), last_body=None)
    key = probes.watch_lane(keeper)
    try:
        keeper.last_body = {"status": "starting", "at": time.time()}
        assert get(served, "/readyz")[1] == {"status": "starting",
                                             "reason": "lane realtime: lane starting: its query is not active yet"}
        keeper.last_body = {"status": "running", "at": time.time()}
        assert get(served, "/readyz") == (200, {"status": "ok", "reason": "lane realtime: lane query active"})
    finally:
        probes.unwatch(key)
