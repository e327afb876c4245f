"""What the API's routes and the dashboard's pages both use: the state the
lifespan puts on `app.state.chit`, authentication, store calls off the event
loop, and a job's status as the API shows it. Neither router imports the
other; `chit.api.app` is the only module that knows both."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from fastapi import Depends
from fastapi.security import HTTPBearer
from starlette.requests import Request
from starlette.responses import Response

from chit.api.auth import Authenticator, Principal, require_every_tenant, require_scope
from chit.api.events import EventHub
from chit.api.schemas.jobs import JobStatus
from chit.api.tokens import EventTokens
from chit.errors import JobNotFound
from chit.ids import is_job_id
from chit.jobs import Job
from chit.queue import Queue
from chit.settings import Settings
from chit.store import FullStore

T = TypeVar("T")


@dataclass
class ApiState:
    queue: Queue
    settings: Settings
    store: FullStore
    auth: Authenticator
    hub: EventHub
    tokens: EventTokens


def api_state(request: Request) -> ApiState:
    state: ApiState | None = getattr(request.app.state, "chit", None)
    if state is None:
        raise RuntimeError(
            "chit's API state is missing: build the app with chit.api.create_app(queue), "
            "or include chit.api.create_router(queue) so that its lifespan runs"
        )
    return state


async def blocking(fn: Callable[..., T], *args: Any) -> T:
    """Run a store call on a worker thread, off the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


async def authenticate(request: Request, header: str | None) -> Principal:
    """Who sends this Authorization header; the table is asked only on a cache miss."""
    auth = api_state(request).auth
    principal = auth.cached(header)
    if principal is None:
        principal = await blocking(auth.authenticate, header)
    return principal


async def load_job(request: Request, job_id: str, principal: Principal) -> Job:
    """The job, if the caller's tenant may see it; JobNotFound otherwise."""
    if not is_job_id(job_id):
        raise JobNotFound(job_id[:100])
    job = await blocking(api_state(request).store.get, job_id, principal.tenant)
    if job is None:
        raise JobNotFound(job_id)
    return job


def job_status(request: Request, job: Job, traceback: bool) -> JobStatus:
    """`traceback`: the error whole (its paths and code are the server's: for
    admin keys and the dashboard); otherwise its first line only."""
    url = request.url_for("get_job_result", job_id=job.id).path if job.result_external else ""
    return JobStatus.of(job, url, traceback)


def render_status(request: Request, job: Job, traceback: bool) -> str:
    return job_status(request, job, traceback).model_dump_json()


bearer = HTTPBearer(
    auto_error=False,
    description="An API key from CHIT_API_KEYS or `chit keys create`",
)


def caller(scope: str, every_tenant: bool = False) -> Callable[..., Any]:
    async def authenticated(request: Request, _: Annotated[Any, Depends(bearer)]) -> Principal:
        principal = await authenticate(request, request.headers.get("authorization"))
        require_scope(principal, scope)
        if every_tenant:
            require_every_tenant(principal)
        return principal

    return authenticated


Submitter = Annotated[Principal, Depends(caller("submit"))]
Reader = Annotated[Principal, Depends(caller("read"))]
Admin = Annotated[Principal, Depends(caller("admin"))]
# Limits and pauses hold for every tenant: only a key of every tenant sets them.
Operator = Annotated[Principal, Depends(caller("admin", every_tenant=True))]


# One Server-Sent Event, as OpenAPI 3.2's `itemSchema` describes each item of a
# stream; `data` is a job status as JSON (for `gone` and `error`, a message).
# No `schema` for the whole stream: generated clients then hand back the text
# (with an object schema, openapi-python-client parsed the stream as JSON).
SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"enum": ["state", "progress", "gone", "error"]},
        "id": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "retry": {"type": "integer"},
    },
    "required": ["event", "data"],
}


async def answer_job(
    request: Request, job_id: str, principal: Principal, status: int = 200
) -> Response:
    job = await load_job(request, job_id, principal)
    body = render_status(request, job, shows_traceback(principal))
    return Response(body, status_code=status, media_type="application/json")


def shows_traceback(principal: Principal) -> bool:
    # A traceback shows the server's paths and code: for admin keys only.
    return principal.allows("admin")
