"""`chit.Client` and `chit.AsyncClient`: the HTTP API from Python, on httpx.

    client = chit.Client("http://127.0.0.1:8718", api_key="chit_...")
    job = client.submit("sales_report", {"region": "emea"}, idempotency_key="emea-q3")
    status = client.wait(job.job_id, timeout=600)   # polls, honouring Retry-After
    print(status.state, status.result)
    client.set_limits("call_partner", concurrency=3, rate="20/s")   # an admin key of every tenant
    client.pause(queue="emails")
    client.put_schedule("nightly", "digest", {"list": "all"}, cron="0 8 * * *", tz="Europe/Paris")

Errors the server answers raise `APIError` subclasses that are also the
matching local exceptions, so `except chit.JobNotFound` works either way:

APIError (ChitError)          status, code, message, details
 ├── APINotFound (JobNotFound)                404
 │    └── APIWorkflowNotFound (WorkflowNotFound)  404 for a workflow
 ├── APIInvalidRequest (InvalidRequest)       400, 413, 415, 422
 ├── APIIdempotencyConflict (IdempotencyConflict)
 ├── APIConflict (InvalidTransition)          409
 └── APIUnavailable (StoreError)              503, or the server cannot be reached

Building requests, reading answers and the polling of `wait` are written once,
without I/O (as in httpx, only the sending is twinned): `wait` is a generator
of steps, a request to send or a delay to sleep, that both classes drive.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from chit.api.schemas.jobs import Failures, JobList, JobStatus, Replayed, Submitted
from chit.api.schemas.limits import Cleared, KindPause, LimitOut, LimitsOut, QueuePause
from chit.api.schemas.schedules import ScheduleOut, ScheduleRemoved, SchedulesOut
from chit.api.schemas.stats import StatsOut
from chit.api.schemas.workflows import WorkflowCancelled, WorkflowOut, WorkflowSubmitted
from chit.bounds import PAGE_SIZE
from chit.errors import (
    ChitError,
    IdempotencyConflict,
    InvalidRequest,
    InvalidTransition,
    JobNotFound,
    StoreError,
    WorkflowNotFound,
)
from chit.extras import needs
from chit.jobs import State
from chit.limits import Rate

# An extra (chit[client]): without it, importing this module says which to install.
with needs("client", "the HTTP client (chit.Client, --url) needs httpx"):
    import httpx


T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
DEFAULT_TIMEOUT = 30.0


class APIError(ChitError):
    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        Exception.__init__(self, message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return self.message


class APINotFound(APIError, JobNotFound):
    pass


class APIWorkflowNotFound(APINotFound, WorkflowNotFound):
    pass


class APIInvalidRequest(APIError, InvalidRequest):
    pass


class APIIdempotencyConflict(APIError, IdempotencyConflict):
    pass


class APIConflict(APIError, InvalidTransition):
    pass


class APIUnavailable(APIError, StoreError):
    pass


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event: `state` or `progress` (with `job`); `gone` (the job
    was deleted) or `error` (the database was away: reconnect) end the stream."""

    id: str | None
    event: str
    data: str

    @property
    def job(self) -> JobStatus | None:
        if self.event in ("state", "progress"):
            return JobStatus.model_validate_json(self.data)
        return None


def poll_delay(elapsed: float, retry_after: float | None) -> float:
    """About every second for the first ten seconds, then every five; never
    sooner than the server's Retry-After."""
    schedule = 1.0 if elapsed < 10 else 5.0
    return max(schedule, retry_after or 0.0)


class SSEParser:
    """Incremental text/event-stream parsing (comments and `retry:` are skipped)."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._event = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        if line == "":
            if not self._data:
                self._event = "message"
                return None
            event = Event(self._id, self._event, "\n".join(self._data))
            self._event, self._data = "message", []
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            self._id = value
        return None


# Requests and answers, without I/O


@dataclass(frozen=True)
class _Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    ok: tuple[int, ...] = (200,)


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda r: model.model_validate_json(r.content)


def _job(
    method: str, job_id: str, action: str = "", ok: tuple[int, ...] = (200,)
) -> _Call[JobStatus]:
    return _Call(method, f"/jobs/{job_id}{action}", _model(JobStatus), ok=ok)


def _edit(
    job_id: str, run_at: datetime | None, priority: int | None, payload: Any
) -> _Call[JobStatus]:
    given = {"run_at": run_at, "priority": priority, "payload": payload}
    body = _job_body({name: value for name, value in given.items() if value is not None})
    return _Call("PATCH", f"/jobs/{job_id}", _model(JobStatus), json=body)


def _result(job_id: str) -> _Call[Any]:
    return _Call("GET", f"/jobs/{job_id}/result", lambda r: r.json())


_CANCEL_OK = (200, 202)
_FAILURES = _Call("GET", "/failures", _model(Failures))
_STATS = _Call("GET", "/stats", _model(StatsOut))
_LIMITS = _Call("GET", "/limits", _model(LimitsOut))
_SCHEDULES = _Call("GET", "/schedules", _model(SchedulesOut))


def _submit(
    kind: str,
    payload: Any,
    idempotency_key: str | None,
    queue: str | None,
    priority: int | None,
    run_at: datetime | None,
    max_attempts: int | None,
    concurrency_key: str | None = None,
    depends_on: Iterable[str] | None = None,
    ref: str | None = None,
    run_on: str | None = None,
    more: Mapping[str, Any] | None = None,
) -> _Call[Submitted]:
    """`more`: further fields of POST /jobs, sent when not None (times as ISO 8601)."""
    body: dict[str, Any] = {"kind": kind, "payload": payload}
    for name, value in (
        ("queue", queue),
        ("priority", priority),
        ("max_attempts", max_attempts),
        ("concurrency_key", concurrency_key),
        ("ref", ref),
        ("run_on", run_on),
        *(more or {}).items(),
    ):
        if value is not None:
            body[name] = value.isoformat() if isinstance(value, datetime) else value
    if depends_on is not None:
        body["depends_on"] = list(depends_on)
    if run_at is not None:
        body["run_at"] = run_at.isoformat()
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
    return _Call("POST", "/jobs", _model(Submitted), body, headers=headers, ok=(200, 202))


def _submit_workflow(
    jobs: Iterable[Mapping[str, Any]], idempotency_key: str | None
) -> _Call[WorkflowSubmitted]:
    body = {"jobs": [_job_body(job) for job in jobs]}
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
    return _Call(
        "POST", "/workflows", _model(WorkflowSubmitted), body, headers=headers, ok=(200, 202)
    )


def _job_body(job: Mapping[str, Any]) -> dict[str, Any]:
    body = dict(job)
    for name in ("run_at", "expires_at"):
        if isinstance(body.get(name), datetime):
            body[name] = body[name].isoformat()
    if "depends_on" in body:
        body["depends_on"] = list(body["depends_on"])
    return body


def _get_workflow(workflow_id: str) -> _Call[WorkflowOut]:
    return _Call("GET", f"/workflows/{quote(workflow_id, safe='')}", _model(WorkflowOut))


def _cancel_workflow(workflow_id: str) -> _Call[WorkflowCancelled]:
    path = f"/workflows/{quote(workflow_id, safe='')}/cancel"
    return _Call("POST", path, _model(WorkflowCancelled))


def _list(
    state: State | str | None,
    kind: str | None,
    queue: str | None,
    since: datetime | None,
    limit: int,
    cursor: str | None,
) -> _Call[JobList]:
    params = {
        "state": None if state is None else str(state),
        "kind": kind,
        "queue": queue,
        "since": None if since is None else since.isoformat(),
        "limit": limit,
        "cursor": cursor,
    }
    return _Call(
        "GET", "/jobs", _model(JobList), params={k: v for k, v in params.items() if v is not None}
    )


def _replay(
    ids: Iterable[str] | None, kind: str | None, error_prefix: str | None, since: datetime | None
) -> _Call[int]:
    body: dict[str, Any] = {}
    if ids is not None:
        body["ids"] = list(ids)
    if kind is not None:
        body["kind"] = kind
    if error_prefix is not None:
        body["error_prefix"] = error_prefix
    if since is not None:
        body["since"] = since.isoformat()
    return _Call(
        "POST", "/jobs/replay", lambda r: Replayed.model_validate_json(r.content).replayed, body
    )


def _segment(name: str) -> str:
    """A kind or queue as one path segment: "/" and "%" in it are escaped."""
    return quote(name, safe="")


def _set_limits(kind: str, limits: dict[str, int | str | Rate | None]) -> _Call[LimitOut]:
    # None: leave as it is. The server checks the values (and that one is given).
    body = {k: str(v) if isinstance(v, Rate) else v for k, v in limits.items() if v is not None}
    return _Call("PUT", f"/limits/{_segment(kind)}", _model(LimitOut), body)


def _clear_limits(kind: str) -> _Call[bool]:
    return _Call(
        "DELETE",
        f"/limits/{_segment(kind)}",
        lambda r: Cleared.model_validate_json(r.content).cleared,
    )


def _pausing(action: str, queue: str | None, kind: str | None) -> _Call[bool]:
    if (queue is None) == (kind is None):
        raise InvalidRequest(f"{action}: give a queue or a kind (exactly one)")
    if queue is not None:
        return _Call(
            "POST",
            f"/queues/{_segment(queue)}/{action}",
            lambda r: QueuePause.model_validate_json(r.content).changed,
        )
    assert kind is not None
    return _Call(
        "POST",
        f"/kinds/{_segment(kind)}/{action}",
        lambda r: KindPause.model_validate_json(r.content).changed,
    )


def _schedule(method: str, name: str, action: str = "", body: Any = None) -> _Call[ScheduleOut]:
    return _Call(method, f"/schedules/{_segment(name)}{action}", _model(ScheduleOut), body)


def _put_schedule(
    name: str,
    kind: str,
    payload: Any,
    cron: str | None,
    every: str | float | None,
    tz: str,
    catch_up: str,
    paused: bool | None,
) -> _Call[ScheduleOut]:
    # None: left out, so the server's default (or the schedule's pause) holds.
    # The server checks the rule, the kind and the payload.
    body: dict[str, Any] = {"kind": kind, "tz": tz, "catch_up": catch_up}
    optional = {"payload": payload, "cron": cron, "every": every, "paused": paused}
    body |= {field: value for field, value in optional.items() if value is not None}
    return _schedule("PUT", name, body=body)


def _remove_schedule(name: str) -> _Call[ScheduleRemoved]:
    return _Call("DELETE", f"/schedules/{_segment(name)}", _model(ScheduleRemoved))


def _raise_for(response: httpx.Response) -> None:
    try:
        body = response.json()
        code, message, details = body["error"], body["message"], body.get("details")
    except (ValueError, KeyError, TypeError):
        code, message, details = f"http_{response.status_code}", response.text[:500], None
    status = response.status_code
    if status == 404:
        cls: type[APIError] = APIWorkflowNotFound if code == "workflow_not_found" else APINotFound
    elif code == "idempotency_conflict":
        cls = APIIdempotencyConflict
    elif status in (400, 413, 415, 422):
        cls = APIInvalidRequest
    elif status == 409:
        cls = APIConflict
    elif status in (502, 503, 504):
        cls = APIUnavailable
    else:
        cls = APIError
    raise cls(status, code, message, details)


def _answer(call: _Call[T], response: httpx.Response) -> T:
    if response.status_code not in call.ok:
        _raise_for(response)
    return call.parse(response)


def _unreachable(base_url: str, error: httpx.TransportError) -> APIUnavailable:
    return APIUnavailable(0, "unreachable", f"cannot reach the chit API at {base_url}: {error}")


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    return float(value) if value.isdigit() else None


def _client_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


# A step of `wait`: a request to send (its answer is sent back in), or seconds
# to sleep (None is sent back in).
_Step = _Call[Any] | float


def _waiting(
    job_id: str,
    timeout: float | None,
    on_update: Callable[[JobStatus], None] | None,
    clock: Callable[[], float] = time.monotonic,
) -> Generator[_Step, Any, JobStatus]:
    """The polling of `wait` (conditional GETs, honouring Retry-After), as steps;
    returns the final status with its result loaded, however large."""
    started = clock()
    etag: str | None = None
    status: JobStatus | None = None
    while True:
        headers = {"If-None-Match": etag} if etag else None
        response = yield _Call("GET", f"/jobs/{job_id}", _as_is, headers=headers, ok=(200, 304))
        if response.status_code == 200:
            status = JobStatus.model_validate_json(response.content)
            etag = response.headers.get("etag")
            if on_update is not None:
                on_update(status)
        elif status is None:  # a 304 to a first request: nothing to compare
            _raise_for(response)
        assert status is not None
        if status.state.terminal:
            if status.result_url is None:
                return status
            result = yield _result(status.id)
            return status.model_copy(update={"result": result})
        elapsed = clock() - started
        delay = poll_delay(elapsed, _retry_after(response))
        if timeout is not None:
            if elapsed >= timeout:
                raise TimeoutError(f"job {job_id} still {status.state.value} after {timeout}s")
            delay = min(delay, timeout - elapsed)
        yield delay


def _as_is(response: httpx.Response) -> httpx.Response:
    return response


def _events_headers(last_event_id: str | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    return headers


class Client:
    """The HTTP API, blocking. Use as a context manager, or call `close()`."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=_client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call[T]) -> T:
        try:
            response = self._http.request(
                call.method, call.path, json=call.json, params=call.params, headers=call.headers
            )
        except httpx.TransportError as e:
            raise _unreachable(self.base_url, e) from e
        return _answer(call, response)

    def submit(
        self,
        kind: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        concurrency_key: str | None = None,
        depends_on: Iterable[str] | None = None,
        ref: str | None = None,
        run_on: str | None = None,
        expires_at: datetime | None = None,
        expires_in: float | None = None,
        unique_key: str | None = None,
        debounce_key: str | None = None,
        debounce: float | None = None,
        debounce_max: float | None = None,
    ) -> Submitted:
        """`depends_on` (job ids): the job waits until each has succeeded;
        `run_on="finished"`: until each has ended, whatever the outcome.
        `expires_at` or `expires_in` (seconds): not started by then, the job
        ends cancelled, "expired before it started". `unique_key`: while a job
        with that key is waiting, queued or running, answers it (`created` false).
        `debounce_key` with `debounce` (seconds): while the key's job has not
        started, replaces its payload and moves its start (`debounced` true)."""
        return self._send(
            _submit(
                kind,
                payload,
                idempotency_key,
                queue,
                priority,
                run_at,
                max_attempts,
                concurrency_key,
                depends_on,
                ref,
                run_on,
                {
                    "expires_at": expires_at,
                    "expires_in": expires_in,
                    "unique_key": unique_key,
                    "debounce_key": debounce_key,
                    "debounce": debounce,
                    "debounce_max": debounce_max,
                },
            )
        )

    def submit_workflow(
        self, jobs: Iterable[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> WorkflowSubmitted:
        """Store a graph in one request, all or nothing: each job a mapping as
        `POST /workflows` takes it (`kind`, `payload`, `ref`, `depends_on` refs
        or ids, `run_on`, ...). `.workflow_id`, `.jobs` (ids by ref), `.ids`."""
        return self._send(_submit_workflow(jobs, idempotency_key))

    def get_workflow(self, workflow_id: str) -> WorkflowOut:
        return self._send(_get_workflow(workflow_id))

    def cancel_workflow(self, workflow_id: str) -> WorkflowCancelled:
        """Cancel every job of the workflow that has not finished."""
        return self._send(_cancel_workflow(workflow_id))

    def get(self, job_id: str) -> JobStatus:
        return self._send(_job("GET", job_id))

    def result(self, job_id: str) -> Any:
        """A succeeded job's result, however large."""
        return self._send(_result(job_id))

    def list(
        self,
        *,
        state: State | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        since: datetime | None = None,
        limit: int = PAGE_SIZE,
        cursor: str | None = None,
    ) -> JobList:
        return self._send(_list(state, kind, queue, since, limit, cursor))

    def retry(self, job_id: str) -> JobStatus:
        return self._send(_job("POST", job_id, "/retry"))

    def cancel(self, job_id: str) -> JobStatus:
        """Queued: cancelled now. Running: `cancel_requested`, ends at the next heartbeat."""
        return self._send(_job("POST", job_id, "/cancel", _CANCEL_OK))

    def update(
        self,
        job_id: str,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        payload: Any = None,
    ) -> JobStatus:
        """Change a queued or waiting job (`PATCH /jobs/{id}`): each of run_at,
        priority and payload given replaces the stored one. A started job
        raises InvalidTransition."""
        return self._send(_edit(job_id, run_at, priority, payload))

    def run_now(self, job_id: str) -> JobStatus:
        """Make a delayed job due at once. A started job raises InvalidTransition."""
        return self._send(_job("POST", job_id, "/run-now"))

    def replay(
        self,
        ids: Iterable[str] | None = None,
        *,
        kind: str | None = None,
        error_prefix: str | None = None,
        since: datetime | None = None,
    ) -> int:
        return self._send(_replay(ids, kind, error_prefix, since))

    def failures(self) -> Failures:
        return self._send(_FAILURES)

    def stats(self) -> StatsOut:
        return self._send(_STATS)

    def limits(self) -> LimitsOut:
        """Every kind's limits with its running and waiting jobs, and what is paused.
        Limits and pauses need an admin key of every tenant."""
        return self._send(_LIMITS)

    def set_limits(
        self,
        kind: str,
        *,
        concurrency: int | None = None,
        rate: str | Rate | None = None,
        key_concurrency: int | None = None,
        key_rate: str | Rate | None = None,
    ) -> LimitOut:
        """Override the limits given (rates "N/s", "N/m", "N/h") until `clear_limits`;
        the others stay as they were."""
        limits = {
            "concurrency": concurrency,
            "rate": rate,
            "key_concurrency": key_concurrency,
            "key_rate": key_rate,
        }
        return self._send(_set_limits(kind, limits))

    def clear_limits(self, kind: str) -> bool:
        """Drop the operator's override; False when there was none."""
        return self._send(_clear_limits(kind))

    def pause(self, queue: str | None = None, *, kind: str | None = None) -> bool:
        """Claim no job of the queue (or kind) until resumed; False when paused already."""
        return self._send(_pausing("pause", queue, kind))

    def resume(self, queue: str | None = None, *, kind: str | None = None) -> bool:
        """Undo `pause`; False when it was not paused."""
        return self._send(_pausing("resume", queue, kind))

    def schedules(self) -> SchedulesOut:
        """Every schedule with its rule, next slot and last job's state (a key of
        every tenant; writing needs an admin one)."""
        return self._send(_SCHEDULES)

    def get_schedule(self, name: str) -> ScheduleOut:
        """One schedule with the jobs of its recent slots (`runs`); an unknown
        name raises `APINotFound` (code `schedule_not_found`)."""
        return self._send(_schedule("GET", name))

    def put_schedule(
        self,
        name: str,
        kind: str,
        payload: Any = None,
        *,
        cron: str | None = None,
        every: str | float | None = None,
        tz: str = "UTC",
        catch_up: str = "latest",
        paused: bool | None = None,
    ) -> ScheduleOut:
        """Declare or replace a schedule, as `queue.schedule` does: exactly one of
        `cron` and `every`. An unchanged rule keeps its next slot; `paused` None
        keeps its pause. A bad value raises `APIInvalidRequest` (422)."""
        return self._send(_put_schedule(name, kind, payload, cron, every, tz, catch_up, paused))

    def pause_schedule(self, name: str) -> ScheduleOut:
        """Enqueue nothing for the schedule until `resume_schedule`."""
        return self._send(_schedule("POST", name, "/pause"))

    def resume_schedule(self, name: str) -> ScheduleOut:
        """Enqueue its slots again, from the next one (the pause's are skipped)."""
        return self._send(_schedule("POST", name, "/resume"))

    def remove_schedule(self, name: str) -> ScheduleRemoved:
        """Delete the schedule (its jobs stay); an unknown name raises `APINotFound`."""
        return self._send(_remove_schedule(name))

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        on_update: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Poll until the job finishes (conditional GETs, honouring Retry-After);
        the final status has the result loaded even when large. Raises
        TimeoutError after `timeout` seconds."""
        steps = _waiting(job_id, timeout, on_update)
        answer: Any = None
        try:
            while True:
                step = steps.send(answer)
                if isinstance(step, _Call):
                    answer = self._send(step)
                else:
                    time.sleep(step)
                    answer = None
        except StopIteration as done:
            final: JobStatus = done.value
            return final

    def events(self, job_id: str, last_event_id: str | None = None) -> Iterator[Event]:
        """Server-Sent Events until the job finishes (the stream then ends)."""
        try:
            with self._http.stream(
                "GET",
                f"/jobs/{job_id}/events",
                headers=_events_headers(last_event_id),
                timeout=httpx.Timeout(None),
            ) as response:
                if response.status_code == 204:
                    return
                if response.status_code != 200:
                    response.read()
                    _raise_for(response)
                parser = SSEParser()
                for line in response.iter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
        except httpx.TransportError as e:
            raise _unreachable(self.base_url, e) from e


class AsyncClient:
    """The HTTP API for asyncio code; the same methods as `Client`, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        try:
            response = await self._http.request(
                call.method, call.path, json=call.json, params=call.params, headers=call.headers
            )
        except httpx.TransportError as e:
            raise _unreachable(self.base_url, e) from e
        return _answer(call, response)

    async def submit(
        self,
        kind: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        concurrency_key: str | None = None,
        depends_on: Iterable[str] | None = None,
        ref: str | None = None,
        run_on: str | None = None,
        expires_at: datetime | None = None,
        expires_in: float | None = None,
        unique_key: str | None = None,
        debounce_key: str | None = None,
        debounce: float | None = None,
        debounce_max: float | None = None,
    ) -> Submitted:
        return await self._send(
            _submit(
                kind,
                payload,
                idempotency_key,
                queue,
                priority,
                run_at,
                max_attempts,
                concurrency_key,
                depends_on,
                ref,
                run_on,
                {
                    "expires_at": expires_at,
                    "expires_in": expires_in,
                    "unique_key": unique_key,
                    "debounce_key": debounce_key,
                    "debounce": debounce,
                    "debounce_max": debounce_max,
                },
            )
        )

    async def submit_workflow(
        self, jobs: Iterable[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> WorkflowSubmitted:
        return await self._send(_submit_workflow(jobs, idempotency_key))

    async def get_workflow(self, workflow_id: str) -> WorkflowOut:
        return await self._send(_get_workflow(workflow_id))

    async def cancel_workflow(self, workflow_id: str) -> WorkflowCancelled:
        return await self._send(_cancel_workflow(workflow_id))

    async def get(self, job_id: str) -> JobStatus:
        return await self._send(_job("GET", job_id))

    async def result(self, job_id: str) -> Any:
        return await self._send(_result(job_id))

    async def list(
        self,
        *,
        state: State | str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        since: datetime | None = None,
        limit: int = PAGE_SIZE,
        cursor: str | None = None,
    ) -> JobList:
        return await self._send(_list(state, kind, queue, since, limit, cursor))

    async def retry(self, job_id: str) -> JobStatus:
        return await self._send(_job("POST", job_id, "/retry"))

    async def cancel(self, job_id: str) -> JobStatus:
        return await self._send(_job("POST", job_id, "/cancel", _CANCEL_OK))

    async def update(
        self,
        job_id: str,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        payload: Any = None,
    ) -> JobStatus:
        return await self._send(_edit(job_id, run_at, priority, payload))

    async def run_now(self, job_id: str) -> JobStatus:
        return await self._send(_job("POST", job_id, "/run-now"))

    async def replay(
        self,
        ids: Iterable[str] | None = None,
        *,
        kind: str | None = None,
        error_prefix: str | None = None,
        since: datetime | None = None,
    ) -> int:
        return await self._send(_replay(ids, kind, error_prefix, since))

    async def failures(self) -> Failures:
        return await self._send(_FAILURES)

    async def stats(self) -> StatsOut:
        return await self._send(_STATS)

    async def limits(self) -> LimitsOut:
        return await self._send(_LIMITS)

    async def set_limits(
        self,
        kind: str,
        *,
        concurrency: int | None = None,
        rate: str | Rate | None = None,
        key_concurrency: int | None = None,
        key_rate: str | Rate | None = None,
    ) -> LimitOut:
        limits = {
            "concurrency": concurrency,
            "rate": rate,
            "key_concurrency": key_concurrency,
            "key_rate": key_rate,
        }
        return await self._send(_set_limits(kind, limits))

    async def clear_limits(self, kind: str) -> bool:
        return await self._send(_clear_limits(kind))

    async def pause(self, queue: str | None = None, *, kind: str | None = None) -> bool:
        return await self._send(_pausing("pause", queue, kind))

    async def resume(self, queue: str | None = None, *, kind: str | None = None) -> bool:
        return await self._send(_pausing("resume", queue, kind))

    async def schedules(self) -> SchedulesOut:
        return await self._send(_SCHEDULES)

    async def get_schedule(self, name: str) -> ScheduleOut:
        return await self._send(_schedule("GET", name))

    async def put_schedule(
        self,
        name: str,
        kind: str,
        payload: Any = None,
        *,
        cron: str | None = None,
        every: str | float | None = None,
        tz: str = "UTC",
        catch_up: str = "latest",
        paused: bool | None = None,
    ) -> ScheduleOut:
        return await self._send(
            _put_schedule(name, kind, payload, cron, every, tz, catch_up, paused)
        )

    async def pause_schedule(self, name: str) -> ScheduleOut:
        return await self._send(_schedule("POST", name, "/pause"))

    async def resume_schedule(self, name: str) -> ScheduleOut:
        return await self._send(_schedule("POST", name, "/resume"))

    async def remove_schedule(self, name: str) -> ScheduleRemoved:
        return await self._send(_remove_schedule(name))

    async def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        on_update: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        steps = _waiting(job_id, timeout, on_update)
        answer: Any = None
        try:
            while True:
                step = steps.send(answer)
                if isinstance(step, _Call):
                    answer = await self._send(step)
                else:
                    await asyncio.sleep(step)
                    answer = None
        except StopIteration as done:
            final: JobStatus = done.value
            return final

    async def events(self, job_id: str, last_event_id: str | None = None) -> AsyncIterator[Event]:
        try:
            async with self._http.stream(
                "GET",
                f"/jobs/{job_id}/events",
                headers=_events_headers(last_event_id),
                timeout=httpx.Timeout(None),
            ) as response:
                if response.status_code == 204:
                    return
                if response.status_code != 200:
                    await response.aread()
                    _raise_for(response)
                parser = SSEParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
        except httpx.TransportError as e:
            raise _unreachable(self.base_url, e) from e
