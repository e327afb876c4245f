"""The dashboard's pages: plain HTML rendered by Jinja2, a stylesheet and a small
script served from the package (nothing is fetched from elsewhere).

Every page reads the store through the methods that keep it fast at millions
of jobs (`count_jobs`, `finished_per_minute`, `oldest_queued`, `stale_jobs`,
`list`, `search`, `failures`), scoped to the signed-in key's tenant; limits
and pauses are global, and what of them a session sees is in `flow.py`. Every
form posts a CSRF token (see `session.py`); actions answer with a redirect to
a page that says what happened.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.parse
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute

from chit import bounds
from chit.api.auth import Principal, hash_key
from chit.api.deps import ApiState, api_state, blocking
from chit.api.deps import authenticate as authenticate_header
from chit.api.errors import ApiProblem, to_problem
from chit.api.schemas.schedules import ScheduleRun
from chit.dashboard import chart, flow, graph, session
from chit.dashboard.session import Session
from chit.encoding import one_line
from chit.ids import is_job_id
from chit.jobs import (
    Job,
    JobFilter,
    KindLastHour,
    State,
    StateKindCount,
    last_hour_by_kind,
)
from chit.limits import Paused
from chit.schedules import StoredSchedule
from chit.store.capabilities import NewSession

log = logging.getLogger("chit.dashboard")

# Counts stop here: "10,000+" is as useful at a glance as an exact million, and
# capping keeps the overview's cost bounded whatever the table's size.
COUNT_CAP = 10_000
PAGE_SIZE = bounds.PAGE_SIZE
STALE_SHOWN = 20
MAX_FORM_BYTES = 16 * 1024
STATIC_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".ico": "image/x-icon",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Redirect(Exception):
    """Leave this page for another (the login page, above all)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


class PageRoute(APIRoute):
    """Answers every failure as a page a person can read (or a redirect to log in)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                response = await handler(request)
            except Redirect as r:
                response = RedirectResponse(r.url, status_code=303)
            except Exception as exc:  # a StoreError too: its message names no database
                error = to_problem(exc)
                if error is None:
                    log.exception("%s %s failed", request.method, request.url.path)
                    error = ApiProblem(500, "internal_error", "Internal error: see the server log.")
                response = _error_page(request, error.status, error.message)
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            return response

        return guarded


router = APIRouter(route_class=PageRoute, include_in_schema=False)


# Templates and static files


@cache
def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("chit.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["count"] = lambda n: f"{n:,}"
    env.filters["ago"] = ago
    env.filters["when"] = lambda t: "" if t is None else t.strftime("%Y-%m-%d %H:%M:%S UTC")
    env.filters["iso"] = lambda t: "" if t is None else t.isoformat()
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False)
    env.filters["brief"] = lambda v: one_line(v, 80)
    env.filters["first_line"] = lambda s: (s or "").split("\n", 1)[0]
    env.filters["duration"] = duration
    env.filters["percent"] = lambda r: "\u2013" if r is None else f"{100 * r:.1f} %"
    return env


@cache
def static_file(name: str) -> bytes | None:
    folder = resources.files("chit.dashboard").joinpath("static")
    entry = folder.joinpath(name)
    return entry.read_bytes() if entry.is_file() else None


def render(
    request: Request, template: str, current: Session | None, status: int = 200, **values: Any
) -> HTMLResponse:
    def url(route: str, query: Mapping[str, Any] | None = None, /, **params: Any) -> str:
        path = request.url_for(route, **params).path
        pairs = {k: v for k, v in (query or {}).items() if v not in (None, "")}
        return f"{path}?{urllib.parse.urlencode(pairs)}" if pairs else path

    html = (
        templates()
        .get_template(template)
        .render(request=request, session=current, url=url, now=datetime.now(UTC), **values)
    )
    return HTMLResponse(html, status_code=status)


def _error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return render(request, "error.html", None, status=status, status_code=status, message=message)


@router.get("/static/{name}", name="ui_static")
async def static(name: str) -> Response:
    body = static_file(name) if "/" not in name and not name.startswith(".") else None
    suffix = name[name.rfind(".") :] if "." in name else ""
    if body is None or suffix not in STATIC_TYPES:
        raise ApiProblem(404, "not_found", f"no such file: {name[:100]}")
    return Response(body, media_type=STATIC_TYPES[suffix], headers={"Cache-Control": "max-age=300"})


# Signing in and out


async def current_session(request: Request, *, required: bool = True) -> Session | None:
    """The signed-in session, or a redirect to the login page (None if not required)."""
    cookie = request.cookies.get(session.SESSION_COOKIE)
    if cookie is None:
        if required:
            raise Redirect(_login_url(request))
        return None
    principal = await blocking(_resume, api_state(request), cookie)
    if principal is None:
        if required:
            raise Redirect(_login_url(request, "expired"))
        return None
    if not principal.allows("read"):
        raise Redirect(_login_url(request, "scope"))
    return Session(principal, session.csrf_token(cookie))


def _resume(state: ApiState, cookie: str) -> Principal | None:
    """Who holds this cookie: its session, if live (which a request keeps
    alive), and the session's key, if it still authenticates."""
    stored = state.store.touch_session(
        session.session_hash(cookie), state.settings.session_idle_seconds
    )
    if stored is None:
        return None
    try:
        return state.auth.authenticate_digest(stored.key_hash)
    except ApiProblem:
        return None


async def authenticate(request: Request, key: str) -> Principal:
    return await authenticate_header(request, f"Bearer {key}" if key else None)


def _login_url(request: Request, reason: str | None = None) -> str:
    target = request.url.path
    if request.method != "GET":
        target = request.url_for("ui_overview").path
    elif request.url.query:
        target += "?" + request.url.query
    pairs = {k: v for k, v in {"next": target, "reason": reason}.items() if v}
    return f"{request.url_for('ui_login').path}?{urllib.parse.urlencode(pairs)}"


LOGIN_REASONS = {
    "expired": "Your session ended (it expired, you signed out, or its key was revoked). "
    "Sign in again.",
    "scope": "That key has no read scope: the dashboard needs a read or admin key.",
    "signed_out": "Signed out.",
}


@router.get("/login", name="ui_login")
async def login_page(request: Request, next: str = "", reason: str = "") -> Response:
    nonce = request.cookies.get(session.LOGIN_COOKIE) or session.new_session_id()
    is_open = await blocking(api_state(request).auth.is_open)
    response = render(
        request,
        "login.html",
        None,
        next=_safe_next(request, next),
        login_token=session.login_token(nonce),
        message=LOGIN_REASONS.get(reason, ""),
        error="",
        is_open=is_open and api_state(request).auth.allow_open,
    )
    session.set_cookie(response, request, session.LOGIN_COOKIE, nonce, session.LOGIN_SECONDS)
    return response


@router.post("/login", name="ui_login_post")
async def login(request: Request) -> Response:
    form = await read_form(request)
    nonce = request.cookies.get(session.LOGIN_COOKIE)
    if nonce is None or not session.token_matches(
        session.login_token(nonce), form.get("login_token")
    ):
        raise ApiProblem(
            403,
            "forbidden",
            "This sign-in form was not sent from this dashboard (or it expired): "
            "reload the sign-in page and try again.",
        )
    key = form.get("key", "").strip()
    error = ""
    try:
        principal = await authenticate(request, key)
    except ApiProblem as e:
        principal, error = None, e.message
    if principal is not None and not principal.allows("read"):
        principal, error = None, LOGIN_REASONS["scope"]
    target = _safe_next(request, form.get("next", ""))
    if principal is None:
        if not key:
            error = "Type an API key with the read or admin scope."
        is_open = await blocking(api_state(request).auth.is_open)
        return render(
            request,
            "login.html",
            None,
            status=401,
            next=target,
            login_token=session.login_token(nonce),
            message="",
            error=error,
            is_open=is_open and api_state(request).auth.allow_open,
        )
    settings = api_state(request).settings
    cookie = session.new_session_id()
    signed_in = NewSession(
        id_hash=session.session_hash(cookie),
        key_hash=hash_key(key),
        idle_seconds=settings.session_idle_seconds,
        max_seconds=settings.session_max_seconds,
    )
    await blocking(api_state(request).store.create_session, signed_in)
    response = RedirectResponse(target, status_code=303)
    session.set_cookie(
        response, request, session.SESSION_COOKIE, cookie, int(settings.session_max_seconds)
    )
    session.clear_cookie(response, request, session.LOGIN_COOKIE)
    return response


@router.post("/logout", name="ui_logout")
async def logout(request: Request) -> Response:
    await checked_form(request)
    cookie = request.cookies[session.SESSION_COOKIE]  # checked_form found its session
    await blocking(api_state(request).store.delete_session, session.session_hash(cookie))
    response = RedirectResponse(
        f"{request.url_for('ui_login').path}?reason=signed_out", status_code=303
    )
    session.clear_cookie(response, request, session.SESSION_COOKIE)
    return response


def _safe_next(request: Request, target: str) -> str:
    """Only a path inside the dashboard: never another site (an open redirect)."""
    home = request.url_for("ui_overview").path
    parsed = urllib.parse.urlsplit(target)
    if parsed.scheme or parsed.netloc or not parsed.path.startswith(home.rstrip("/")):
        return home
    if "\\" in target or target.startswith("//"):
        return home
    return target


async def read_form(request: Request, limit: int = MAX_FORM_BYTES) -> dict[str, str]:
    """An urlencoded form, as the dashboard's pages send it."""
    if request.headers.get("content-type", "").split(";")[0].strip() != (
        "application/x-www-form-urlencoded"
    ):
        raise ApiProblem(415, "unsupported_media_type", "Send this form from the dashboard's page.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiProblem(413, "body_too_large", "This form is too large.")
    try:
        pairs = urllib.parse.parse_qsl(body.decode(), keep_blank_values=True)
    except (UnicodeDecodeError, ValueError):
        raise ApiProblem(400, "bad_request", "This form could not be read.") from None
    return dict(pairs)


async def checked_form(
    request: Request, *, admin: bool = False, limit: int = MAX_FORM_BYTES
) -> tuple[Session, dict[str, str]]:
    """The session and form of a POST that the dashboard itself sent; anything
    else (no session, a missing or wrong token, another site) is refused."""
    current = await current_session(request, required=False)
    if current is None:
        raise ApiProblem(403, "forbidden", "Sign in to the dashboard first.")
    form = await read_form(request, limit)
    if not session.same_origin(request) or not session.token_matches(
        current.csrf_token, form.get("csrf_token")
    ):
        raise ApiProblem(
            403,
            "forbidden",
            "This form was not sent from this dashboard's page (its security token is "
            "missing or wrong). Reload the page and try again.",
        )
    if admin and not current.can_act:
        raise ApiProblem(
            403,
            "forbidden",
            "This key is read-only: retry, cancel, edit and replay need an admin key.",
        )
    return current, form


# Overview


@dataclass(frozen=True, slots=True)
class Cell:
    count: int
    capped: bool

    def __str__(self) -> str:
        return f"{self.count:,}+" if self.capped else f"{self.count:,}"


@dataclass
class Overview:
    states: dict[str, Cell]
    kinds: dict[str, dict[str, Cell]]
    last_hour: dict[str, KindLastHour]
    chart: chart.Chart
    oldest: Job | None
    stale: list[Job]
    limits: list[flow.LimitRow]
    paused_queues: list[Paused]
    paused_kinds: set[str]


def _overview(request: Request, tenant: str | None) -> Overview:
    store = api_state(request).store
    counts = store.count_jobs(tenant, COUNT_CAP)
    minutes = store.finished_per_minute(tenant)
    now = datetime.now(UTC)
    pauses = store.pauses()
    return Overview(
        states=_totals(counts),
        kinds=_by_kind(counts),
        last_hour={k.kind: k for k in last_hour_by_kind(minutes)},
        chart=chart.draw(minutes, now),
        oldest=store.oldest_queued(tenant),
        stale=store.stale_jobs(tenant, STALE_SHOWN + 1),
        limits=flow.limit_rows(store.limits(now), pauses, every_tenant=tenant is None),
        paused_queues=[p for p in pauses if p.queue is not None],
        paused_kinds={p.kind for p in pauses if p.kind is not None},
    )


def _totals(counts: list[StateKindCount]) -> dict[str, Cell]:
    totals = {s.value: Cell(0, False) for s in State}
    for c in counts:
        t = totals[c.state.value]
        totals[c.state.value] = Cell(t.count + c.count, t.capped or c.capped)
    return totals


def _by_kind(counts: list[StateKindCount]) -> dict[str, dict[str, Cell]]:
    kinds: dict[str, dict[str, Cell]] = {}
    for c in counts:
        kinds.setdefault(c.kind, {})[c.state.value] = Cell(c.count, c.capped)
    return dict(sorted(kinds.items()))


@router.get("/", name="ui_overview")
async def overview(request: Request) -> Response:
    current = await current_session(request)
    assert current is not None
    data = await blocking(_overview, request, current.principal.tenant)
    return render(
        request,
        "overview.html",
        current,
        page="overview",
        data=data,
        states=[s.value for s in State],
        stale_shown=STALE_SHOWN,
        count_cap=COUNT_CAP,
    )


# Jobs


@router.get("/jobs", name="ui_jobs")
async def jobs(
    request: Request,
    state: str = "",
    kind: str = "",
    queue: str = "",
    q: str = "",
    cursor: str = "",
) -> Response:
    current = await current_session(request)
    assert current is not None
    store = api_state(request).store
    tenant = current.principal.tenant
    chosen = State(state) if state in {s.value for s in State} else None
    _no_nul(kind, queue, q, cursor)
    kind, queue = kind.strip()[: bounds.NAME_MAX], queue.strip()[: bounds.NAME_MAX]
    q = q.strip()[:300]
    next_cursor = None
    if q:
        found = await blocking(store.search, q, tenant, PAGE_SIZE)
        rows = [
            j
            for j in found
            if (chosen is None or j.state is chosen)
            and (not kind or j.kind == kind)
            and (not queue or j.queue == queue)
        ]
    else:
        where = JobFilter(state=chosen, kind=kind or None, queue=queue or None, tenant=tenant)
        page = await blocking(store.list, where, PAGE_SIZE, cursor if is_job_id(cursor) else None)
        rows, next_cursor = page.jobs, page.next_cursor
    filters = {"state": chosen.value if chosen else "", "kind": kind, "queue": queue, "q": q}
    return render(
        request,
        "jobs.html",
        current,
        page="jobs",
        jobs=rows,
        filters=filters,
        next_cursor=next_cursor,
        paged=bool(cursor),
        states=[s.value for s in State],
        kinds=sorted(api_state(request).queue.tasks),
    )


# Workflows


@router.get("/workflows/{workflow_id}", name="ui_workflow")
async def workflow_page(request: Request, workflow_id: str) -> Response:
    current = await current_session(request)
    assert current is not None
    store = api_state(request).store
    view = None
    if len(workflow_id) <= 100:
        view = await blocking(store.workflow, workflow_id, current.principal.tenant)
    if view is None:
        raise ApiProblem(404, "workflow_not_found", f"No workflow {workflow_id[:100]!r} here.")
    states: dict[str, int] = {}
    for j in view.jobs:
        states[j.state.value] = states.get(j.state.value, 0) + 1
    job_href = str(request.url_for("ui_job", job_id="x").path)[:-1]
    return render(
        request,
        "workflow.html",
        current,
        page="jobs",
        view=view,
        states=states,
        names={j.id: j.ref for j in view.jobs if j.ref},
        graph=graph.svg(view.jobs, job_href),
        grouped=len(view.jobs) > graph.NODE_LIMIT,
    )


# Failures


@router.get("/failures", name="ui_failures")
async def failures(request: Request, replayed: str = "", kind: str = "") -> Response:
    current = await current_session(request)
    assert current is not None
    store = api_state(request).store
    groups = await blocking(store.failures, current.principal.tenant)
    minutes = await blocking(store.finished_per_minute, current.principal.tenant)
    notice = ""
    if replayed.isdigit():
        n = int(replayed)
        notice = f"Replayed {n:,} job{'' if n == 1 else 's'}" + (
            f" of kind {kind}." if kind else "."
        )
    return render(
        request,
        "failures.html",
        current,
        page="failures",
        groups=groups,
        last_hour=[k for k in last_hour_by_kind(minutes) if k.failed],
        notice=notice,
    )


@router.get("/failures/replay", name="ui_replay_confirm")
async def replay_confirm(request: Request, kind: str = "", error: str = "") -> Response:
    current = await current_session(request)
    assert current is not None
    groups = await blocking(api_state(request).store.failures, current.principal.tenant)
    group = next((g for g in groups if g.kind == kind and g.error == error), None)
    return render(
        request, "replay.html", current, page="failures", kind=kind, error=error, group=group
    )


@router.post("/failures/replay", name="ui_replay")
async def replay(request: Request) -> Response:
    current, form = await checked_form(request, admin=True)
    kind, error = form.get("kind", ""), form.get("error", "")
    _no_nul(kind, error)
    if not kind:
        raise ApiProblem(422, "invalid_request", "Say which group to replay.")
    count = await blocking(
        api_state(request).store.replay_failure_group, kind, error, current.principal.tenant
    )
    query = urllib.parse.urlencode({"replayed": count, "kind": kind})
    return RedirectResponse(f"{request.url_for('ui_failures').path}?{query}", status_code=303)


def _no_nul(*values: str) -> None:
    # PostgreSQL's text cannot hold NUL: refused alike on both backends.
    if any("\x00" in v for v in values):
        raise ApiProblem(422, "invalid_request", "A filter cannot hold a NUL character.")


# Formatting


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return ""
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    text = duration(abs(seconds))
    return f"in {text}" if seconds < 0 else f"{text} ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes = math.floor(seconds / 60)
    if minutes < 60:
        return f"{minutes} min {int(seconds % 60)} s"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} days"


# Schedules (DESIGN.md, "Time"): global, like limits, so only a key of every
# tenant sees them.

SCHEDULE_RUNS = 5


@router.get("/schedules", name="ui_schedules")
async def schedules_page(request: Request) -> Response:
    current = await current_session(request)
    assert current is not None
    every_tenant = current.principal.tenant is None
    rows: list[tuple[StoredSchedule, list[ScheduleRun]]] = []
    if every_tenant:
        store = api_state(request).store

        def read() -> list[tuple[StoredSchedule, list[ScheduleRun]]]:
            return [
                (s, ScheduleRun.recent(store.schedule_runs, s, SCHEDULE_RUNS))
                for s in store.list_schedules()
            ]

        rows = await blocking(read)
    return render(
        request,
        "schedules.html",
        current,
        page="schedules",
        schedules=rows,
        every_tenant=every_tenant,
    )
