"""A small client of Airflow 3's REST API (``/api/v2``) for the lab: the demo and the chaos campaigns
drive the local Airflow the way a user or the UI does (trigger, pause, watch runs).

Authentication is the simple auth manager's: ``POST /auth/token`` with the generated admin user's
password (``ALDEBARAN_AIRFLOW_ADMIN_PASSWORD`` in .env). The apache-airflow-client package would add a
second pin set for six endpoints, so this stays on the standard library.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone

import tenacity

from aldebaran.exceptions import AldebaranError

log = logging.getLogger(__name__)

API_PATIENCE_S = 600.0  # how long a call waits for an unreachable api-server (it may be restarting)
IDEMPOTENT = ("GET", "PUT", "PATCH", "DELETE")  # repeated after a 5xx (see AirflowApi.call) ...
SERVER_ERROR_RETRIES = 5  # ... this many times, 2 s apart
FINISHED = ("success", "failed")


class AirflowApiError(AldebaranError):
    """An Airflow API call failed (HTTP error, unreachable past its patience, a run that failed)."""


class AirflowApi:
    """The api-server's REST API with a token of the admin user."""

    error = AirflowApiError  # subclasses raise their own package's error

    def __init__(self, base: str, password: str, user: str = "admin") -> None:
        self.base = base.rstrip("/")
        self._user = user
        self._password = password
        self._token: str | None = None

    def _request(self, method: str, path: str, body: dict | None = None, auth: bool = True) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")

    def token(self) -> str:
        if self._token is None:
            self._token = self._request("POST", "/auth/token", {"username": self._user, "password": self._password},
                                        auth=False)["access_token"]
        return self._token

    def _exists(self, path: str, method: str = "GET") -> bool:
        """`method` (GET, DELETE) on the object at `path` through :meth:`call` (its retries); False on a 404."""
        try:
            self.call(method, path)
        except self.error as exc:
            if isinstance(exc.__cause__, urllib.error.HTTPError) and exc.__cause__.code == 404:
                return False
            raise
        return True

    def _once(self, method: str, path: str, body: dict | None) -> dict:
        """One request; an expired token is renewed once. An HTTP error is raised as this client's error."""
        try:
            try:
                return self._request(method, path, body)
            except urllib.error.HTTPError as exc:
                if exc.code != 401:
                    raise
                self._token = None  # expired: once more with a new token
                return self._request(method, path, body)
        except urllib.error.HTTPError as exc:
            raise self.error(f"Airflow API {method} {path}: HTTP {exc.code} {exc.read()[:300]!r}") from exc

    def call(self, method: str, path: str, body: dict | None = None, patience: float | None = None) -> dict:
        """One API call. While the api-server is unreachable or too slow to answer (restarting, killed, a
        loaded machine), or answers an idempotent call with a 5xx, the call is repeated every 2 s for up to
        `patience` seconds (default API_PATIENCE_S); 5xx answers at most SERVER_ERROR_RETRIES times."""
        server_errors = 0

        def retryable(exc: BaseException) -> bool:
            nonlocal server_errors
            if isinstance(exc, self.error):
                # A 5xx on a call that may be repeated: the api-server's SQLite was busy ("Database error"
                # while the scheduler writes, seen in CI on a DAG pause). Not for POST (it may have acted).
                code = getattr(exc.__cause__, "code", 0)
                server_errors += code >= 500
                return code >= 500 and method in IDEMPOTENT and server_errors <= SERVER_ERROR_RETRIES
            return isinstance(exc, (OSError, ValueError))  # refused, reset, timed out, a truncated answer

        def log_retry(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception()
            if isinstance(exc, self.error):
                log.warning("%s; retrying", exc)
            else:
                log.debug("Airflow API %s %s: %s; retrying", method, path, exc)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(retryable), wait=tenacity.wait_fixed(2.0),
            stop=tenacity.stop_after_delay(API_PATIENCE_S if patience is None else patience),
            before_sleep=log_retry, reraise=True)
        try:
            return retrying(self._once, method, path, body)
        except (OSError, ValueError) as exc:
            raise self.error(f"Airflow API {method} {path}: unreachable: {exc}") from exc

    def get_text(self, path: str) -> str:
        """GET a page (not JSON) with the token, as a browser with the UI's session would."""
        req = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {self.token()}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise self.error(f"GET {path}: HTTP {exc.code}") from exc

    def health(self) -> dict:
        try:
            return self._request("GET", "/api/v2/monitor/health", auth=False)
        except (OSError, ValueError):
            return {}

    # --- DAGs and runs ----------------------------------------------------------------------------
    def dag(self, dag_id: str) -> dict | None:
        """The DAG as the API shows it, or None while the dag-processor has not registered it."""
        try:
            return self._request("GET", f"/api/v2/dags/{dag_id}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise self.error(f"Airflow API GET /api/v2/dags/{dag_id}: HTTP {exc.code}") from exc

    def wait_registered(self, dag_ids: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        missing = list(dag_ids)
        while missing:
            missing = [d for d in missing if self.dag(d) is None]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise self.error(f"DAGs not registered by the dag-processor after {timeout:.0f}s: "
                                 f"{', '.join(missing)} (see its log, and `airflow dags list-import-errors`)")
            time.sleep(2.0)

    # --- variables and connections (what a user sets in the UI) ----------------------------------
    def _unless_missing(self, method: str, collection: str, key: str) -> bool:
        """`method` on one object of `collection`; False if there is no such object (404). Through
        :meth:`call`: a busy api-server's timeout is waited out (one ended `bench deployed` before its report)."""
        return self._exists(f"/api/v2/{collection}/{urllib.parse.quote(key, safe='')}", method)

    def _upsert(self, collection: str, key: str, body: dict) -> None:
        """PATCH the object if it exists, else POST it."""
        if self._unless_missing("GET", collection, key):
            self.call("PATCH", f"/api/v2/{collection}/{urllib.parse.quote(key, safe='')}", body)
        else:
            self.call("POST", f"/api/v2/{collection}", body)

    def _delete(self, collection: str, key: str) -> None:
        self._unless_missing("DELETE", collection, key)

    def set_variable(self, key: str, value: str) -> None:
        self._upsert("variables", key, {"key": key, "value": value})

    def delete_variable(self, key: str) -> None:
        self._delete("variables", key)

    def set_connection(self, conn_id: str, conn_type: str, *, host: str | None = None, port: int | None = None,
                       password: str | None = None, extra: dict | None = None) -> None:
        body = {"connection_id": conn_id, "conn_type": conn_type, "host": host, "port": port,
                "password": password, "extra": json.dumps(extra) if extra is not None else None}
        self._upsert("connections", conn_id, {k: v for k, v in body.items() if v is not None})

    def delete_connection(self, conn_id: str) -> None:
        self._delete("connections", conn_id)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.call("PATCH", f"/api/v2/dags/{dag_id}?update_mask=is_paused", {"is_paused": paused})

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        """A manual run now; returns its run id.

        The run id is chosen here, so the POST can be repeated safely: after a 5xx (the api-server's
        SQLite busy while the scheduler writes; seen in CI as "Database error" on this very call) the
        run is looked up by that id, and the POST is sent again only if the run does not exist. A 409
        (the id exists) means an earlier attempt did act."""
        run_id = f"manual__{datetime.now(timezone.utc).isoformat()}__{secrets.token_hex(3)}"
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}}
        path = f"/api/v2/dags/{dag_id}/dagRuns"

        def post(attempt: int) -> str:
            if attempt > 1 and self._exists(f"{path}/{urllib.parse.quote(run_id, safe='')}"):
                return run_id  # the earlier POST acted; its answer was lost
            try:
                return self.call("POST", path, body)["dag_run_id"]  # a POST's 5xx is raised, not repeated
            except self.error as exc:
                if getattr(exc.__cause__, "code", None) == 409:
                    return run_id
                raise

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda exc: getattr(exc.__cause__, "code", 0) >= 500),
            stop=tenacity.stop_after_attempt(SERVER_ERROR_RETRIES + 1), wait=tenacity.wait_fixed(2.0), reraise=True,
            before_sleep=lambda state: log.warning("%s; checking whether run %s exists, then retrying",
                                                   state.outcome.exception(), run_id))
        for attempt in retrying:
            with attempt:
                return post(attempt.retry_state.attempt_number)
        raise AssertionError("unreachable")  # the loop returns or raises

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def runs(self, dag_id: str, limit: int = 1000) -> list[dict]:
        return self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit={limit}")["dag_runs"]

    def runs_since(self, dag_id: str, since: datetime) -> list[dict]:
        """The DAG's runs queued at or after `since` (scheduled or manual), oldest first."""
        runs = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=-id")["dag_runs"]
        recent = [r for r in runs if r.get("queued_at") and datetime.fromisoformat(r["queued_at"]) >= since]
        return sorted(recent, key=lambda r: r["queued_at"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        """{task id (with its map index when mapped): state} of one run."""
        tis = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                               "/taskInstances?limit=1000")["task_instances"]
        return {ti["task_id"] + (f"[{ti['map_index']}]" if ti.get("map_index", -1) >= 0 else ""): ti.get("state")
                for ti in tis}

    def wait_run(self, dag_id: str, run_id: str, timeout: float, progress=None) -> dict:
        """Wait until the run finished (success or failed); `progress(run)` is called on each poll.
        Raises on timeout, naming the tasks' states."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(dag_id, run_id)
            if progress:
                progress(run)
            if run.get("state") in FINISHED:
                return run
            if time.monotonic() > deadline:
                raise self.error(f"{dag_id} run {run_id} still {run.get('state')} after {timeout:.0f}s; tasks: "
                                 f"{self.task_states(dag_id, run_id)}")
            time.sleep(2.0)
