"""A web application that hands slow work to chit: the seed-style protocol.

Its own typed `POST /reports` validates the request, enqueues a job and answers
`202 Accepted` with `Location` at once; the client follows that URL (chit's
routes, mounted under /chit) until the report is ready. Workers run elsewhere:

    uvicorn examples.webapp:app                        # the web app (from the repo root)
    chit worker --app examples.webapp:queue            # one or more workers

    curl -i -X POST localhost:8000/reports -H 'Content-Type: application/json' \\
         -H 'Idempotency-Key: emea-2026-q3' -d '{"region": "emea"}'
    curl -i localhost:8000/chit/jobs/<id>               # Retry-After says when to ask again

Delivery is at least once: a report can be computed twice after a crash, so
`build_report` writes nothing but its result (key any side effect on job.id).
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, FastAPI, Header, Request, Response
from pydantic import BaseModel, Field

import chit
from chit.api import ChitRoute, create_router

queue = chit.Queue()  # CHIT_DATABASE_URL etc. from the environment


class ReportRequest(BaseModel):
    region: str = Field(min_length=1, max_length=64)
    quarter: str = Field(default="2026-Q3", pattern=r"^\d{4}-Q[1-4]$")


class ReportAccepted(BaseModel):
    job_id: str
    status_url: str


@queue.task("sales_report", payload=ReportRequest, max_attempts=3)
def build_report(job: chit.JobContext, body: ReportRequest) -> dict:
    months = 3
    for month in range(months):
        if job.cancelled:
            raise chit.PermanentError("cancelled by request")
        time.sleep(0.2)  # the slow part: queries, rendering, uploading
        job.progress(month + 1, months)
    return {"region": body.region, "quarter": body.quarter, "total": 1000 * len(body.region)}


# ChitRoute answers chit's errors (an idempotency conflict, the database away)
# as JSON, the same way chit's own routes do.
reports = APIRouter(route_class=ChitRoute)


@reports.post("/reports", status_code=202, response_model=ReportAccepted)
def create_report(
    body: ReportRequest,
    request: Request,
    response: Response,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> ReportAccepted:
    """Accepted now, built later: follow `Location` for the status and the result."""
    job = queue.enqueue("sales_report", body, idempotency_key=idempotency_key)
    status_url = request.url_for("get_job", job_id=job.id).path
    response.headers["Location"] = status_url
    if not job.created:
        response.status_code = 200  # the same key again: the report already asked for
    return ReportAccepted(job_id=job.id, status_url=status_url)


app = FastAPI(title="Reports")
app.include_router(reports)
# chit's routes (status, events, operations) with their lifespan; keys from CHIT_API_KEYS.
app.include_router(create_router(queue), prefix="/chit")
