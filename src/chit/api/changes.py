"""Changing a job that has not started (DESIGN.md "Changing work already
queued"): `PATCH /jobs/{job_id}` and `POST /jobs/{job_id}/run-now`."""

from __future__ import annotations

import functools

from fastapi import APIRouter, Request
from fastapi.responses import Response

from chit.api.body import read_body
from chit.api.deps import Admin, api_state, blocking, render_status, shows_traceback
from chit.api.errors import ChitRoute, documented
from chit.api.schemas.jobs import EditJob, JobStatus
from chit.errors import JobNotFound
from chit.ids import is_job_id
from chit.jobs import Job

router = APIRouter(
    route_class=ChitRoute, generate_unique_id_function=lambda route: route.name, tags=["jobs"]
)

_EDIT_BODY = {
    "required": True,
    "content": {"application/json": {"schema": EditJob.model_json_schema()}},
}


@router.patch(
    "/jobs/{job_id}",
    name="edit_job",
    response_model=JobStatus,
    summary="Change a queued or waiting job's run_at, priority or payload",
    responses=documented(400, 404, 409, 413, 415),
    openapi_extra={"requestBody": _EDIT_BODY},
)
async def edit_job(request: Request, job_id: str, principal: Admin) -> Response:
    """Each field given replaces the stored one; the payload is checked against
    the task's model as at submit. `409` once the job has started."""
    _known(job_id)
    body = await read_body(request, EditJob)
    update = functools.partial(
        api_state(request).queue.update,
        job_id,
        run_at=body.run_at,
        priority=body.priority,
        payload=body.payload,
        tenant=principal.tenant,
    )
    return _answer(request, await blocking(update), principal)


@router.post(
    "/jobs/{job_id}/run-now",
    name="run_job_now",
    response_model=JobStatus,
    summary="Make a delayed job due at once",
    responses=documented(404, 409),
)
async def run_job_now(request: Request, job_id: str, principal: Admin) -> Response:
    """For a job held by its `run_at` or a retry's backoff; a job already due
    keeps its place, and a `waiting` one runs once its dependencies let it.
    `409` once the job has started."""
    _known(job_id)
    run_now = functools.partial(api_state(request).queue.run_now, job_id, tenant=principal.tenant)
    return _answer(request, await blocking(run_now), principal)


def _known(job_id: str) -> None:
    if not is_job_id(job_id):
        raise JobNotFound(job_id[:100])


def _answer(request: Request, job: Job, principal: Admin) -> Response:
    body = render_status(request, job, shows_traceback(principal))
    return Response(body, media_type="application/json")
