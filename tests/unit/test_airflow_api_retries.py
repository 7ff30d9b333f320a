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

            do_GET = do_POST = do_PATCH = _answer

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
