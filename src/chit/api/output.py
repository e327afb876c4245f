"""A job's output (DESIGN.md "Long AI tasks"): `GET /jobs/{job_id}/output`,
paged by seq. The same values stream as `output` events on
`GET /jobs/{job_id}/events` (chit.api.events)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from chit.api.deps import Reader, api_state, blocking, load_job
from chit.api.errors import ChitRoute, documented
from chit.api.schemas.output import OutputItemOut, OutputPage
from chit.bounds import OUTPUT_PAGE_MAX, OUTPUT_SEQ_MAX
from chit.errors import JobNotFound

router = APIRouter(
    route_class=ChitRoute, generate_unique_id_function=lambda route: route.name, tags=["jobs"]
)


@router.get(
    "/jobs/{job_id}/output",
    name="get_job_output",
    response_model=OutputPage,
    summary="The values a job emitted (job.emit), after a seq",
    responses=documented(404),
)
async def get_job_output(
    request: Request,
    job_id: str,
    principal: Reader,
    after: Annotated[
        int,
        Query(ge=0, le=OUTPUT_SEQ_MAX, description="the last seq already read; 0: from the start"),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=OUTPUT_PAGE_MAX)] = OUTPUT_PAGE_MAX,
) -> Response:
    """Each value with its `seq` (the job's, across attempts), the `attempt`
    that emitted it and when it was written. Pass `next_after` back as `after`
    for the next page; an empty page means none came yet (or the job has
    finished and this was all)."""
    job = await load_job(request, job_id, principal)
    store = api_state(request).store
    items = await blocking(store.output, job.id, after, limit, principal.tenant)
    if items is None:  # deleted since
        raise JobNotFound(job_id)
    page = OutputPage(
        output=[OutputItemOut.of(item) for item in items],
        next_after=items[-1].seq if items else after,
    )
    return Response(page.model_dump_json(), media_type="application/json")
