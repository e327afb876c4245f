"""Signals (DESIGN.md "Long AI tasks"): `POST /jobs/{job_id}/signals/{name}`
stores what a waiting handler's `job.wait_for(name)` returns, and queues the
job if it waits for it."""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from chit.api.body import read_json
from chit.api.deps import Submitter, api_state, blocking
from chit.api.errors import ChitRoute, documented
from chit.api.schemas.signals import SIGNAL_BODY, SignalOut
from chit.bounds import PLAIN_TEXT_PATTERN, SIGNAL_NAME_MAX
from chit.errors import InvalidWait, JobNotFound
from chit.ids import is_job_id
from chit.waits import send_signal

router = APIRouter(
    route_class=ChitRoute, generate_unique_id_function=lambda route: route.name, tags=["jobs"]
)


@router.post(
    "/jobs/{job_id}/signals/{name}",
    name="signal_job",
    status_code=201,
    response_model=SignalOut,
    summary="Send a job a signal, which its handler's wait_for(name) returns",
    responses={
        200: {"model": SignalOut, "description": "a signal of that name was stored before"},
        **documented(400, 404, 409, 413, 415),
    },
    openapi_extra={"requestBody": SIGNAL_BODY},
)
async def signal_job(
    request: Request,
    job_id: str,
    name: Annotated[
        str,
        Path(
            description=f"1 to {SIGNAL_NAME_MAX} characters, no control character",
            # Said in the schema, checked by send_signal: its message names the bound.
            json_schema_extra={
                "minLength": 1,
                "maxLength": SIGNAL_NAME_MAX,
                "pattern": PLAIN_TEXT_PATTERN,
            },
        ),
    ],
    principal: Submitter,
) -> JSONResponse:
    """The first signal of a name is stored (`201`), and a job waiting for it is
    queued; another of the same name answers `200` with the stored one and
    changes nothing. `409` once the job has finished; `404` for an unknown job
    or another tenant's; `422` for a name or body out of bounds. Nothing is
    stored on an error."""
    if not is_job_id(job_id):
        raise JobNotFound(job_id[:100])
    state = api_state(request)
    data = await read_json(request, state.settings.max_body_bytes)
    if not isinstance(data, dict):  # Queue.signal takes None for {}; the API, an object only
        raise InvalidWait(f"a signal's data is a JSON object, not {type(data).__name__}")
    send = functools.partial(send_signal, state.store, job_id, name, data, principal.tenant)
    signal = await blocking(send)
    answer = SignalOut(job_id=job_id, name=name, data=signal.data, created=signal.created)
    return JSONResponse(answer.model_dump(), status_code=201 if signal.created else 200)
