"""The FastAPI application: `create_app(queue)` for `chit serve`, and
`create_router(queue)` for applications that mount chit's routes on their own
app. Either way a lifespan opens the store, starts the event poller and puts
everything the routes need on `app.state.chit`; nothing lives in module globals.

The API server never runs jobs: workers are separate processes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware

from chit.api import (
    changes,
    health,
    limits,
    openapi,
    output,
    queues,
    reference,
    routes,
    schedules,
    signals,
    workflows,
)
from chit.api.auth import KEY_CACHE_SECONDS, Authenticator, parse_env_keys
from chit.api.deps import ApiState
from chit.api.errors import answer_exception
from chit.api.events import POLL_INTERVAL, EventHub
from chit.api.framing import RefuseAmbiguousLength
from chit.api.tokens import EventTokens
from chit.dashboard import job_page
from chit.dashboard import routes as dashboard_routes
from chit.queue import Queue
from chit.settings import Settings

DESCRIPTION = """Durable background jobs over HTTP.

`POST /jobs` answers `202` with a job id and `Location` at once; poll
`GET /jobs/{id}` (it says when with `Retry-After`) or listen to
`GET /jobs/{id}/events`. Send `Authorization: Bearer KEY` when keys are configured.
"""


# What a page on a CHIT_CORS_ORIGINS origin may send.
CORS_REQUEST_HEADERS = [
    "Authorization",
    "Content-Type",
    "Idempotency-Key",
    "If-None-Match",
    "Last-Event-ID",
]

# Where the dashboard lives under the API's own paths.
DASHBOARD_PREFIX = "/ui"


def lifespan(
    queue: Queue,
    *,
    settings: Settings | None = None,
    allow_open: bool = True,
    event_interval: float = POLL_INTERVAL,
    key_cache_seconds: float = KEY_CACHE_SECONDS,
) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """Opens (and migrates) the store, starts the event poller, sets `app.state.chit`.

    `settings` default to the queue's. `allow_open=False` refuses every request
    while no API key exists, instead of letting everyone in (`chit serve` sets it
    when listening beyond loopback)."""
    settings = settings or queue.settings
    env_keys = parse_env_keys(settings.api_keys)

    @asynccontextmanager
    async def run(app: Any) -> AsyncIterator[None]:
        store = await anyio.to_thread.run_sync(lambda: queue.store)
        state = ApiState(
            queue=queue,
            settings=settings,
            store=store,
            auth=Authenticator(store, env_keys, key_cache_seconds, allow_open=allow_open),
            hub=EventHub(store, event_interval),
            tokens=EventTokens(store, settings.events_token_seconds),
        )
        await state.hub.start()
        app.state.chit = state
        try:
            yield
        finally:
            await state.hub.stop()
            await store.aclose()  # aenqueue's pool on this loop; the store stays the queue's

    return run


# The API's routers, in the order their routes are matched.
ROUTERS = (
    routes.router,
    limits.router,
    health.router,
    changes.router,
    output.router,
    queues.router,
    workflows.router,
    schedules.router,
    signals.router,
)
DASHBOARD_ROUTERS = (dashboard_routes.router, job_page.router)


def create_router(queue: Queue, *, dashboard: bool = True, **options: Any) -> APIRouter:
    """chit's routes with their lifespan, to include in an application's own app:
    `app.include_router(create_router(queue), prefix="/chit")`. The dashboard
    comes along at `ui/` under that prefix unless `dashboard=False`."""
    router = APIRouter(lifespan=lifespan(queue, **options))
    for part in ROUTERS:
        router.include_router(part)
    if dashboard:
        _include_dashboard(router)
    return router


def create_app(queue: Queue, *, dashboard: bool = True, **options: Any) -> FastAPI:
    """The API as its own app (what `chit serve` runs), with the dashboard at
    `/ui` unless `dashboard=False`."""
    app = FastAPI(
        title="chit",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan(queue, **options),
        # Swagger UI and ReDoc load their code from a CDN: `/docs` is rendered here.
        docs_url=None,
        redoc_url=None,
    )
    for part in ROUTERS:
        app.include_router(part)
    # For 405's Allow (errors.allowed_methods).
    app.state.routers = [("", part) for part in ROUTERS]
    if dashboard:
        _include_dashboard(app)
        app.state.routers += [(DASHBOARD_PREFIX, part) for part in DASHBOARD_ROUTERS]
    _add_reference(app)
    # Routing's own 404/405 and anything unexpected answer JSON like the routes do.
    app.add_exception_handler(HTTPException, answer_exception)
    app.add_exception_handler(RequestValidationError, answer_exception)
    app.add_exception_handler(Exception, answer_exception)
    app.add_middleware(RefuseAmbiguousLength)
    origins = (options.get("settings") or queue.settings).cors_origins
    if origins:
        # Pages on these origins send the key in Authorization; no cookie goes
        # cross-origin (the dashboard's session stays its own origin's).
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(origins),
            allow_credentials=False,
            allow_methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=CORS_REQUEST_HEADERS,
            expose_headers=["Location", "Retry-After", "ETag"],
            max_age=600,
        )
    app.openapi = lambda: openapi.document(app, queue)  # type: ignore[method-assign]
    return app


def _add_reference(app: FastAPI) -> None:
    """`/docs` (the reference, no script, nothing loaded from elsewhere) and the
    icon browsers ask every server for."""

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(
            reference.render(app.openapi()),
            headers={"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"},
        )

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        icon = dashboard_routes.static_file("favicon.ico")
        return Response(icon, media_type="image/x-icon", headers={"Cache-Control": "max-age=86400"})


def _include_dashboard(target: FastAPI | APIRouter) -> None:
    for part in DASHBOARD_ROUTERS:
        target.include_router(part, prefix=DASHBOARD_PREFIX)
