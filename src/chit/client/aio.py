"""`chit.AsyncClient`: the HTTP API for asyncio code."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
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
            headers=calls.client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(
                call.method, call.path, json=call.json, params=call.params, headers=call.headers
            )
        except httpx.TransportError as e:
            raise unreachable(self.base_url, e) from e
        return calls.answer(call, response)

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
        return await self._send(calls.submit(locals()))  # first: the arguments alone

    async def submit_workflow(
        self, jobs: Iterable[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> WorkflowSubmitted:
        return await self._send(calls.submit_workflow(jobs, idempotency_key))

    async def get_workflow(self, workflow_id: str) -> WorkflowOut:
        return await self._send(calls.get_workflow(workflow_id))

    async def cancel_workflow(self, workflow_id: str) -> WorkflowCancelled:
        return await self._send(calls.cancel_workflow(workflow_id))

    async def get(self, job_id: str) -> JobStatus:
        return await self._send(calls.job_call("GET", job_id))

    async def result(self, job_id: str) -> Any:
        return await self._send(calls.job_result(job_id))

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
        return await self._send(calls.list_jobs(state, kind, queue, since, limit, cursor))

    async def retry(self, job_id: str) -> JobStatus:
        return await self._send(calls.job_call("POST", job_id, "/retry"))

    async def cancel(self, job_id: str) -> JobStatus:
        return await self._send(calls.job_call("POST", job_id, "/cancel", calls.CANCEL_OK))

    async def update(
        self,
        job_id: str,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        payload: Any = None,
    ) -> JobStatus:
        return await self._send(calls.edit(job_id, run_at, priority, payload))

    async def signal(
        self, job_id: str, name: str, data: Mapping[str, Any] | None = None
    ) -> SignalOut:
        """`Client.signal` for asyncio."""
        return await self._send(calls.signal(job_id, name, data))

    async def run_now(self, job_id: str) -> JobStatus:
        return await self._send(calls.job_call("POST", job_id, "/run-now"))

    async def replay(
        self,
        ids: Iterable[str] | None = None,
        *,
        kind: str | None = None,
        error_prefix: str | None = None,
        since: datetime | None = None,
    ) -> int:
        return await self._send(calls.replay(ids, kind, error_prefix, since))

    async def failures(self) -> Failures:
        return await self._send(calls.FAILURES)

    async def stats(self) -> StatsOut:
        return await self._send(calls.STATS)

    async def limits(self) -> LimitsOut:
        return await self._send(calls.LIMITS)

    async def set_limits(
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
        return await self._send(calls.set_limits(locals()))  # first: the arguments alone

    async def clear_limits(self, kind: str) -> bool:
        return await self._send(calls.clear_limits(kind))

    async def pause(self, queue: str | None = None, *, kind: str | None = None) -> bool:
        return await self._send(calls.pausing("pause", queue, kind))

    async def resume(self, queue: str | None = None, *, kind: str | None = None) -> bool:
        return await self._send(calls.pausing("resume", queue, kind))

    async def schedules(self) -> SchedulesOut:
        return await self._send(calls.SCHEDULES)

    async def get_schedule(self, name: str) -> ScheduleOut:
        return await self._send(calls.schedule("GET", name))

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
            calls.put_schedule(name, kind, payload, cron, every, tz, catch_up, paused)
        )

    async def pause_schedule(self, name: str) -> ScheduleOut:
        return await self._send(calls.schedule("POST", name, "/pause"))

    async def resume_schedule(self, name: str) -> ScheduleOut:
        return await self._send(calls.schedule("POST", name, "/resume"))

    async def remove_schedule(self, name: str) -> ScheduleRemoved:
        return await self._send(calls.remove_schedule(name))

    async def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        on_update: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        steps = calls.waiting(job_id, timeout, on_update)
        answer: Any = None
        try:
            while True:
                step = steps.send(answer)
                if isinstance(step, Call):
                    answer = await self._send(step)
                else:
                    await asyncio.sleep(step)
                    answer = None
        except StopIteration as done:
            final: JobStatus = done.value
            return final

    async def output(self, job_id: str, after: int = 0, *, limit: int | None = None) -> OutputPage:
        return await self._send(calls.job_output(job_id, after, limit))

    async def stream(
        self, job_id: str, last_event_id: str | None = None
    ) -> AsyncIterator[Streamed]:
        """`Client.stream`: the job's output as it is emitted, picked up where
        it left off after a dropped connection."""
        last, tries = last_event_id, 0
        while True:
            try:
                async for event in self.events(job_id, last):
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
                await asyncio.sleep(min(tries * 0.5, 5.0))

    async def events(self, job_id: str, last_event_id: str | None = None) -> AsyncIterator[Event]:
        try:
            async with self._http.stream(
                "GET",
                f"/jobs/{job_id}/events",
                headers=calls.events_headers(last_event_id),
                timeout=httpx.Timeout(None),
            ) as response:
                if response.status_code == 204:
                    return
                if response.status_code != 200:
                    await response.aread()
                    raise_for(response)
                parser = SSEParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
        except httpx.TransportError as e:
            raise unreachable(self.base_url, e) from e
