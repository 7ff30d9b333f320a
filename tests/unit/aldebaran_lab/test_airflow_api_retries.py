"""AirflowApi.call against a failure-injecting HTTP server (named so: it stands in for an api-server whose
SQLite is busy): an idempotent call is repeated after a 5xx, a POST is not, and the retries are bounded."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from aldebaran_lab import airflow_api
from aldebaran_lab.airflow_api import AirflowApi


class FailingApiServer(ThreadingHTTPServer):
    """Answers the first `failures` requests of each method with HTTP 500, then 200 with {"ok": true}."""

    def __init__(self, failures: int) -> None:
        self.failures, self.seen = failures, {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/auth/token":
                    body, code = {"access_token": "t"}, 200
                else:
                    n = outer.seen[self.command] = outer.seen.get(self.command, 0) + 1
                    body, code = ({"detail": "Database error"}, 500) if n <= outer.failures else ({"ok": True}, 200)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def server(request, monkeypatch):
    monkeypatch.setattr(airflow_api.time, "sleep", lambda s: None)
    srv = FailingApiServer(request.param)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


@pytest.mark.parametrize("server", [2], indirect=True)
def test_an_idempotent_call_is_repeated_after_a_server_error(server):
    api = AirflowApi(f"http://127.0.0.1:{server.server_port}", "pw")
    assert api.call("PATCH", "/api/v2/dags/x?update_mask=is_paused", {"is_paused": True}) == {"ok": True}
    assert server.seen["PATCH"] == 3


@pytest.mark.parametrize("server", [1], indirect=True)
def test_a_post_is_not_repeated(server):
    api = AirflowApi(f"http://127.0.0.1:{server.server_port}", "pw")
    with pytest.raises(api.error, match="HTTP 500"):
        api.call("POST", "/api/v2/dags/x/dagRuns", {})
    assert server.seen["POST"] == 1


@pytest.mark.parametrize("server", [100], indirect=True)
def test_server_errors_are_retried_a_bounded_number_of_times(server):
    api = AirflowApi(f"http://127.0.0.1:{server.server_port}", "pw")
    with pytest.raises(api.error, match="Database error"):
        api.call("GET", "/api/v2/dags/x")
    assert server.seen["GET"] == airflow_api.SERVER_ERROR_RETRIES + 1


class FlakyTriggerServer(ThreadingHTTPServer):
    """Failure injection for AirflowApi.trigger: a DAG-run store whose first `failures` POSTs answer 500,
    either before storing the run (`acts=False`) or after it (`acts=True`, the commit went through but
    the answer was lost). GET of a stored run id is 200, else 404; a POST of a stored id is 409."""

    def __init__(self, failures: int, acts: bool) -> None:
        self.failures, self.acts, self.posts, self.runs = failures, acts, 0, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/auth/token":
                    return self._send(200, {"access_token": "t"})
                outer.posts += 1
                run_id = body["dag_run_id"]
                if run_id in outer.runs:
                    return self._send(409, {"detail": "exists"})
                if outer.posts <= outer.failures:
                    if outer.acts:
                        outer.runs.append(run_id)
                    return self._send(500, {"detail": "Database error"})
                outer.runs.append(run_id)
                self._send(200, {"dag_run_id": run_id})

            def do_GET(self) -> None:
                run_id = self.path.rsplit("/", 1)[-1].replace("%3A", ":").replace("%2B", "+")
                self._send(200, {"dag_run_id": run_id}) if run_id in outer.runs else self._send(404, {})

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def trigger_server(request, monkeypatch):
    monkeypatch.setattr(airflow_api.time, "sleep", lambda s: None)
    srv = FlakyTriggerServer(*request.param)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


@pytest.mark.parametrize("trigger_server", [(2, False)], indirect=True)
def test_a_trigger_that_failed_before_acting_is_sent_again_and_makes_one_run(trigger_server):
    api = AirflowApi(f"http://127.0.0.1:{trigger_server.server_port}", "pw")
    run_id = api.trigger("alert_dispatch")
    assert trigger_server.runs == [run_id]
    assert trigger_server.posts == 3


@pytest.mark.parametrize("trigger_server", [(1, True)], indirect=True)
def test_a_trigger_whose_answer_was_lost_is_found_and_not_sent_again(trigger_server):
    api = AirflowApi(f"http://127.0.0.1:{trigger_server.server_port}", "pw")
    run_id = api.trigger("alert_dispatch")
    assert trigger_server.runs == [run_id]
    assert trigger_server.posts == 1


@pytest.mark.parametrize("trigger_server", [(100, False)], indirect=True)
def test_a_trigger_gives_up_after_the_bounded_retries(trigger_server):
    api = AirflowApi(f"http://127.0.0.1:{trigger_server.server_port}", "pw")
    with pytest.raises(api.error, match="HTTP 500"):
        api.trigger("alert_dispatch")
    assert trigger_server.posts == airflow_api.SERVER_ERROR_RETRIES + 1
    assert trigger_server.runs == []


@pytest.mark.parametrize("server", [2], indirect=True)
def test_each_server_error_retry_logs_one_warning_with_the_answer(server, caplog):
    api = AirflowApi(f"http://127.0.0.1:{server.server_port}", "pw")
    with caplog.at_level("WARNING", logger="aldebaran_lab.airflow_api"):
        api.call("GET", "/api/v2/dags/x")
    assert [r.getMessage() for r in caplog.records] == [
        "Airflow API GET /api/v2/dags/x: HTTP 500 b'{\"detail\": \"Database error\"}'; retrying"] * 2


def test_an_unreachable_api_server_is_retried_until_the_patience_runs_out(monkeypatch):
    import threading

    sleeps, me, real_sleep = [], threading.get_ident(), airflow_api.time.sleep

    def sleep(seconds: float) -> None:  # `time` is global: another test's leftover thread sleeps through it
        if threading.get_ident() == me:
            sleeps.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(airflow_api.time, "sleep", sleep)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = srv.server_port
    srv.server_close()  # nothing listens there now: every connection is refused
    api = AirflowApi(f"http://127.0.0.1:{port}", "pw")
    with pytest.raises(api.error, match="unreachable") as exc:
        api.call("GET", "/api/v2/dags/x", patience=0.3)
    assert isinstance(exc.value.__cause__, OSError)
    assert sleeps and set(sleeps) == {2.0}


@pytest.mark.parametrize("server", [2], indirect=True)
def test_a_delete_is_repeated_after_a_server_error(server):
    """Deletes go through call() (a bench's cleanup once died on a busy api-server's timeout, leaving its
    dispatchers running)."""
    api = AirflowApi(f"http://127.0.0.1:{server.server_port}", "pw")
    api.delete_variable("aldebaran_channels")
    assert server.seen["DELETE"] == 3
