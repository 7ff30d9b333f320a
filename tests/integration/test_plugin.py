"""The deliveries plugin in the real Airflow (`make test` starts it with this repo's plugins/), reading
a ledger this test writes to the real MinIO under its own prefix (`?ledger=<prefix>/deliveries`).

Authentication is Airflow's: a JWT from the simple auth manager's POST /auth/token, sent as a bearer
token (API clients) or as the `_token` cookie (what the UI's iframe sends)."""

from __future__ import annotations

import os
from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest

from aldebaran.delivery.ledger import Ledger

AIRFLOW = f"http://{os.environ.get('ALDEBARAN_AIRFLOW_HOST', '127.0.0.1')}:{os.environ.get('ALDEBARAN_AIRFLOW_PORT', '8080')}"
PAGE = "/aldebaran/deliveries/"
STATS = "/aldebaran/api/deliveries/stats"
HOSTILE_ORDER = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def http():
    with httpx.Client(base_url=AIRFLOW, timeout=30, follow_redirects=False) as client:
        yield client


@pytest.fixture(scope="module")
def token(services_up, http):
    resp = http.post("/auth/token", json={"username": "admin", "password": os.environ["ALDEBARAN_AIRFLOW_ADMIN_PASSWORD"]})
    assert resp.status_code == 201, resp.text
    return resp.json()["access_token"]


@pytest.fixture
def bearer(token):
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def ledger(store, s3_prefix, unique):
    """webhook: one DELIVERED, one DEAD, one RETRY; sms: one DELIVERED, one IN_DOUBT."""
    from aldebaran.delivery.channels import Outcome

    ledger = Ledger(store, prefix=f"{s3_prefix}/deliveries")

    def alert(name: str, order_id: str = "o-1") -> dict:
        return {"alert_id": f"{unique}-{name}", "kind": "OVERFILL", "order_id": order_id, "client": "Sendence",
                "stock": "AAPL", "requested": 100, "purchased": 120}

    def settle(channel: str, a: dict, outcome, can_dedupe: bool = True) -> None:
        from types import SimpleNamespace

        from aldebaran.model import Alert

        ledger.attempt(SimpleNamespace(name=channel, can_dedupe=can_dedupe), Alert.from_dict(a), "w1").report(outcome)

    settle("webhook", alert("ok"), Outcome.delivered(f"{unique}-ok", {"status": 200}))
    settle("webhook", alert("gone"), Outcome.permanent(f"{unique}-gone", "410 Gone"))
    settle("webhook", alert("later"), Outcome.retry(f"{unique}-later", "503 Service Unavailable"))
    settle("sms", alert("sent"), Outcome.delivered(f"{unique}-sent", {"sid": "SM1"}), can_dedupe=False)
    settle("sms", alert("maybe", HOSTILE_ORDER), Outcome.unknown(f"{unique}-maybe", "timeout after the provider accepted"),
           can_dedupe=False)
    return ledger


class Tables(HTMLParser):
    """Rows (cell texts) of every <table id=...>, and every link's href, of one page."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.links: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id"):
            self._table = attrs["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def stats_rows(page: str) -> dict[str, dict[str, str]]:
    header, *rows = Tables(page).tables["stats"]
    return {row[0]: dict(zip(header, row)) for row in rows}


def test_plugin_is_listed_with_its_app_and_its_navigation_entry(http, bearer):
    resp = http.get("/api/v2/plugins", headers=bearer)
    assert resp.status_code == 200, resp.text
    plugins = {p["name"]: p for p in resp.json()["plugins"]}
    assert "aldebaran_deliveries" in plugins, (
        "the running Airflow has not loaded plugins/aldebaran_deliveries.py: the api-server loads plugins when it "
        "starts; restart it with `aldebaran services down airflow && aldebaran services up airflow`"
    )
    plugin = plugins["aldebaran_deliveries"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/aldebaran"]
    [view] = plugin["external_views"]
    assert (view["href"], view["url_route"], view["destination"]) == ("aldebaran/deliveries/", "aldebaran-deliveries", "nav")


def test_without_valid_credentials_access_is_refused(http):
    assert http.get(STATS).status_code == 401
    assert http.get(PAGE).status_code == 401
    assert http.get(STATS, headers={"Authorization": "Bearer not-a-jwt"}).status_code == 403
    assert http.get(PAGE, cookies={"_token": "not-a-jwt"}).status_code == 403

    browser = http.get(PAGE, headers={"Accept": "text/html"})
    assert browser.status_code == 307
    login = urlsplit(browser.headers["location"])
    assert login.path == "/auth/login"
    assert parse_qs(login.query)["next"] == [f"{AIRFLOW}{PAGE}"]


def test_page_shows_the_stats_of_the_tests_ledger(http, bearer, ledger):
    resp = http.get(PAGE, params={"ledger": ledger.prefix}, headers=bearer)

    assert resp.status_code == 200, resp.text
    rows = stats_rows(resp.text)
    assert set(rows) == {"webhook", "sms"}
    webhook, sms = rows["webhook"], rows["sms"]
    assert (webhook["retrying"], webhook["dead"], webhook["in doubt"]) == ("1", "1", "0")
    assert (sms["retrying"], sms["in doubt"], sms["dead"]) == ("0", "1", "0")
    assert HOSTILE_ORDER not in resp.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in resp.text


def test_the_ui_session_cookie_is_accepted(http, token, ledger):
    resp = http.get(PAGE, params={"ledger": ledger.prefix}, cookies={"_token": token})
    assert resp.status_code == 200
    assert "Signed in to Airflow as admin." in resp.text


def test_detail_page_linked_from_the_overview_shows_the_record_state(http, bearer, ledger, unique):
    overview = http.get(PAGE, params={"ledger": ledger.prefix}, headers=bearer)
    [link] = {h for h in Tables(overview.text).links if h.startswith(f"sms/{unique}-maybe?")}  # in doubt + latest
    url = urljoin(str(overview.url), link)

    resp = http.get(url, headers=bearer)

    assert resp.status_code == 200, resp.text
    tables = Tables(resp.text).tables
    record = {row[0]: row[1] for row in tables["record"]}
    assert record["state"] == "IN_DOUBT"
    assert record["error"] == "outcome unknown: timeout after the provider accepted"
    assert [row[1] for row in tables["history"][1:]] == ["CLAIMED", "IN_DOUBT"]
    alert = {row[0]: row[1] for row in tables["alert"]}
    assert alert["alert_id"] == f"{unique}-maybe" and alert["order_id"] == HOSTILE_ORDER  # text, once unescaped
    assert HOSTILE_ORDER not in resp.text


def test_stats_endpoint_returns_the_same_figures(http, bearer, ledger):
    resp = http.get(STATS, params={"ledger": ledger.prefix}, headers=bearer)

    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["ledger"] == ledger.prefix
    channels = {c["channel"]: c for c in body["channels"]}
    assert {k: channels["webhook"][k] for k in ("retrying", "dead", "in_doubt")} == {"retrying": 1, "dead": 1, "in_doubt": 0}
    assert {k: channels["sms"][k] for k in ("retrying", "dead", "in_doubt")} == {"retrying": 0, "dead": 0, "in_doubt": 1}


def test_a_prefix_outside_the_delivery_ledgers_is_refused(http, bearer, s3_prefix):
    for prefix in (s3_prefix, f"{s3_prefix}/../deliveries", "checkpoints/auditor"):
        assert http.get(STATS, params={"ledger": prefix}, headers=bearer).status_code == 400, prefix
