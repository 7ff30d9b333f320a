"""The deliveries plugin's FastAPI app in-process (TestClient), on a local-directory ledger, with
Airflow's auth dependency overridden: escaping of hostile values, input validation, no work at import.
The same app against the real Airflow and MinIO: tests/integration/test_plugin.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from aldebaran.runtime import paths

ROOT = paths.ROOT
PLUGIN = ROOT / "plugins" / "aldebaran_deliveries.py"
HOSTILE_ORDER = "<script>alert('order')</script>"
HOSTILE_CLIENT = '"><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def plugin():
    # Importing Airflow reads (and on first use writes) AIRFLOW_HOME: keep it inside the work tree.
    os.environ.setdefault("AIRFLOW_HOME", str(ROOT / ".run" / "airflow-test-home"))
    spec = importlib.util.spec_from_file_location("aldebaran_deliveries", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeUser:
    """Stands in for the Airflow user the overridden auth dependency would return."""

    def get_name(self) -> str:
        return "unit-tester"


@pytest.fixture
def ledger(tmp_path):
    from aldebaran.delivery.dispatcher import default_ledger
    from aldebaran.storage.store import LocalStore

    return default_ledger(LocalStore(tmp_path / "ledger"))


@pytest.fixture
def app(plugin, ledger):
    app = plugin.create_app()
    app.dependency_overrides[plugin.ledger_backend] = lambda: ledger.store
    return app


@pytest.fixture
def client(plugin, app):
    from fastapi.testclient import TestClient

    app.dependency_overrides[plugin.authorization()] = FakeUser
    return TestClient(app, follow_redirects=False)


def alert(alert_id: str, order_id: str = "o-1", client: str = "Sendence") -> dict:
    return {"alert_id": alert_id, "kind": "OVERFILL", "order_id": order_id, "client": client, "stock": "AAPL",
            "requested": 100, "purchased": 120}


def settle(ledger, channel: str, a: dict, status: str, detail=None, can_dedupe: bool = True):
    """Claim the alert's own record, then report one send's outcome, as the dispatcher does."""
    from aldebaran.delivery.channels import Outcome

    from aldebaran.model import Alert

    attempt = ledger.attempt(SimpleNamespace(name=channel, can_dedupe=can_dedupe), Alert.from_dict(a), "w1")
    outcome = Outcome.delivered(a["alert_id"], detail or {}) if status == "delivered" else \
        getattr(Outcome, status)(a["alert_id"], detail)
    attempt.report(outcome)
    return attempt.record


def test_hostile_values_are_escaped_on_the_overview_and_the_detail_page(client, ledger):
    settle(ledger, "sms", alert("a1", HOSTILE_ORDER, HOSTILE_CLIENT), "unknown", "provider said <b>maybe</b>",
           can_dedupe=False)

    overview = client.get("/deliveries/")
    detail = client.get("/deliveries/sms/a1")

    for resp in (overview, detail):
        assert resp.status_code == 200
        assert "<script" not in resp.text and "<img" not in resp.text and "<b>" not in resp.text
        assert "&lt;script&gt;alert(&#x27;order&#x27;)&lt;/script&gt;" in resp.text
        assert "default-src 'none'" in resp.headers["content-security-policy"]
    assert '<a href="sms/a1"><code>a1</code></a>' in overview.text
    assert "provider said &lt;b&gt;maybe&lt;/b&gt;" in overview.text
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in detail.text  # the alert table and the JSON


def test_overview_lists_attention_and_latest_records_with_links(client, ledger):
    for i in range(3):
        settle(ledger, "webhook", alert(f"ok{i}"), "delivered", {"status": 200})
    settle(ledger, "webhook", alert("gone"), "permanent", "410 Gone")
    settle(ledger, "webhook", alert("later"), "retry", "503 Service Unavailable")

    page = client.get("/deliveries/", params={"limit": 2}).text

    assert '<h3 class="attention-dead">Dead: 1</h3>' in page
    assert '<h3 class="attention-retry">Retrying / in flight: 1</h3>' in page
    assert '<a href="webhook/gone?limit=2">' in page and '<a href="webhook/later?limit=2">' in page
    assert "<h3>Latest 2 records</h3>" in page


def test_stats_endpoint_reports_each_channel(client, ledger):
    settle(ledger, "log", alert("x1"), "delivered", {"line": 1})
    settle(ledger, "log", alert("x2"), "permanent", "disk full")
    settle(ledger, "log", alert("x3"), "retry", "disk busy")

    body = client.get("/api/deliveries/stats").json()

    assert body["ledger"] == "deliveries"
    [log] = body["channels"]
    assert (log["channel"], log["retrying"], log["dead"], log["in_doubt"]) == ("log", 1, 1, 0)


def test_find_shows_an_alert_on_every_channel(client, ledger):
    settle(ledger, "sms", alert("f1"), "delivered", {"sid": "SM1"}, can_dedupe=False)
    settle(ledger, "webhook", alert("f1"), "retry", "HTTP 503")

    page = client.get("/deliveries/find", params={"alert_id": "f1"})

    assert page.status_code == 200
    assert '<a href="sms/f1">its record</a>' in page.text and '<a href="webhook/f1">its record</a>' in page.text
    assert "s-delivered" in page.text and "s-retry" in page.text and "SM1" in page.text
    assert client.get("/deliveries/find", params={"alert_id": "../x"}).status_code == 400


def test_detail_of_a_missing_record_is_404(client):
    resp = client.get("/deliveries/log/nope", headers={"accept": "text/html"})
    assert resp.status_code == 404 and "no delivery record for log/nope" in resp.text


@pytest.mark.parametrize("path", ["/deliveries/log/a..b", "/deliveries/-log/a1", "/deliveries/log/%3Cscript%3E"])
def test_unsafe_path_segments_are_rejected(client, path):
    resp = client.get(path, headers={"accept": "text/html"})
    assert resp.status_code == 400
    assert "<script>" not in resp.text


@pytest.mark.parametrize(
    "prefix", ["checkpoints", "archive/alerts", "../deliveries", "a/../deliveries", "/deliveries", "a/b/c/d/deliveries"]
)
def test_only_delivery_ledgers_can_be_chosen(client, prefix):
    assert client.get("/api/deliveries/stats", params={"ledger": prefix}).status_code == 400
    assert client.get("/deliveries/", params={"ledger": prefix}).status_code == 400


def test_another_ledger_prefix_is_carried_in_the_links(client, ledger):
    from aldebaran.delivery.ledger import Ledger

    other = Ledger(ledger.store, prefix="tests/t1/deliveries")
    settle(other, "log", alert("y1"), "delivered")

    page = client.get("/deliveries/", params={"ledger": "tests/t1/deliveries"}).text

    assert '<a href="log/y1?ledger=tests%2Ft1%2Fdeliveries">' in page
    assert client.get("/deliveries/log/y1", params={"ledger": "tests/t1/deliveries"}).status_code == 200
    assert client.get("/deliveries/log/y1").status_code == 404  # not in the default ledger


def test_without_credentials_airflow_get_user_refuses(plugin, app):
    from fastapi.testclient import TestClient

    client = TestClient(app)  # no override: Airflow's own get_user runs
    for path in ("/api/deliveries/stats", "/deliveries/"):
        resp = client.get(path)
        assert resp.status_code == 401 and resp.json() == {"detail": "Not authenticated"}


def test_importing_the_plugin_does_no_work():
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('aldebaran_deliveries', {str(PLUGIN)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "heavy = ['boto3', 'fastapi', 'airflow.api_fastapi.core_api.security', 'aldebaran.delivery.ledger']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    env = {**os.environ, "AIRFLOW_HOME": os.environ.get("AIRFLOW_HOME", str(ROOT / ".run" / "airflow-test-home"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


class UnreachableBackend:
    """Failure-path fake: an object store that cannot be reached."""

    def list(self, prefix, start_after=None, page_size=None):
        from aldebaran.exceptions import ObjectStoreError

        raise ObjectStoreError(f"object store http://127.0.0.1:9 unreachable for s3://aldebaran/{prefix}")

    def get(self, key):
        self.list(key)

    def uri(self, key: str = "") -> str:
        return f"s3://aldebaran/{key}"


def test_an_unreachable_object_store_is_a_503_that_names_it(plugin, client, app):
    app.dependency_overrides[plugin.ledger_backend] = UnreachableBackend

    page = client.get("/deliveries/", headers={"accept": "text/html"})
    detail = client.get("/deliveries/log/a1", headers={"accept": "text/html"})
    stats = client.get("/api/deliveries/stats")

    assert page.status_code == detail.status_code == stats.status_code == 503
    assert "unreachable for s3://aldebaran/deliveries/" in page.text
    assert stats.json()["detail"].startswith("delivery ledger unavailable: object store http://127.0.0.1:9 unreachable")


def fake_explain(hostile: str):
    """Stands in for aldebaran.cli.explain.explain (which reads Kafka): an Explanation full of hostile values."""
    from aldebaran.cli.story import Entry, Explanation
    from aldebaran.model import Event

    def explain(alert_id, ledger, **_):
        story = Explanation(alert_id, {"alert_id": alert_id, "kind": "OVERFILL", "order_id": hostile,
                                       "client": HOSTILE_CLIENT, "trigger_event_id": hostile, "trigger_event_ts": 1},
                            (0, 7), f"trades{hostile}", 2,
                            [Entry(0, 3, Event("PR", hostile, hostile, 100, None, None, 1)),
                             Entry(0, 4, Event("P", hostile, hostile, 120, None, None, 2), trigger=True, note=hostile)],
                            notes=[hostile],
                            deliveries=[{"channel": "sms", "source": "record", "state": "IN_DOUBT", "attempt": 1,
                                         "history": [{"at": 1.0, "state": "IN_DOUBT", "note": hostile}]}])
        return story

    return explain


def test_explain_page_shows_the_story_with_every_value_escaped(client, monkeypatch):
    monkeypatch.setattr("aldebaran.cli.explain.explain", fake_explain(HOSTILE_ORDER))

    page = client.get("/deliveries/explain", params={"alert_id": "e1"})

    assert page.status_code == 200
    assert "<script" not in page.text and "<img" not in page.text
    assert page.text.count("&lt;script&gt;alert(&#x27;order&#x27;)&lt;/script&gt;") >= 7
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert '<table id=trades>' in page.text and "<td>trigger</td>" in page.text
    assert '<a href="sms/e1">its record</a>' in page.text and "s-in_doubt" in page.text


def test_explain_page_of_an_unknown_alert_is_404_and_a_hostile_id_400(client, monkeypatch):
    from aldebaran.exceptions import AlertNotFound

    def not_found(alert_id, ledger, **_):
        raise AlertNotFound(f"no alert {alert_id!r} on the alerts topic")

    monkeypatch.setattr("aldebaran.cli.explain.explain", not_found)
    resp = client.get("/deliveries/explain", params={"alert_id": "nope"}, headers={"accept": "text/html"})
    assert resp.status_code == 404 and "no alert &#x27;nope&#x27; on the alerts topic" in resp.text
    resp = client.get("/deliveries/explain", params={"alert_id": "<script>x"}, headers={"accept": "text/html"})
    assert resp.status_code == 400 and "<script>" not in resp.text


def test_find_links_to_the_explain_page(client, ledger):
    settle(ledger, "sms", alert("f2"), "delivered", {"sid": "SM1"}, can_dedupe=False)
    page = client.get("/deliveries/find", params={"alert_id": "f2"})
    assert '<a href="explain?alert_id=f2">' in page.text
