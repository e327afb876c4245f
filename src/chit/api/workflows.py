"""The workflow routes (DESIGN.md "Workflows and steps"): `POST /workflows`
stores a graph of jobs in one transaction, `GET /workflows/{id}` lists its jobs,
states and edges, `POST /workflows/{id}/cancel` cancels what has not finished,
and `GET /workflows/{id}/events` streams its jobs' changes. Tenancy and scopes
are the jobs' own: a key sees only its tenant's workflows (another tenant's
answers 404), submitting needs `submit`, reading `read`, cancelling `admin`."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Annotated

from fastapi import APIRouter, Header, Path, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from chit import bounds
from chit.api import events
from chit.api.body import read_body
from chit.api.deps import (
    SSE_EVENT,
    Admin,
    Reader,
    Submitter,
    api_state,
    blocking,
    render_status,
    shows_traceback,
)
from chit.api.errors import ApiProblem, ChitRoute, documented
from chit.api.schemas.workflows import (
    SubmitWorkflow,
    WorkflowCancelled,
    WorkflowOut,
    WorkflowSubmitted,
)
from chit.checks import check_idempotency_key
from chit.errors import IdempotencyConflict, InvalidRequest, WorkflowNotFound
from chit.jobs import Enqueued, Job, RunOn, State, WorkflowJob, WorkflowView
from chit.queue import Queue
from chit.requests import JobRequest
from chit.store import FullStore

router = APIRouter(
    route_class=ChitRoute, generate_unique_id_function=lambda route: route.name, tags=["workflows"]
)

WorkflowPath = Annotated[
    str, Path(min_length=1, max_length=bounds.CURSOR_MAX, description="a workflow id")
]

_SUBMIT_BODY = {
    "required": True,
    "content": {"application/json": {"schema": SubmitWorkflow.model_json_schema()}},
}


@router.post(
    "/workflows",
    name="submit_workflow",
    status_code=202,
    response_model=WorkflowSubmitted,
    summary="Submit a workflow: jobs linked by ref and depends_on, stored all or nothing",
    responses={
        200: {"model": WorkflowSubmitted, "description": "the Idempotency-Key matched it"},
        **documented(400, 413, 415),
    },
    openapi_extra={"requestBody": _SUBMIT_BODY},
)
async def submit_workflow(
    request: Request,
    principal: Submitter,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            json_schema_extra={"pattern": bounds.IDEMPOTENCY_KEY_PATTERN},
            description=f"1 to {bounds.IDEMPOTENCY_KEY_MAX} printable ASCII characters; "
            "the same key and body answer the same workflow",
        ),
    ] = None,
) -> Response:
    """Each job's `depends_on` names refs of this request or ids of stored jobs
    of the same tenant. A cycle, an unknown ref or id, a self-dependency, a
    duplicate ref or another tenant's job is refused (422) and nothing is stored."""
    state = api_state(request)
    if len(request.headers.getlist("Idempotency-Key")) > 1:
        raise ApiProblem(400, "bad_request", "send one Idempotency-Key header, not several")
    body = await read_body(request, SubmitWorkflow)
    if not any(job.ref or job.depends_on for job in body.jobs):
        raise InvalidRequest("a workflow needs at least one job with a ref or depends_on")
    tenant = principal.submit_tenant
    keys = _job_keys(idempotency_key, len(body.jobs))
    requests = [job.job_request(tenant, key) for job, key in zip(body.jobs, keys, strict=True)]
    traceparent = request.headers.get("traceparent")
    if traceparent is not None:  # W3C Trace Context, as on POST /jobs
        requests = [dataclasses.replace(r, traceparent=traceparent) for r in requests]
    queue = state.queue
    if idempotency_key is not None:
        found = await blocking(_stored, queue, requests, tenant)
        if found is not None:
            return _submitted(request, found, created=False)
    try:
        results = await blocking(queue.enqueue_many, requests)
    except InvalidRequest:
        # Two requests with one key at once: the other stored the workflow first.
        found = (
            None if idempotency_key is None else await blocking(_stored, queue, requests, tenant)
        )
        if found is None:
            raise
        return _submitted(request, found, created=False)
    workflow_id = await blocking(queue.workflow_of, results)
    view = _view_of(workflow_id, requests, results)
    return _submitted(request, view, created=any(r.created for r in results))


@router.get(
    "/workflows/{workflow_id}",
    name="get_workflow",
    response_model=WorkflowOut,
    summary="A workflow's jobs, their states and edges",
    responses=documented(404),
)
async def get_workflow(
    request: Request, workflow_id: WorkflowPath, principal: Reader
) -> WorkflowOut:
    return WorkflowOut.of(await _load(request, workflow_id, principal.tenant))


@router.post(
    "/workflows/{workflow_id}/cancel",
    name="cancel_workflow",
    response_model=WorkflowCancelled,
    summary="Cancel every job of a workflow that has not finished",
    responses=documented(404),
)
async def cancel_workflow(
    request: Request, workflow_id: WorkflowPath, principal: Admin
) -> WorkflowCancelled:
    """Waiting and queued jobs are cancelled at once; running ones are asked to
    stop (they end `cancelled` when their worker sees it). Finished jobs stay."""
    store = api_state(request).store
    count = await blocking(store.cancel_workflow, workflow_id, principal.tenant)
    if count is None:
        raise WorkflowNotFound(workflow_id)
    return WorkflowCancelled(id=workflow_id, cancelled=count)


@router.get(
    "/workflows/{workflow_id}/events",
    name="stream_workflow_events",
    summary="Server-Sent Events: every state change of a workflow's jobs until all finish",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"itemSchema": SSE_EVENT}},
            "description": "first each job's status (event `state`), then events `state` and "
            "`progress`, data a job status; ends once every job has finished",
        },
        204: {"description": "Last-Event-ID was the last event: nothing more will come"},
        **documented(404),
    },
)
async def stream_workflow_events(
    request: Request,
    workflow_id: WorkflowPath,
    principal: Reader,
    last_event_id: Annotated[str | None, Header(max_length=bounds.CURSOR_MAX)] = None,
) -> Response:
    state = api_state(request)
    view = await _load(request, workflow_id, principal.tenant)
    jobs = await blocking(_jobs_of, state.store, view)
    return events.workflow_response(
        state.hub,
        state.store,
        jobs,
        principal.tenant,
        last_event_id,
        lambda j: render_status(request, j, shows_traceback(principal)),
    )


async def _load(request: Request, workflow_id: str, tenant: str | None) -> WorkflowView:
    view = await blocking(api_state(request).store.workflow, workflow_id, tenant)
    if view is None:
        raise WorkflowNotFound(workflow_id[:100])
    return view


def _jobs_of(store: FullStore, view: WorkflowView) -> list[Job]:
    order = {job.id: n for n, job in enumerate(view.jobs)}
    return sorted(store.get_many(list(order)), key=lambda job: order[job.id])


def _job_keys(key: str | None, count: int) -> list[str | None]:
    """Each job's idempotency key, derived from the request's: the same
    Idempotency-Key gives the same keys, and they fit the keys' bound."""
    if key is None:
        return [None] * count
    check_idempotency_key(key)  # as POST /jobs checks it: only its digest is stored
    digest = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    return [f"workflow:{digest}:{n}" for n in range(count)]


def _stored(queue: Queue, requests: list[JobRequest], tenant: str) -> WorkflowView | None:
    """The workflow an earlier request with the same Idempotency-Key stored, or
    None; IdempotencyConflict when it holds other jobs than these."""
    first_key = requests[0].idempotency_key
    assert first_key is not None
    found = [
        j for j in queue.store.search(first_key, tenant=tenant) if j.idempotency_key == first_key
    ]
    if not found or found[0].workflow_id is None:
        return None
    view = queue.store.workflow(found[0].workflow_id, tenant)
    if view is None:
        return None
    if not _same(queue, requests, view):
        raise IdempotencyConflict(first_key, found[0].id)
    # Jobs enqueued later with depends_on on these joined it: not this request's.
    return WorkflowView(view.id, view.tenant, view.jobs[: len(requests)])


def _same(queue: Queue, requests: list[JobRequest], view: WorkflowView) -> bool:
    """Whether `view` is what `requests` would store: the same jobs (kind,
    payload, queue, priority), refs and edges, in the same order."""
    if len(view.jobs) < len(requests):
        return False
    stored = view.jobs[: len(requests)]
    ids = {job.ref: job.id for job in stored if job.ref}
    jobs = {job.id: job for job in queue.store.get_many([job.id for job in stored])}
    for request, job in zip(requests, stored, strict=True):
        new = queue.prepare(request)
        row = jobs.get(job.id)
        if row is None or job.ref != request.ref or job.kind != request.kind:
            return False
        if (row.payload, row.queue, row.priority) != (new.payload, new.queue, new.priority):
            return False
        if list(job.depends_on) != [ids.get(name, name) for name in request.depends_on]:
            return False
    return True


def _view_of(workflow_id: str, requests: list[JobRequest], results: list[Enqueued]) -> WorkflowView:
    """What the answer needs of a workflow just stored (its ids by ref)."""
    jobs = [
        WorkflowJob(e.id, r.ref, r.kind, State.WAITING, (), RunOn(r.run_on))
        for r, e in zip(requests, results, strict=True)
    ]
    return WorkflowView(workflow_id, requests[0].tenant, jobs)


def _submitted(request: Request, view: WorkflowView, created: bool) -> Response:
    url = request.url_for("get_workflow", workflow_id=view.id).path
    answer = WorkflowSubmitted(
        workflow_id=view.id,
        jobs={job.ref: job.id for job in view.jobs if job.ref},
        ids=[job.id for job in view.jobs],
        status_url=url,
        created=created,
    )
    return JSONResponse(
        answer.model_dump(), status_code=202 if created else 200, headers={"Location": url}
    )
