"""The job routes (submit, read, stream, operate; failures, stats and
metrics), as an `APIRouter`. Each route reads its `ApiState` from
`request.app.state.chit`, which the lifespan from `chit.api.app` sets; build
the app with `create_app(queue)` or include `create_router(queue)` in yours."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import AfterValidator

from chit import bounds
from chit.api import events, metrics
from chit.api.auth import Principal
from chit.api.body import read_body
from chit.api.deps import (
    SSE_EVENT,
    Admin,
    Reader,
    Submitter,
    answer_job,
    api_state,
    bearer,
    blocking,
    caller,
    job_status,
    load_job,
    render_status,
    shows_traceback,
)
from chit.api.errors import ApiProblem, ChitRoute, documented
from chit.api.schemas.common import Moment, no_nul
from chit.api.schemas.jobs import (
    EventsTokenOut,
    FailureGroupOut,
    Failures,
    JobList,
    JobStatus,
    Replayed,
    ReplayRequest,
    StepList,
    StepOut,
    SubmitJob,
    Submitted,
    replay_request_schema,
)
from chit.api.schemas.stats import StatsOut
from chit.errors import InvalidTransition, JobNotFound
from chit.ids import JOB_ID_PATTERN, is_job_id
from chit.jobs import (
    CancelResult,
    Job,
    JobFilter,
    ReplaySelector,
    State,
    last_hour_by_kind,
)

# How soon to poll again a job that is running (or due and waiting for a worker).
RUNNING_RETRY_AFTER = 1

# Operation ids are the routes' names (`submit_job`, `get_job`): what generated
# clients call their methods, rather than FastAPI's `submit_job_jobs_post`.
router = APIRouter(
    route_class=ChitRoute, generate_unique_id_function=lambda route: route.name, tags=["jobs"]
)


# Submitting

_SUBMIT_BODY = {
    "required": True,
    "content": {"application/json": {"schema": SubmitJob.model_json_schema()}},
}


@router.post(
    "/jobs",
    status_code=202,
    response_model=Submitted,
    summary="Submit a job",
    responses={
        200: {"model": Submitted, "description": "the Idempotency-Key matched this job"},
        **documented(400, 413, 415),
    },
    openapi_extra={"requestBody": _SUBMIT_BODY},
)
async def submit_job(
    request: Request,
    principal: Submitter,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            json_schema_extra={"pattern": bounds.IDEMPOTENCY_KEY_PATTERN},
            description=f"1 to {bounds.IDEMPOTENCY_KEY_MAX} printable ASCII characters; "
            "the same key and body "
            "answer the same job",
        ),
    ] = None,
) -> Response:
    """Answers 202 and `Location` at once; a worker runs the job later (once its
    `depends_on` have succeeded, or ended for `run_on: finished`)."""
    state = api_state(request)
    if len(request.headers.getlist("Idempotency-Key")) > 1:
        # Which one the client meant is a guess either way; a proxy may keep another.
        raise ApiProblem(400, "bad_request", "send one Idempotency-Key header, not several")
    body = await read_body(request, SubmitJob)
    job = body.job_request(principal.submit_tenant, idempotency_key)
    if "traceparent" in request.headers:  # W3C Trace Context: the job joins the caller's trace
        job = dataclasses.replace(job, traceparent=request.headers["traceparent"])
    [result] = await state.queue.aenqueue_many([job])
    url = _path(request, "get_job", result.id)
    answer = Submitted(
        job_id=result.id,
        status_url=url,
        created=result.created,
        debounced=result.debounced,
        workflow_id=result.workflow_id,
    )
    if principal.allows("read"):  # the token reads the job: only for who may
        token = await _events_token(request, result.id, principal.submit_tenant)
        answer.events_token, answer.events_url = token.events_token, token.events_url
    return JSONResponse(
        answer.model_dump(), status_code=202 if result.created else 200, headers={"Location": url}
    )


# Reading


@router.get(
    "/jobs/{job_id}",
    name="get_job",
    response_model=JobStatus,
    summary="A job's status",
    responses={304: {"description": "unchanged since the ETag sent"}, **documented(404)},
)
async def get_job(
    request: Request,
    job_id: str,
    principal: Reader,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """`Retry-After` says when to poll again while the job is not finished."""
    return await _status(request, job_id, principal, if_none_match)


@router.head(
    "/jobs/{job_id}",
    summary="A job's status headers, no body: a probe (404 once gone)",
    responses={
        200: {"description": "the job exists; the headers are GET's"},
        304: {"description": "unchanged since the ETag sent"},
        **documented(404),
    },
)
async def head_job(
    request: Request,
    job_id: str,
    principal: Reader,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    return await _status(request, job_id, principal, if_none_match, head=True)


async def _status(
    request: Request,
    job_id: str,
    principal: Principal,
    if_none_match: str | None,
    head: bool = False,
) -> Response:
    job = await load_job(request, job_id, principal)
    body = render_status(request, job, shows_traceback(principal)).encode()
    etag = '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if not job.state.terminal:
        headers["Retry-After"] = str(retry_after(job, datetime.now(UTC)))
    if if_none_match is not None and _etag_matches(if_none_match, etag):
        return Response(status_code=304, headers=headers)
    if head:  # GET's headers, its length included, without the body
        headers["Content-Length"] = str(len(body))
        return Response(media_type="application/json", headers=headers)
    return Response(body, media_type="application/json", headers=headers)


@router.get(
    "/jobs/{job_id}/result",
    name="get_job_result",
    summary="A succeeded job's result, however large",
    responses={
        200: {"description": "the result, as the handler returned it"},
        **documented(404, 409),
    },
)
async def get_job_result(request: Request, job_id: str, principal: Reader) -> Response:
    job = await load_job(request, job_id, principal)
    if job.state is not State.SUCCEEDED:
        raise InvalidTransition(
            f"job {job.id} is {job.state.value}: a result exists once it has succeeded"
        )
    found, result = await blocking(api_state(request).store.get_result, job.id, principal.tenant)
    if not found:
        raise JobNotFound(job_id)
    return JSONResponse(result)


@router.get(
    "/jobs/{job_id}/steps",
    name="list_job_steps",
    response_model=StepList,
    summary="A job's durable steps (job.step), in the order they were stored",
    responses=documented(404),
)
async def list_job_steps(request: Request, job_id: str, principal: Reader) -> StepList:
    """Each step's name, the attempt that stored it and its JSON result. Steps
    outlive retries and replays; a job not yet run, or without steps, has none."""
    job = await load_job(request, job_id, principal)
    steps = await blocking(api_state(request).store.steps, job.id)
    return StepList(steps=[StepOut.of(step) for step in steps])


@router.get("/jobs", response_model=JobList, summary="Jobs, newest first", responses=documented())
async def list_jobs(
    request: Request,
    principal: Reader,
    state: State | None = None,
    kind: Annotated[str | None, Query(max_length=bounds.NAME_MAX), AfterValidator(no_nul)] = None,
    queue: Annotated[str | None, Query(max_length=bounds.NAME_MAX), AfterValidator(no_nul)] = None,
    since: Annotated[Moment | None, Query(description="created at or after")] = None,
    limit: Annotated[int, Query(ge=1, le=bounds.API_PAGE_MAX)] = bounds.PAGE_SIZE,
    cursor: Annotated[
        str | None,
        Query(
            max_length=bounds.CURSOR_MAX,
            description="next_cursor from the previous page",
            json_schema_extra={"pattern": f"^{JOB_ID_PATTERN.pattern}$"},
        ),
    ] = None,
) -> Response:
    if cursor is not None and not is_job_id(cursor):
        raise ApiProblem(
            422,
            "invalid_cursor",
            "cursor is not one this API hands out: pass next_cursor from the previous "
            "page unchanged, or leave it out for the first page",
        )
    where = JobFilter(state=state, kind=kind, queue=queue, since=since, tenant=principal.tenant)
    page = await blocking(api_state(request).store.list, where, limit, cursor)
    answer = JobList(
        jobs=[job_status(request, job, shows_traceback(principal)) for job in page.jobs],
        next_cursor=page.next_cursor,
    )
    return Response(answer.model_dump_json(), media_type="application/json")


async def _events_caller(
    request: Request,
    job_id: str,
    _: Annotated[Any, Depends(bearer)],
    token: Annotated[
        str | None,
        Query(
            max_length=bounds.EVENTS_TOKEN_MAX,
            description="an events_token for this job (from POST /jobs or "
            "POST /jobs/{job_id}/events-token), in place of the Authorization header: "
            "EventSource cannot send headers",
        ),
    ] = None,
) -> Principal:
    if token is None:
        return await caller("read")(request, _)
    claims = await blocking(api_state(request).tokens.check, token, job_id)
    return Principal(key_id="events-token", tenant=claims.tenant, scopes=frozenset({"read"}))


EventsReader = Annotated[Principal, Depends(_events_caller)]


@router.get(
    "/jobs/{job_id}/events",
    summary="Server-Sent Events: progress and state changes until the job finishes",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"itemSchema": SSE_EVENT}},
            "description": "events `state` and `progress`, data a job status; ends after "
            "the terminal state",
        },
        204: {"description": "Last-Event-ID was the terminal event: nothing more will come"},
        **documented(404),
    },
)
async def stream_job_events(
    request: Request,
    job_id: str,
    principal: EventsReader,
    last_event_id: Annotated[str | None, Header(max_length=bounds.CURSOR_MAX)] = None,
) -> Response:
    state = api_state(request)
    job = await load_job(request, job_id, principal)
    return await events.response(
        state.hub,
        state.store,
        job,
        principal.tenant,
        last_event_id,
        lambda j: render_status(request, j, shows_traceback(principal)),
    )


@router.post(
    "/jobs/{job_id}/events-token",
    name="create_events_token",
    response_model=EventsTokenOut,
    summary="A fresh token to stream this job's events without the API key",
    responses=documented(404),
)
async def create_events_token(request: Request, job_id: str, principal: Reader) -> EventsTokenOut:
    """For a browser's `EventSource`, which cannot send `Authorization`: open
    `events_url`. The token reads this job's events only, until `expires_at`."""
    job = await load_job(request, job_id, principal)
    return await _events_token(request, job.id, job.tenant)


async def _events_token(request: Request, job_id: str, tenant: str) -> EventsTokenOut:
    token, expires_at = await blocking(api_state(request).tokens.issue, job_id, tenant)
    url = _path(request, "stream_job_events", job_id) + "?token=" + token
    return EventsTokenOut(
        job_id=job_id,
        events_token=token,
        events_url=url,
        expires_at=datetime.fromtimestamp(expires_at, UTC),
    )


# Operating


@router.post(
    "/jobs/{job_id}/retry",
    response_model=JobStatus,
    summary="Queue a failed or cancelled job again, attempts reset",
    responses=documented(404, 409),
)
async def retry_job(request: Request, job_id: str, principal: Admin) -> Response:
    job = await load_job(request, job_id, principal)
    queue = api_state(request).queue
    await blocking(functools.partial(queue.retry, job.id, tenant=principal.tenant))
    return await answer_job(request, job_id, principal)


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobStatus,
    summary="Cancel a queued job, or ask a running one to stop",
    responses={
        202: {
            "model": JobStatus,
            "description": "running: the worker stops it at its next heartbeat",
        },
        **documented(404, 409),
    },
)
async def cancel_job(request: Request, job_id: str, principal: Admin) -> Response:
    if not is_job_id(job_id):
        raise JobNotFound(job_id[:100])
    result = await blocking(api_state(request).store.cancel, job_id, principal.tenant)
    if result is CancelResult.NOT_FOUND:
        raise JobNotFound(job_id)
    if result is CancelResult.ALREADY_FINISHED:
        job = await load_job(request, job_id, principal)
        raise InvalidTransition(f"job {job_id} already {job.state.value}: nothing to cancel")
    return await answer_job(
        request, job_id, principal, 202 if result is CancelResult.REQUESTED else 200
    )


@router.post(
    "/jobs/replay",
    response_model=Replayed,
    summary="Queue failed jobs again: by ids, or by kind, error prefix and time",
    responses=documented(400, 413, 415),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": replay_request_schema()}},
        }
    },
)
async def replay_jobs(request: Request, principal: Admin) -> Replayed:
    state = api_state(request)
    body = await read_body(request, ReplayRequest)
    filters = body.kind is not None or body.error_prefix is not None or body.since is not None
    if body.ids is None and not filters:
        raise ApiProblem(
            422,
            "invalid_request",
            "say which jobs to replay: ids, or any of kind, error_prefix and since "
            '(every failed job: {"since": "1970-01-01T00:00:00Z"})',
        )
    if body.ids is not None and filters:
        raise ApiProblem(
            422,
            "invalid_request",
            "give either ids or filters (kind, error_prefix, since), not both",
        )
    bad = [i for i in body.ids or () if not is_job_id(i)]
    if bad:
        raise ApiProblem(
            422, "invalid_request", f"not job ids: {', '.join(repr(i[:40]) for i in bad[:5])}"
        )
    if body.ids == []:
        return Replayed(replayed=0)
    selector = ReplaySelector(
        ids=tuple(body.ids or ()),
        kind=body.kind,
        error_prefix=body.error_prefix,
        since=body.since,
        tenant=principal.tenant,
    )
    return Replayed(replayed=await blocking(state.queue.replay, selector))


@router.get(
    "/failures",
    response_model=Failures,
    summary="Failed jobs grouped by kind and first line of the error",
    responses=documented(),
)
async def list_failures(request: Request, principal: Admin) -> Failures:
    groups = await blocking(api_state(request).store.failures, principal.tenant)
    return Failures(groups=[FailureGroupOut.of(g) for g in groups])


@router.get(
    "/stats",
    response_model=StatsOut,
    summary="Counts by state and kind, failure rate",
    responses=documented(),
)
async def get_stats(request: Request, principal: Admin) -> StatsOut:
    store = api_state(request).store
    minutes = await blocking(store.finished_per_minute, principal.tenant)
    counts = await blocking(store.stats, principal.tenant)
    if principal.tenant is not None:  # a limit's counts span tenants
        return StatsOut.of(counts, last_hour_by_kind(minutes))
    limits, pauses = await blocking(store.limits), await blocking(store.pauses)
    return StatsOut.of(counts, last_hour_by_kind(minutes), limits, pauses)


@router.get(
    "/metrics",
    summary="Prometheus metrics, read from the database",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **documented(),
    },
)
async def get_metrics(request: Request, principal: Admin) -> Response:
    state = api_state(request)
    text = await blocking(
        metrics.render, state.store, principal.tenant, state.hub.listeners, state.queue
    )
    return Response(text, media_type=metrics.CONTENT_TYPE)


# Helpers


def retry_after(job: Job, now: datetime) -> int:
    """Whole seconds until polling again is worth it: until run_at for a delayed
    job, a second otherwise."""
    if job.state is State.QUEUED and job.run_at > now:
        return max(RUNNING_RETRY_AFTER, math.ceil((job.run_at - now).total_seconds()))
    return RUNNING_RETRY_AFTER


def _path(request: Request, route: str, job_id: str) -> str:
    return request.url_for(route, job_id=job_id).path


def _etag_matches(header: str, etag: str) -> bool:
    candidates = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in candidates or etag in candidates
