"""The dashboard's page of one job, and what an operator does there: retry,
cancel, run now, edit a job that has not started (its priority, start
time and payload, checked as the API checks them), and send the signal a
waiting job waits for."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from chit import fleet, retrying
from chit.api import events
from chit.api.auth import Principal
from chit.api.deps import api_state, blocking, load_job, render_status
from chit.api.errors import ApiProblem, to_problem
from chit.bounds import SIGNAL_DATA_BYTES
from chit.dashboard import flow
from chit.dashboard.routes import (
    MAX_FORM_BYTES,
    PageRoute,
    checked_form,
    current_session,
    render,
)
from chit.dashboard.session import Session
from chit.ids import is_job_id
from chit.jobs import CancelResult, Job, OutputItem, State
from chit.store import FullStore
from chit.waits import send_signal

router = APIRouter(route_class=PageRoute, include_in_schema=False)


async def _job(request: Request, job_id: str, principal: Principal) -> Job:
    job = None
    if is_job_id(job_id):
        job = await blocking(api_state(request).store.get, job_id, principal.tenant)
    if job is None:
        raise ApiProblem(404, "job_not_found", f"No job {job_id[:100]!r} here.")
    return job


NOTICES = {
    "retried": "Queued again, attempts reset: a worker will pick it up.",
    "cancelled": "Cancelled.",
    "cancel_requested": "Cancellation requested: the worker stops it at its next heartbeat.",
    "not_cancelled": "Not cancelled: the job had already finished.",
    "run_now": "Due now: a worker will pick it up.",
    "edited": "Changed.",
    "unchanged": "Nothing to change: the form held the job as it is.",
    "signalled": "Signal sent: the job is queued again, and its wait returns the data.",
    "signal_kept": "A signal of that name was sent before: it is kept, and this one dropped.",
}


@router.get("/jobs/{job_id}", name="ui_job")
async def job_page(request: Request, job_id: str, notice: str = "") -> Response:
    current = await current_session(request)
    assert current is not None
    job = await _job(request, job_id, current.principal)
    return await _show(request, current, job, NOTICES.get(notice, ""))


async def _show(
    request: Request,
    current: Session,
    job: Job,
    notice: str = "",
    refused: str = "",
    status: int = 200,
    form: dict[str, str] | None = None,
) -> Response:
    """The job's page; `refused` says why an edit was not made, above the form
    as it was sent (`form`), so nothing typed is lost."""
    store = api_state(request).store
    attempts = await blocking(store.attempts, job.id)
    steps = await blocking(store.steps, job.id)
    # The last values written; the page's event stream adds those after them.
    output = await blocking(_last_output, store, job.id)
    dependents = await blocking(store.dependents, job.id, job.tenant)
    held, applying = await blocking(_held_back, request, job, current.principal.tenant is None)
    unstarted = job.state in (State.QUEUED, State.WAITING)
    response = render(
        request,
        "job.html",
        current,
        page="jobs",
        job=job,
        attempts=attempts,
        steps=steps,
        output=output,
        dependents=dependents,
        held=held,
        applying=applying,
        notice=notice,
        refused=refused,
        can_retry=job.state in (State.FAILED, State.CANCELLED),
        can_cancel=(unstarted or job.state is State.RUNNING) and not job.cancel_requested,
        can_edit=unstarted,
        can_run_now=unstarted and job.run_at > datetime.now(UTC),
        can_signal=current.principal.allows("submit") and not job.state.terminal,
        signal_data=(form or {}).get("data", "{}"),
        edit=form if form and "priority" in form else _edit_form(job),
    )
    response.status_code = status
    return response


def _edit_form(job: Job) -> dict[str, str]:
    return {
        "priority": str(job.priority),
        "run_at": job.run_at.isoformat(),
        "payload": json.dumps(job.payload, indent=2, ensure_ascii=False),
    }


def _held_back(request: Request, job: Job, every_tenant: bool) -> tuple[list[str], str]:
    """Why a queued job waits (a pause, a full concurrency limit, no worker
    with code for its kind) and the limits of its kind in words; why a waiting
    job waits (its dependencies not done); nothing for a job in another state."""
    store = api_state(request).store
    if job.state is State.WAITING:
        unmet = retrying.unmet(job, store.dependencies(job.id))
        return ([retrying.waiting_on(unmet)] if unmet else []), ""
    if job.state is not State.QUEUED:
        return [], ""
    now = datetime.now(UTC)
    limits = store.limits(now)
    held = flow.waiting_on(job, limits, store.pauses(), now, every_tenant)
    if job.run_at <= now and fleet.unrun([job.kind], store.live_workers()):
        held.append(fleet.NO_WORKER.format(kind=job.kind))
    mine = next((k for k in limits if k.kind == job.kind), None)
    return held, "" if mine is None else flow.applying(mine.effective)


@router.get("/jobs/{job_id}/result", name="ui_job_result")
async def job_result(request: Request, job_id: str) -> Response:
    current = await current_session(request)
    assert current is not None
    job = await _job(request, job_id, current.principal)
    found, result = await blocking(
        api_state(request).store.get_result, job.id, current.principal.tenant
    )
    if not found or job.state is not State.SUCCEEDED:
        raise ApiProblem(404, "job_not_found", f"Job {job.id} has no result.")
    return Response(
        json.dumps(result, indent=2, ensure_ascii=False),
        media_type="application/json",
        headers={"Content-Disposition": f'inline; filename="{job.id}-result.json"'},
    )


@router.get("/jobs/{job_id}/events", name="ui_job_events")
async def job_events(request: Request, job_id: str) -> Response:
    """The API's event stream for this job, for a signed-in browser (EventSource
    cannot send an Authorization header; it sends the session cookie)."""
    current = await current_session(request, required=False)
    if current is None:
        raise ApiProblem(401, "unauthorized", "Sign in to the dashboard first.")
    state = api_state(request)
    job = await load_job(request, job_id, current.principal)
    return await events.response(
        state.hub,
        state.store,
        job,
        current.principal.tenant,
        request.headers.get("last-event-id"),
        lambda j: render_status(request, j, traceback=True),  # operators see it whole
    )


@router.post("/jobs/{job_id}/retry", name="ui_job_retry")
async def retry(request: Request, job_id: str) -> Response:
    current, _ = await checked_form(request, admin=True)
    job = await _job(request, job_id, current.principal)
    queue = api_state(request).queue
    try:
        await blocking(functools.partial(queue.retry, job.id, tenant=current.principal.tenant))
    except Exception as e:
        return await _refused(request, current, job, e)
    return _redirect(request, job, "retried")


@router.post("/jobs/{job_id}/cancel", name="ui_job_cancel")
async def cancel(request: Request, job_id: str) -> Response:
    current, _ = await checked_form(request, admin=True)
    job = await _job(request, job_id, current.principal)
    result = await blocking(api_state(request).store.cancel, job.id, current.principal.tenant)
    notice = {
        CancelResult.CANCELLED: "cancelled",
        CancelResult.REQUESTED: "cancel_requested",
    }.get(result, "not_cancelled")
    return _redirect(request, job, notice)


@router.post("/jobs/{job_id}/run-now", name="ui_job_run_now")
async def run_now(request: Request, job_id: str) -> Response:
    current, _ = await checked_form(request, admin=True)
    job = await _job(request, job_id, current.principal)
    queue = api_state(request).queue
    try:
        await blocking(functools.partial(queue.run_now, job.id, tenant=current.principal.tenant))
    except Exception as e:
        return await _refused(request, current, job, e)
    return _redirect(request, job, "run_now")


@router.post("/jobs/{job_id}/edit", name="ui_job_edit")
async def edit(request: Request, job_id: str) -> Response:
    """The form holds every field; what differs from the stored job is changed,
    so a payload left as it was needs no task to check it."""
    settings = api_state(request).settings
    # A payload travels percent-encoded: up to three bytes for each of its own.
    limit = MAX_FORM_BYTES + 3 * settings.max_payload_bytes
    current, form = await checked_form(request, admin=True, limit=limit)
    job = await _job(request, job_id, current.principal)
    sent = {name: form.get(name, "") for name in ("priority", "run_at", "payload")}
    try:
        priority, run_at, payload = _changes(job, sent)
        if priority is None and run_at is None and payload is None:
            return _redirect(request, job, "unchanged")
        update = functools.partial(
            api_state(request).queue.update,
            job.id,
            priority=priority,
            run_at=run_at,
            payload=payload,
            tenant=current.principal.tenant,
        )
        await blocking(update)
    except Exception as e:
        return await _refused(request, current, job, e, sent)
    return _redirect(request, job, "edited")


@router.post("/jobs/{job_id}/signal", name="ui_job_signal")
async def signal(request: Request, job_id: str) -> Response:
    """The form of a job waiting for a signal: its name, and its data as JSON."""
    current, form = await checked_form(request, limit=MAX_FORM_BYTES + 3 * SIGNAL_DATA_BYTES)
    job = await _job(request, job_id, current.principal)
    if not current.principal.allows("submit"):
        raise ApiProblem(403, "forbidden", "Sending a signal needs a key with the submit scope.")
    sent = {"data": form.get("data", "{}")}
    try:
        data = json.loads(sent["data"] or "{}")
        send = functools.partial(
            send_signal, api_state(request).store, job.id, form.get("name", ""), data
        )
        got = await blocking(send, current.principal.tenant)
    except ValueError as e:
        problem = ApiProblem(422, "invalid_signal", f"the signal's data is not JSON: {e}")
        return await _refused(request, current, job, problem, sent)
    except Exception as e:
        return await _refused(request, current, job, e, sent)
    return _redirect(request, job, "signalled" if got.created else "signal_kept")


def _changes(job: Job, sent: dict[str, str]) -> tuple[int | None, datetime | None, Any]:
    """What the form changes of the job (priority, run_at, payload; None for
    each left as it was), as `Queue.update` takes it."""
    was = _edit_form(job)
    priority = run_at = payload = None
    if sent["priority"].strip() != was["priority"]:
        try:
            priority = int(sent["priority"])
        except ValueError:
            raise ApiProblem(422, "invalid_request", "priority must be a whole number") from None
    if sent["run_at"].strip() != was["run_at"]:
        try:
            run_at = datetime.fromisoformat(sent["run_at"].strip())
        except ValueError:
            raise ApiProblem(
                422,
                "invalid_request",
                "run at must be an ISO 8601 time, e.g. 2030-01-31T09:00:00+00:00",
            ) from None
    if sent["payload"].strip() and _json(sent["payload"]) != job.payload:
        payload = _json(sent["payload"])
    return priority, run_at, payload


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ApiProblem(422, "invalid_request", f"the payload is not JSON: {e}") from None


async def _refused(
    request: Request,
    current: Session,
    job: Job,
    error: Exception,
    form: dict[str, str] | None = None,
) -> Response:
    """The job's page again, saying why nothing changed (an error the API would
    answer; anything else goes on to the page's own error handling)."""
    problem = error if isinstance(error, ApiProblem) else to_problem(error)
    if problem is None or problem.status >= 500:
        raise error
    now = await _job(request, job.id, current.principal)
    return await _show(
        request, current, now, refused=problem.message, status=problem.status, form=form
    )


def _redirect(request: Request, job: Job, notice: str) -> Response:
    return RedirectResponse(
        f"{request.url_for('ui_job', job_id=job.id).path}?notice={notice}", status_code=303
    )


# Values a job's page shows when it opens (the newest; the stream adds the rest).
OUTPUT_SHOWN = 500


def _last_output(store: FullStore, job_id: str) -> list[OutputItem]:
    head = store.output_heads([job_id]).get(job_id, 0)
    return store.output(job_id, max(0, head - OUTPUT_SHOWN), OUTPUT_SHOWN) or []
