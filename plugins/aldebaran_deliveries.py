"""Airflow 3 plugin: the delivery ledger as a page in the Airflow UI (Browse → Deliveries).

Routes, mounted by the api-server under ``/aldebaran`` (``fastapi_apps``):

    GET /aldebaran/deliveries/                      per-channel stats, the records that need attention
                                                    (IN_DOUBT, DEAD, retrying: from the ledger's index)
                                                    and the latest records, each linking to its detail page
    GET /aldebaran/deliveries/<channel>/<alert_id>  one record: its state, history, alert and raw JSON
    GET /aldebaran/deliveries/explain?alert_id=<id>  one alert's story, as `aldebaran explain` prints it:
                                                    the alert, the trades that built its book (topic,
                                                    partition, offset, event id, shares), the trigger,
                                                    every channel's delivery state with its history
    GET /aldebaran/api/deliveries/stats             the per-channel stats as JSON

Query parameters: ``limit`` (records per list, 1-200, default 20) and ``ledger``, the ledger prefix
(default: the dispatcher's, ``deliveries``). ``ledger`` may only name another delivery ledger in the
same bucket: at most four safe key segments ending in ``deliveries`` (``tests/<id>/deliveries``), so
the page cannot be pointed at checkpoints, the archive or anything else in the bucket.

Authentication: Airflow does not authenticate plugin apps (a Starlette mount inherits none of the
core API's dependencies), so every route depends on Airflow's own ``get_user``: the JWT from an
``Authorization: Bearer`` header (``POST /auth/token``) or the UI's ``_token`` cookie, validated by the
configured auth manager, which must then allow GET on the custom view ``AldebaranDeliveries``
(``is_authorized_custom_view``; the simple auth manager allows every role from VIEWER up). Missing
credentials get 401, or a redirect to the login page for a browser; invalid ones or no permission, 403.

Nothing happens at import: every Airflow process imports plugins (each task run, for macros), so this
module imports only ``airflow.plugins_manager``. The FastAPI app is built on the api-server's first
request; Airflow's security module, FastAPI and the S3 ledger (boto3) are imported only then. What a page
reads from the ledger and its HTML are the product's (:mod:`aldebaran.delivery.pages`); this module
declares the routes and wires them to Airflow's authentication.
"""

# No `from __future__ import annotations`: FastAPI evaluates the route signatures, whose annotations
# refer to names imported inside create_app().
import functools
import logging

from airflow.plugins_manager import AirflowPlugin

log = logging.getLogger(__name__)

URL_PREFIX = "/aldebaran"
RESOURCE = "AldebaranDeliveries"  # the custom view the auth manager authorizes
LEDGER_LEAF = "deliveries"  # every delivery ledger prefix ends with this segment
MAX_LEDGER_DEPTH = 4
# No script may run on these pages, whatever a record contains; they may only be framed by Airflow's UI.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'self'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}


# --- request inputs ------------------------------------------------------------------------------
def ledger_prefix(value: str | None, default: str) -> str:
    """The ledger prefix a request asks for, validated: `default`, or `<segment>/.../deliveries`."""
    from aldebaran.storage.store import safe_segment

    if value is None or value == default:
        return default
    parts = value.split("/")
    if len(parts) > MAX_LEDGER_DEPTH or parts[-1] != LEDGER_LEAF:
        raise ValueError(
            f"ledger prefix must be at most {MAX_LEDGER_DEPTH} segments ending in {LEDGER_LEAF!r}: {value!r}"
        )
    for part in parts:
        safe_segment(part, "ledger prefix segment")
    return value


@functools.cache
def _store():
    from aldebaran.delivery.settings import DeliverySettings
    from aldebaran.settings import load
    from aldebaran.storage.store import open_store

    return open_store(load(DeliverySettings).store)


def ledger_backend():
    """FastAPI dependency: the ledger's storage (ALDEBARAN_DELIVERY_STORE, default the S3/MinIO bucket of
    ALDEBARAN_S3_*). Tests override it."""
    return _store()


def open_ledger(backend, prefix: str | None):
    from aldebaran.delivery.dispatcher import default_ledger
    from aldebaran.delivery.ledger import Ledger

    base = default_ledger(backend)  # the dispatcher's prefix, lease and retry policy
    chosen = ledger_prefix(prefix, base.prefix)
    if chosen == base.prefix:
        return base
    return Ledger(backend, prefix=chosen, lease_seconds=base.lease_seconds, policy=base.policy)


# --- the FastAPI app -----------------------------------------------------------------------------
@functools.cache
def authorization():
    """The dependency every route has: Airflow's user from the request, allowed to read RESOURCE.

    `get_user` (airflow.api_fastapi.core_api.security) takes the JWT from `Authorization: Bearer`
    or else from the `_token` cookie the UI holds (JWTRefreshMiddleware, a root middleware, has
    already resolved the cookie for mounted apps too) and has the auth manager validate it:
    401 without credentials, 403 for an invalid token. Cached, so that tests can override it."""
    from typing import Annotated

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, HTTPException, status

    def authorized_user(user: Annotated[BaseUser, Depends(get_user)]) -> BaseUser:
        if not get_auth_manager().is_authorized_custom_view(method="GET", resource_name=RESOURCE, user=user):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"not allowed to read {RESOURCE}")
        return user

    return authorized_user


def create_app():
    """The plugin's FastAPI app: routes relative to its mount point (URL_PREFIX)."""
    from typing import Annotated

    from aldebaran.delivery import corrupt, pages
    from aldebaran.exceptions import ConfigError, LedgerCorrupt, ObjectStoreError
    from aldebaran.storage.store import safe_segment
    from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
    from fastapi.exception_handlers import http_exception_handler
    from fastapi.responses import HTMLResponse, RedirectResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    # No /docs or /openapi.json: they would be served without authentication.
    app = FastAPI(title="Aldebaran deliveries", docs_url=None, redoc_url=None, openapi_url=None)
    User = Annotated[object, Depends(authorization())]
    Backend = Annotated[object, Depends(ledger_backend)]
    Limit = Annotated[int, Query(ge=1, le=pages.MAX_LIMIT, description="records per list")]
    LedgerPrefix = Annotated[str | None, Query(description="ledger prefix, ending in /deliveries")]

    def wants_html(request: Request) -> bool:
        """A browser asking for one of the pages (not the JSON API)."""
        root = request.scope.get("root_path", "")
        return request.url.path.startswith(f"{root}/deliveries/") and "text/html" in request.headers.get("accept", "")

    @app.exception_handler(StarletteHTTPException)
    async def login_or_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == status.HTTP_401_UNAUTHORIZED and wants_html(request):
            from airflow.api_fastapi.app import get_auth_manager

            login = get_auth_manager().get_url_login(next_url=str(request.url))
            return RedirectResponse(login, status.HTTP_307_TEMPORARY_REDIRECT)
        if wants_html(request):
            home = f"{request.scope.get('root_path', '')}/deliveries/"
            return HTMLResponse(pages.error_page(exc.status_code, str(exc.detail), home), exc.status_code,
                                headers={**SECURITY_HEADERS, **(exc.headers or {})})
        return await http_exception_handler(request, exc)

    @app.exception_handler(ObjectStoreError)
    @app.exception_handler(ConfigError)
    async def ledger_unavailable(request: Request, exc: Exception):
        # The object store is down or unconfigured (ALDEBARAN_S3_*): say so, with its location.
        log.warning("delivery ledger unavailable: %s", exc)
        return await login_or_error(request, HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                                           f"delivery ledger unavailable: {exc}"))

    @app.exception_handler(LedgerCorrupt)
    async def ledger_object_corrupt(request: Request, exc: LedgerCorrupt):
        # One record asked for by its key cannot be read (the lists skip such objects and name them):
        # say which and why; the dispatcher's sweep quarantines it, nothing here moves it.
        log.warning("deliveries page: corrupt ledger object %s: %s", exc.key, exc.reason)
        return await login_or_error(request, HTTPException(status.HTTP_409_CONFLICT,
                                                           f"corrupt ledger object {exc.key}: {exc.reason}"))

    def open_or_400(backend, prefix: str | None):
        try:
            return open_ledger(backend, prefix)
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None

    def checked_id(alert_id: str) -> None:
        try:
            safe_segment(alert_id, "alert id")
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None

    @app.get("/deliveries/", response_class=HTMLResponse)
    def deliveries_page(user: User, backend: Backend, ledger: LedgerPrefix = None, limit: Limit = pages.DEFAULT_LIMIT):
        book = open_or_400(backend, ledger)
        default = open_ledger(backend, None).prefix
        body = pages.render_overview(book, pages.overview(book, limit), default, limit, user.get_name(),
                                     corrupt.quarantined(book), pages.rejected(backend))
        return HTMLResponse(body, headers=SECURITY_HEADERS)

    @app.get("/deliveries/find", response_class=HTMLResponse)
    def find_page(alert_id: str, user: User, backend: Backend, ledger: LedgerPrefix = None,
                  limit: Limit = pages.DEFAULT_LIMIT):
        """Any alert by its id, on every channel, without listing the ledger (delivery/tools.find)."""
        from aldebaran.delivery.tools import find, locate_alert

        checked_id(alert_id)
        book = open_or_400(backend, ledger)
        channels = book.channels()
        records = {c: corrupt.record(book, c, alert_id, None, "deliveries page") for c in channels}
        # A key scan of the alerts topic only when some channel has no record of its own.
        position = None if all(records.values()) else locate_alert(alert_id, timeout=10.0)
        views = [find(book, c, alert_id, position) for c in channels]
        default = open_ledger(backend, None).prefix
        return HTMLResponse(pages.render_found(alert_id, views, book, default, limit, user.get_name()),
                            headers=SECURITY_HEADERS)

    @app.get("/deliveries/explain", response_class=HTMLResponse)
    def explain_page(alert_id: str, user: User, backend: Backend, ledger: LedgerPrefix = None,
                     limit: Limit = pages.DEFAULT_LIMIT):
        """`aldebaran explain` as a page: the one function that builds it (aldebaran.cli.explain.explain)."""
        from aldebaran.exceptions import AlertNotFound
        from aldebaran.cli.explain import explain

        checked_id(alert_id)
        book = open_or_400(backend, ledger)
        try:
            story = explain(alert_id, book, locate_timeout=10.0)
        except AlertNotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        default = open_ledger(backend, None).prefix
        return HTMLResponse(pages.render_explain(story, book, default, limit, user.get_name()), headers=SECURITY_HEADERS)

    @app.get("/deliveries/{channel}/{alert_id}", response_class=HTMLResponse)
    def delivery_page(channel: str, alert_id: str, user: User, backend: Backend, ledger: LedgerPrefix = None,
                      limit: Limit = pages.DEFAULT_LIMIT):
        try:
            safe_segment(channel, "channel")
            safe_segment(alert_id, "alert id")
        except ValueError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        book = open_or_400(backend, ledger)
        got = book.get(channel, alert_id)
        if got is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND,
                                f"no delivery record for {channel}/{alert_id} in {book.prefix}")
        default = open_ledger(backend, None).prefix
        body = pages.render_detail(got[0], book, default, limit, user.get_name())
        return HTMLResponse(body, headers=SECURITY_HEADERS)

    @app.get("/api/deliveries/stats")
    def deliveries_stats(user: User, backend: Backend, ledger: LedgerPrefix = None) -> dict:
        book = open_or_400(backend, ledger)
        rows = [book.stats(channel) for channel in book.channels()]
        return {"ledger": book.prefix, "store": book.store.uri(), "generated_at": book.clock(), "channels": rows,
                "quarantine": corrupt.quarantined(book), "alerts_dlq_rejected": pages.rejected(backend)}

    return app


class LazyApp:
    """An ASGI app that builds the real one (create_app) on its first request.

    Plugin modules are imported by every Airflow process, but only the api-server serves requests;
    Airflow's security module alone costs ~0.9 s and ~400 modules to import."""

    def __init__(self, factory) -> None:
        self.factory = factory
        self.app = None

    async def __call__(self, scope, receive, send) -> None:
        if self.app is None:
            self.app = self.factory()  # synchronous: no other request runs in between
        await self.app(scope, receive, send)


class AldebaranDeliveriesPlugin(AirflowPlugin):
    name = "aldebaran_deliveries"
    fastapi_apps = [{"app": LazyApp(create_app), "url_prefix": URL_PREFIX, "name": "Aldebaran deliveries"}]
    external_views = [
        {
            "name": "Deliveries",
            # Relative (no leading slash), resolved against the UI's base URL, so it works under a sub-path.
            "href": "aldebaran/deliveries/",
            # Rendered in an iframe at /plugin/aldebaran-deliveries; links inside it stay in the frame.
            "url_route": "aldebaran-deliveries",
            "destination": "nav",
            "category": "browse",
        }
    ]
