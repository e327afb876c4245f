"""The schedule routes (DESIGN.md, "Time"; docs/schedules.md): `GET /schedules`,
`GET/PUT/DELETE /schedules/{name}`, `POST /schedules/{name}/pause|resume`.
Schedules are global, like limits: reading needs `read` and writing `admin`,
each from a key of every tenant. A PUT is checked by `Queue.check_schedule`,
as in code and the CLI: with the server's app, the kind must be one of its
tasks and the payload is checked against it; a bad one answers 422 and nothing
is stored."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request

from chit.api.auth import Principal
from chit.api.body import read_body
from chit.api.deps import Operator, api_state, blocking, caller
from chit.api.errors import ApiProblem, ChitRoute, documented
from chit.api.schemas.schedules import (
    PutSchedule,
    ScheduleOut,
    ScheduleRemoved,
    ScheduleRun,
    SchedulesOut,
)
from chit.schedules import NAME_MAX, NAME_PATTERN, StoredSchedule, check_name
from chit.store import FullStore

router = APIRouter(
    route_class=ChitRoute, generate_unique_id_function=lambda route: route.name, tags=["schedules"]
)

# Schedules hold for every tenant: only a key of every tenant reads them.
GlobalReader = Annotated[Principal, Depends(caller("read", every_tenant=True))]
# A name in a path: no "/" (so /schedules/x/pause is never PUT to a schedule).
SchedulePath = Annotated[
    str,
    Path(max_length=NAME_MAX, pattern=f"^{NAME_PATTERN}$", description="a schedule's name"),
]
# Recent runs GET /schedules/{name} answers.
RUNS = 20


def _put_schema() -> dict[str, Any]:
    """PutSchedule's schema with what `check_schedule` asks of it that a schema
    can say: a payload object, a zone's name, a catch-up policy, and exactly one
    of `cron` (a string) and `every` (a string or seconds), a null counting as
    absent. Whether a rule parses, a zone exists or a kind is a task, it cannot."""
    schema = PutSchedule.model_json_schema()
    properties = schema["properties"]
    properties["payload"] |= {"type": ["object", "null"]}
    properties["tz"] |= {"type": "string"}
    properties["catch_up"] |= {"enum": ["latest", "all", "none"]}
    schema["oneOf"] = [
        {
            "required": ["cron"],
            "properties": {"cron": {"type": "string"}, "every": {"type": "null"}},
        },
        {
            "required": ["every"],
            "properties": {"every": {"type": ["string", "number"]}, "cron": {"type": "null"}},
        },
    ]
    return schema


_PUT_BODY = {"required": True, "content": {"application/json": {"schema": _put_schema()}}}


def _name(name: str) -> str:
    return check_name(name[: NAME_MAX + 1])


def _unknown(name: str) -> ApiProblem:
    return ApiProblem(404, "schedule_not_found", f"no schedule named {name!r}")


@router.get(
    "/schedules",
    response_model=SchedulesOut,
    summary="Every schedule: its rule, next slot, last slot and last job's state",
    responses=documented(),
)
async def list_schedules(request: Request, principal: GlobalReader) -> SchedulesOut:
    listed = await blocking(api_state(request).store.list_schedules)
    return SchedulesOut(schedules=[ScheduleOut.of(s) for s in listed])


@router.get(
    "/schedules/{name}",
    response_model=ScheduleOut,
    summary="One schedule, with the jobs of its recent slots",
    responses=documented(404),
)
async def get_schedule(
    request: Request, name: SchedulePath, principal: GlobalReader
) -> ScheduleOut:
    store = api_state(request).store
    found = await blocking(store.get_schedule, _name(name))
    if found is None:
        raise _unknown(name)
    return await _with_runs(store, found)


@router.put(
    "/schedules/{name}",
    response_model=ScheduleOut,
    summary="Declare or replace a schedule (cron or every); an unchanged rule keeps its next slot",
    responses=documented(400, 413, 415),
    openapi_extra={"requestBody": _PUT_BODY},
)
async def put_schedule(request: Request, name: SchedulePath, principal: Operator) -> ScheduleOut:
    state = api_state(request)
    body = await read_body(request, PutSchedule)
    schedule = state.queue.check_schedule(
        _name(name),
        body.kind,
        body.payload,
        cron=body.cron,
        every=body.every,
        tz=body.tz,
        catch_up=body.catch_up,
    )
    stored = await blocking(state.store.declare_schedule, schedule, "operator")
    if body.paused is not None and body.paused != stored.paused:
        paused = await blocking(state.store.pause_schedule, stored.name, body.paused)
        stored = paused if paused is not None else stored
    return await _with_runs(state.store, stored)


@router.delete(
    "/schedules/{name}",
    response_model=ScheduleRemoved,
    summary="Remove a schedule; its jobs stay",
    responses=documented(404),
)
async def remove_schedule(
    request: Request, name: SchedulePath, principal: Operator
) -> ScheduleRemoved:
    checked = _name(name)
    if not await blocking(api_state(request).store.remove_schedule, checked):
        raise _unknown(name)
    return ScheduleRemoved(name=checked, removed=True)


async def _pausing(request: Request, name: str, paused: bool) -> ScheduleOut:
    store = api_state(request).store
    stored = await blocking(store.pause_schedule, _name(name), paused)
    if stored is None:
        raise _unknown(name)
    return ScheduleOut.of(stored)


@router.post(
    "/schedules/{name}/pause",
    response_model=ScheduleOut,
    summary="Enqueue nothing for a schedule until resumed",
    responses=documented(404),
)
async def pause_schedule(request: Request, name: SchedulePath, principal: Operator) -> ScheduleOut:
    return await _pausing(request, name, True)


@router.post(
    "/schedules/{name}/resume",
    response_model=ScheduleOut,
    summary="Enqueue a paused schedule's slots again, from its next slot (the pause's are skipped)",
    responses=documented(404),
)
async def resume_schedule(request: Request, name: SchedulePath, principal: Operator) -> ScheduleOut:
    return await _pausing(request, name, False)


async def _with_runs(store: FullStore, s: StoredSchedule) -> ScheduleOut:
    def read() -> Any:
        return ScheduleRun.recent(store.schedule_runs, s, RUNS)

    return ScheduleOut.of(s, await blocking(read))
