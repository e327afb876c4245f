"""`chit.Client`: the HTTP API, blocking."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import httpx

from chit.api.schemas.jobs import Failures, JobList, JobStatus, Submitted
from chit.api.schemas.limits import LimitOut, LimitsOut
from chit.api.schemas.output import OutputPage
from chit.api.schemas.schedules import ScheduleOut, ScheduleRemoved, SchedulesOut
from chit.api.schemas.signals import SignalOut
from chit.api.schemas.stats import StatsOut
from chit.api.schemas.workflows import WorkflowCancelled, WorkflowOut, WorkflowSubmitted
from chit.bounds import PAGE_SIZE
from chit.client import calls
from chit.client.calls import DEFAULT_TIMEOUT, Call
from chit.client.errors import APIUnavailable, raise_for, unreachable
from chit.client.sse import Event, SSEParser, Streamed
from chit.jobs import State
from chit.limits import Rate

T = TypeVar("T")


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
            headers=calls.client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T:
        try:
            response = self._http.request(
                call.method, call.path, json=call.json, params=call.params, headers=call.headers
            )
        except httpx.TransportError as e:
            raise unreachable(self.base_url, e) from e
        return calls.answer(call, response)

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
        timeout: float | None = None,
        depends_on: Iterable[str] | None = None,
        ref: str | None = None,
        run_on: str | None = None,
        expires_at: datetime | None = None,
        expires_in: float | None = None,
        unique_key: str | None = None,
        debounce_key: str | None = None,
        debounce: float | None = None,
        debounce_max: float | None = None,
        cost: int | None = None,
    ) -> Submitted:
        """POST /jobs: the arguments are `chit.JobRequest`'s fields (the tenant
        is the API key's). `timeout` (seconds): how long an attempt may run
        before it fails "timed out" (default: the task's); the HTTP requests'
        own is `Client(timeout=)`.
        `depends_on` (job ids): the job waits until each has succeeded;
        `run_on="finished"`: until each has ended, whatever the outcome.
        `expires_at` or `expires_in` (seconds): not started by then, the job
        ends cancelled, "expired before it started". `unique_key`: while a job
        with that key is waiting, queued or running, answers it (`created` false).
        `debounce_key` with `debounce` (seconds): while the key's job has not
        started, replaces its payload and moves its start (`debounced` true).
        `cost`: what the job is expected to spend, against its kind's cost_rate."""
        return self._send(calls.submit(locals()))  # first: the arguments alone

    def submit_workflow(
        self, jobs: Iterable[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> WorkflowSubmitted:
        """Store a graph in one request, all or nothing: each job a mapping as
        `POST /workflows` takes it (`kind`, `payload`, `ref`, `depends_on` refs
        or ids, `run_on`, ...). `.workflow_id`, `.jobs` (ids by ref), `.ids`."""
        return self._send(calls.submit_workflow(jobs, idempotency_key))

    def get_workflow(self, workflow_id: str) -> WorkflowOut:
        return self._send(calls.get_workflow(workflow_id))

    def cancel_workflow(self, workflow_id: str) -> WorkflowCancelled:
        """Cancel every job of the workflow that has not finished."""
        return self._send(calls.cancel_workflow(workflow_id))

    def get(self, job_id: str) -> JobStatus:
        return self._send(calls.job_call("GET", job_id))

    def result(self, job_id: str) -> Any:
        """A succeeded job's result, however large."""
        return self._send(calls.job_result(job_id))

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
        return self._send(calls.list_jobs(state, kind, queue, since, limit, cursor))

    def retry(self, job_id: str) -> JobStatus:
        """A failed or cancelled job queued again. InvalidTransition when it is
        in another state, or a dependency it needs failed (retry that first)."""
        return self._send(calls.job_call("POST", job_id, "/retry"))

    def cancel(self, job_id: str) -> JobStatus:
        """Queued: cancelled now. Running: `cancel_requested`, ends at the next heartbeat."""
        return self._send(calls.job_call("POST", job_id, "/cancel", calls.CANCEL_OK))

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
        return self._send(calls.edit(job_id, run_at, priority, payload))

    def signal(self, job_id: str, name: str, data: Mapping[str, Any] | None = None) -> SignalOut:
        """Send the job the signal `name` with `data` (a JSON object; None: {}),
        which its handler's `job.wait_for(name)` returns. The answer's `created`
        is false when one of that name was stored before (its data is the stored
        one's). A finished job raises InvalidTransition, an unknown one
        JobNotFound, a bad name or body InvalidRequest."""
        return self._send(calls.signal(job_id, name, data))

    def run_now(self, job_id: str) -> JobStatus:
        """Make a delayed job due at once. A started job raises InvalidTransition."""
        return self._send(calls.job_call("POST", job_id, "/run-now"))

    def replay(
        self,
        ids: Iterable[str] | None = None,
        *,
        kind: str | None = None,
        error_prefix: str | None = None,
        since: datetime | None = None,
    ) -> int:
        return self._send(calls.replay(ids, kind, error_prefix, since))

    def failures(self) -> Failures:
        return self._send(calls.FAILURES)

    def stats(self) -> StatsOut:
        return self._send(calls.STATS)

    def limits(self) -> LimitsOut:
        """Every kind's limits with its running and waiting jobs, and what is paused.
        Limits and pauses need an admin key of every tenant."""
        return self._send(calls.LIMITS)

    def set_limits(
        self,
        kind: str,
        *,
        concurrency: int | None = None,
        rate: str | Rate | None = None,
        key_concurrency: int | None = None,
        key_rate: str | Rate | None = None,
        cost_rate: str | Rate | None = None,
        key_cost_rate: str | Rate | None = None,
    ) -> LimitOut:
        """Override the limits given (rates "N/s", "N/m", "N/h") until `clear_limits`;
        the others stay as they were."""
        return self._send(calls.set_limits(locals()))  # first: the arguments alone

    def clear_limits(self, kind: str) -> bool:
        """Drop the operator's override; False when there was none."""
        return self._send(calls.clear_limits(kind))

    def pause(self, queue: str | None = None, *, kind: str | None = None) -> bool:
        """Claim no job of the queue (or kind) until resumed; False when paused already."""
        return self._send(calls.pausing("pause", queue, kind))

    def resume(self, queue: str | None = None, *, kind: str | None = None) -> bool:
        """Undo `pause`; False when it was not paused."""
        return self._send(calls.pausing("resume", queue, kind))

    def schedules(self) -> SchedulesOut:
        """Every schedule with its rule, next slot and last job's state (a key of
        every tenant; writing needs an admin one)."""
        return self._send(calls.SCHEDULES)

    def get_schedule(self, name: str) -> ScheduleOut:
        """One schedule with the jobs of its recent slots (`runs`); an unknown
        name raises `APINotFound` (code `schedule_not_found`)."""
        return self._send(calls.schedule("GET", name))

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
        return self._send(
            calls.put_schedule(name, kind, payload, cron, every, tz, catch_up, paused)
        )

    def pause_schedule(self, name: str) -> ScheduleOut:
        """Enqueue nothing for the schedule until `resume_schedule`."""
        return self._send(calls.schedule("POST", name, "/pause"))

    def resume_schedule(self, name: str) -> ScheduleOut:
        """Enqueue its slots again, from the next one (the pause's are skipped)."""
        return self._send(calls.schedule("POST", name, "/resume"))

    def remove_schedule(self, name: str) -> ScheduleRemoved:
        """Delete the schedule (its jobs stay); an unknown name raises `APINotFound`."""
        return self._send(calls.remove_schedule(name))

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
        steps = calls.waiting(job_id, timeout, on_update)
        answer: Any = None
        try:
            while True:
                step = steps.send(answer)
                if isinstance(step, Call):
                    answer = self._send(step)
                else:
                    time.sleep(step)
                    answer = None
        except StopIteration as done:
            final: JobStatus = done.value
            return final

    def output(self, job_id: str, after: int = 0, *, limit: int | None = None) -> OutputPage:
        """The values the job emitted with seq above `after` (`GET
        /jobs/{id}/output`); pass `next_after` back for the next page."""
        return self._send(calls.job_output(job_id, after, limit))

    def stream(self, job_id: str, last_event_id: str | None = None) -> Iterator[Streamed]:
        """The job's output as it is emitted (the `output` events of `events`),
        from the first value, or after the event `last_event_id` names, until
        the job finishes. A dropped connection, or the server's database away
        for a moment, is picked up where it left off: nothing lost or repeated."""
        last, tries = last_event_id, 0
        while True:
            try:
                for event in self.events(job_id, last):
                    tries = 0
                    last = event.id or last
                    if event.event == "output" and (value := event.output) is not None:
                        yield value
                    elif event.event == "gone":
                        return
                    elif event.event == "error":
                        raise APIUnavailable(503, "store_unavailable", event.data)
                return
            except APIUnavailable:
                tries += 1
                if tries > calls.STREAM_RECONNECTS:
                    raise
                time.sleep(min(tries * 0.5, 5.0))

    def events(self, job_id: str, last_event_id: str | None = None) -> Iterator[Event]:
        """Server-Sent Events until the job finishes (the stream then ends)."""
        try:
            with self._http.stream(
                "GET",
                f"/jobs/{job_id}/events",
                headers=calls.events_headers(last_event_id),
                timeout=httpx.Timeout(None),
            ) as response:
                if response.status_code == 204:
                    return
                if response.status_code != 200:
                    response.read()
                    raise_for(response)
                parser = SSEParser()
                for line in response.iter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
        except httpx.TransportError as e:
            raise unreachable(self.base_url, e) from e
