"""The HTTP API's requests and the reading of their answers, without I/O:
`Client` and `AsyncClient` only send them. `waiting` is the polling of `wait`,
a generator of steps (a request to send or a delay to sleep) both drive."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from chit.api.schemas.jobs import Failures, JobList, JobStatus, Replayed, Submitted
from chit.api.schemas.limits import Cleared, KindPause, LimitOut, LimitsOut, QueuePause
from chit.api.schemas.output import OutputPage
from chit.api.schemas.schedules import ScheduleOut, ScheduleRemoved, SchedulesOut
from chit.api.schemas.signals import SignalOut
from chit.api.schemas.stats import StatsOut
from chit.api.schemas.workflows import WorkflowCancelled, WorkflowOut, WorkflowSubmitted
from chit.client.errors import raise_for
from chit.errors import InvalidRequest
from chit.jobs import State
from chit.limits import Rate

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
DEFAULT_TIMEOUT = 30.0


def poll_delay(elapsed: float, retry_after: float | None) -> float:
    """About every second for the first ten seconds, then every five; never
    sooner than the server's Retry-After."""
    schedule = 1.0 if elapsed < 10 else 5.0
    return max(schedule, retry_after or 0.0)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    ok: tuple[int, ...] = (200,)


def parse_as(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda r: model.model_validate_json(r.content)


def job_call(
    method: str, job_id: str, action: str = "", ok: tuple[int, ...] = (200,)
) -> Call[JobStatus]:
    return Call(method, f"/jobs/{job_id}{action}", parse_as(JobStatus), ok=ok)


def edit(
    job_id: str, run_at: datetime | None, priority: int | None, payload: Any
) -> Call[JobStatus]:
    given = {"run_at": run_at, "priority": priority, "payload": payload}
    body = job_body({name: value for name, value in given.items() if value is not None})
    return Call("PATCH", f"/jobs/{job_id}", parse_as(JobStatus), json=body)


def job_output(job_id: str, after: int, limit: int | None) -> Call[OutputPage]:
    params = {"after": after} | ({} if limit is None else {"limit": limit})
    return Call("GET", f"/jobs/{job_id}/output", parse_as(OutputPage), params=params)


# A stream that ends with an `error` event (the database was away) or a dropped
# connection is opened again from its last event id, this many times in a row.
STREAM_RECONNECTS = 10


def signal(job_id: str, name: str, data: Mapping[str, Any] | None) -> Call[SignalOut]:
    path = f"/jobs/{segment(job_id)}/signals/{segment(name)}"
    return Call("POST", path, parse_as(SignalOut), json=dict(data or {}), ok=(200, 201))


def job_result(job_id: str) -> Call[Any]:
    return Call("GET", f"/jobs/{job_id}/result", lambda r: r.json())


CANCEL_OK = (200, 202)
FAILURES = Call("GET", "/failures", parse_as(Failures))
STATS = Call("GET", "/stats", parse_as(StatsOut))
LIMITS = Call("GET", "/limits", parse_as(LimitsOut))
SCHEDULES = Call("GET", "/schedules", parse_as(SchedulesOut))


# JobRequest's fields that POST /jobs takes otherwise: the Idempotency-Key
# header; the tenant is the API key's.
_NOT_IN_BODY = ("self", "idempotency_key", "tenant")


def submit(arguments: Mapping[str, Any]) -> Call[Submitted]:
    """POST /jobs from `submit`'s arguments (its `locals()`), which are
    JobRequest's fields by name; those given (not None) are sent, times as ISO 8601."""
    body: dict[str, Any] = {"kind": arguments["kind"], "payload": arguments["payload"]}
    for name, value in arguments.items():
        if value is None or name in body or name in _NOT_IN_BODY:
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        elif name == "depends_on":
            value = list(value)
        body[name] = value
    key = arguments.get("idempotency_key")
    headers = {"Idempotency-Key": key} if key is not None else None
    return Call("POST", "/jobs", parse_as(Submitted), body, headers=headers, ok=(200, 202))


def submit_workflow(
    jobs: Iterable[Mapping[str, Any]], idempotency_key: str | None
) -> Call[WorkflowSubmitted]:
    body = {"jobs": [job_body(job) for job in jobs]}
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
    return Call(
        "POST", "/workflows", parse_as(WorkflowSubmitted), body, headers=headers, ok=(200, 202)
    )


def job_body(job: Mapping[str, Any]) -> dict[str, Any]:
    body = dict(job)
    for name in ("run_at", "expires_at"):
        if isinstance(body.get(name), datetime):
            body[name] = body[name].isoformat()
    if "depends_on" in body:
        body["depends_on"] = list(body["depends_on"])
    return body


def get_workflow(workflow_id: str) -> Call[WorkflowOut]:
    return Call("GET", f"/workflows/{quote(workflow_id, safe='')}", parse_as(WorkflowOut))


def cancel_workflow(workflow_id: str) -> Call[WorkflowCancelled]:
    path = f"/workflows/{quote(workflow_id, safe='')}/cancel"
    return Call("POST", path, parse_as(WorkflowCancelled))


def list_jobs(
    state: State | str | None,
    kind: str | None,
    queue: str | None,
    since: datetime | None,
    limit: int,
    cursor: str | None,
) -> Call[JobList]:
    params = {
        "state": None if state is None else str(state),
        "kind": kind,
        "queue": queue,
        "since": None if since is None else since.isoformat(),
        "limit": limit,
        "cursor": cursor,
    }
    return Call(
        "GET", "/jobs", parse_as(JobList), params={k: v for k, v in params.items() if v is not None}
    )


def replay(
    ids: Iterable[str] | None, kind: str | None, error_prefix: str | None, since: datetime | None
) -> Call[int]:
    body: dict[str, Any] = {}
    if ids is not None:
        body["ids"] = list(ids)
    if kind is not None:
        body["kind"] = kind
    if error_prefix is not None:
        body["error_prefix"] = error_prefix
    if since is not None:
        body["since"] = since.isoformat()
    return Call(
        "POST", "/jobs/replay", lambda r: Replayed.model_validate_json(r.content).replayed, body
    )


def segment(name: str) -> str:
    """A kind or queue as one path segment: "/" and "%" in it are escaped."""
    return quote(name, safe="")


def set_limits(arguments: Mapping[str, Any]) -> Call[LimitOut]:
    """PUT /limits/{kind} from `set_limits`' arguments (its `locals()`): the kind,
    and Limits' fields by name. None: leave as it is. The server checks the
    values (and that one is given)."""
    limits = {k: v for k, v in arguments.items() if k not in ("self", "kind") and v is not None}
    body = {k: str(v) if isinstance(v, Rate) else v for k, v in limits.items()}
    return Call("PUT", f"/limits/{segment(arguments['kind'])}", parse_as(LimitOut), body)


def clear_limits(kind: str) -> Call[bool]:
    return Call(
        "DELETE",
        f"/limits/{segment(kind)}",
        lambda r: Cleared.model_validate_json(r.content).cleared,
    )


def pausing(action: str, queue: str | None, kind: str | None) -> Call[bool]:
    if (queue is None) == (kind is None):
        raise InvalidRequest(f"{action}: give a queue or a kind (exactly one)")
    if queue is not None:
        return Call(
            "POST",
            f"/queues/{segment(queue)}/{action}",
            lambda r: QueuePause.model_validate_json(r.content).changed,
        )
    assert kind is not None
    return Call(
        "POST",
        f"/kinds/{segment(kind)}/{action}",
        lambda r: KindPause.model_validate_json(r.content).changed,
    )


def schedule(method: str, name: str, action: str = "", body: Any = None) -> Call[ScheduleOut]:
    return Call(method, f"/schedules/{segment(name)}{action}", parse_as(ScheduleOut), body)


def put_schedule(
    name: str,
    kind: str,
    payload: Any,
    cron: str | None,
    every: str | float | None,
    tz: str,
    catch_up: str,
    paused: bool | None,
) -> Call[ScheduleOut]:
    # None: left out, so the server's default (or the schedule's pause) holds.
    # The server checks the rule, the kind and the payload.
    body: dict[str, Any] = {"kind": kind, "tz": tz, "catch_up": catch_up}
    optional = {"payload": payload, "cron": cron, "every": every, "paused": paused}
    body |= {field: value for field, value in optional.items() if value is not None}
    return schedule("PUT", name, body=body)


def remove_schedule(name: str) -> Call[ScheduleRemoved]:
    return Call("DELETE", f"/schedules/{segment(name)}", parse_as(ScheduleRemoved))


def answer(call: Call[T], response: httpx.Response) -> T:
    if response.status_code not in call.ok:
        raise_for(response)
    return call.parse(response)


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    return float(value) if value.isdigit() else None


def client_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


# A step of `wait`: a request to send (its answer is sent back in), or seconds
# to sleep (None is sent back in).
Step = Call[Any] | float


def waiting(
    job_id: str,
    timeout: float | None,
    on_update: Callable[[JobStatus], None] | None,
    clock: Callable[[], float] = time.monotonic,
) -> Generator[Step, Any, JobStatus]:
    """The polling of `wait` (conditional GETs, honouring Retry-After), as steps;
    returns the final status with its result loaded, however large."""
    started = clock()
    etag: str | None = None
    status: JobStatus | None = None
    while True:
        headers = {"If-None-Match": etag} if etag else None
        response = yield Call("GET", f"/jobs/{job_id}", as_is, headers=headers, ok=(200, 304))
        if response.status_code == 200:
            status = JobStatus.model_validate_json(response.content)
            etag = response.headers.get("etag")
            if on_update is not None:
                on_update(status)
        elif status is None:  # a 304 to a first request: nothing to compare
            raise_for(response)
        assert status is not None
        if status.state.terminal:
            if status.result_url is None:
                return status
            result = yield job_result(status.id)
            return status.model_copy(update={"result": result})
        elapsed = clock() - started
        delay = poll_delay(elapsed, retry_after(response))
        if timeout is not None:
            if elapsed >= timeout:
                raise TimeoutError(f"job {job_id} still {status.state.value} after {timeout}s")
            delay = min(delay, timeout - elapsed)
        yield delay


def as_is(response: httpx.Response) -> httpx.Response:
    return response


def events_headers(last_event_id: str | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    return headers
