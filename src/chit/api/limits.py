"""Flow control over HTTP: limits and pauses, global (DESIGN.md, "Flow
control"). Only a key of every tenant sets them (`Operator`)."""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.convertors import Convertor, register_url_convertor

from chit import bounds
from chit.api.body import read_body
from chit.api.deps import Operator, api_state, blocking
from chit.api.errors import ApiProblem, ChitRoute, documented
from chit.api.schemas.limits import Cleared, KindPause, LimitOut, LimitsOut, QueuePause, SetLimits

router = APIRouter(
    route_class=ChitRoute,
    generate_unique_id_function=lambda route: route.name,
    tags=["flow control"],
)


class _Name(Convertor[str]):
    """A kind or queue name in a path, whatever it holds: a "/" (sent as %2F,
    which the server decodes before routing) or a newline (where Starlette's
    `path` stops)."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("name", _Name())

KindPath = Annotated[str, Path(min_length=1, max_length=bounds.NAME_MAX, description="a task kind")]
QueuePath = Annotated[
    str, Path(min_length=1, max_length=bounds.NAME_MAX, description="a queue name")
]


_LIMITS_BODY = {
    "required": True,
    "content": {"application/json": {"schema": SetLimits.model_json_schema()}},
}


@router.get(
    "/limits",
    response_model=LimitsOut,
    summary="Every kind's limits with its running and waiting jobs, and what is paused",
    responses=documented(),
)
async def get_limits(request: Request, principal: Operator) -> LimitsOut:
    store = api_state(request).store
    return LimitsOut.of(await blocking(store.limits), await blocking(store.pauses))


@router.put(
    "/limits/{kind:name}",
    response_model=LimitOut,
    summary="Override a kind's limits (the fields given; the others stay) until cleared",
    responses=documented(400, 413, 415),
    openapi_extra={"requestBody": _LIMITS_BODY},
)
async def set_limits(request: Request, kind: KindPath, principal: Operator) -> LimitOut:
    state = api_state(request)
    _storable(kind, "kind")
    body = await read_body(request, SetLimits)
    limits = body.checked()
    if not limits:
        raise ApiProblem(
            422,
            "invalid_limits",
            "say which limits to set: any of concurrency, rate, key_concurrency and key_rate "
            '(e.g. {"concurrency": 3, "rate": "10/s"}); to drop an override, DELETE /limits/KIND',
        )
    return LimitOut.of(await blocking(state.store.set_limits, kind, limits))


@router.delete(
    "/limits/{kind:name}",
    response_model=Cleared,
    summary="Drop the operator's override of a kind: the code's limits apply again",
    responses=documented(),
)
async def clear_limits(request: Request, kind: KindPath, principal: Operator) -> Cleared:
    _storable(kind, "kind")
    cleared = await blocking(api_state(request).store.clear_limits, kind)
    return Cleared(kind=kind, cleared=cleared)


@router.post(
    "/queues/{queue:name}/pause",
    response_model=QueuePause,
    summary="Claim no job of a queue until resumed; running jobs finish",
    responses=documented(),
)
async def pause_queue(request: Request, queue: QueuePath, principal: Operator) -> QueuePause:
    _storable(queue, "queue")
    changed = await blocking(functools.partial(api_state(request).store.pause, queue=queue))
    return QueuePause(queue=queue, paused=True, changed=changed)


@router.post(
    "/queues/{queue:name}/resume",
    response_model=QueuePause,
    summary="Claim a paused queue's jobs again",
    responses=documented(),
)
async def resume_queue(request: Request, queue: QueuePath, principal: Operator) -> QueuePause:
    _storable(queue, "queue")
    changed = await blocking(functools.partial(api_state(request).store.resume, queue=queue))
    return QueuePause(queue=queue, paused=False, changed=changed)


@router.post(
    "/kinds/{kind:name}/pause",
    response_model=KindPause,
    summary="Claim no job of a kind, in any queue, until resumed; running jobs finish",
    responses=documented(),
)
async def pause_kind(request: Request, kind: KindPath, principal: Operator) -> KindPause:
    _storable(kind, "kind")
    changed = await blocking(functools.partial(api_state(request).store.pause, kind=kind))
    return KindPause(kind=kind, paused=True, changed=changed)


@router.post(
    "/kinds/{kind:name}/resume",
    response_model=KindPause,
    summary="Claim a paused kind's jobs again",
    responses=documented(),
)
async def resume_kind(request: Request, kind: KindPath, principal: Operator) -> KindPause:
    _storable(kind, "kind")
    changed = await blocking(functools.partial(api_state(request).store.resume, kind=kind))
    return KindPause(kind=kind, paused=False, changed=changed)


def _storable(name: str, what: str) -> None:
    # PostgreSQL's text cannot hold NUL; the length is checked with the path.
    if "\x00" in name:
        raise ApiProblem(422, "invalid_request", f"a {what} name cannot hold a NUL character")
