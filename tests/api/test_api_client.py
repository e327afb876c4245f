"""chit.AsyncClient against the in-process app (the blocking Client is exercised
end to end against a real server in test_api_e2e.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

import chit
from chit.client import (
    APIConflict,
    APIIdempotencyConflict,
    APIInvalidRequest,
    APINotFound,
    APIUnavailable,
    AsyncClient,
    SSEParser,
    poll_delay,
)
from chit.jobs import Failed, Progress, State, Succeeded
from support.api import Api, stream_started
from support.waiting import until

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(api: Api) -> AsyncIterator[AsyncClient]:
    transport = httpx.ASGITransport(app=api.app)
    async with AsyncClient("http://test", transport=transport) as c:
        yield c


def finish_soon(
    api: Api,
    job_id: str,
    result: object,
    delay: float = 0.2,
    when: Callable[[], bool] = lambda: True,
) -> asyncio.Task:
    """Claim, report progress and finish the job, `delay` apart, once `when()`
    holds (the caller has seen the queued job: a busy machine can be slower than
    any delay)."""

    async def later() -> None:
        await until(when, "the client to see the queued job")
        await asyncio.sleep(delay)
        [held] = api.store.claim("w", [api.job(job_id).queue], 1, 30)
        api.store.checkpoint(job_id, held.lease_token, None, Progress(1, 1), 30)
        await asyncio.sleep(delay)
        api.store.finish([Succeeded(job_id, held.lease_token, result)])

    return asyncio.create_task(later())


async def test_submit_get_wait(api: Api, client: AsyncClient) -> None:
    submitted = await client.submit("echo", {"message": "hi"}, queue="qa", priority=2)
    assert submitted.created and submitted.status_url == f"/jobs/{submitted.job_id}"
    again = await client.submit("echo", {"message": "hi"}, queue="qa", priority=2)
    assert again.created  # no idempotency key: a second job
    status = await client.get(submitted.job_id)
    assert (status.state, status.queue, status.priority) == (State.QUEUED, "qa", 2)
    seen: list[State] = []
    finisher = finish_soon(api, submitted.job_id, {"done": True}, when=lambda: bool(seen))
    try:
        final = await client.wait(
            submitted.job_id, timeout=10, on_update=lambda s: seen.append(s.state)
        )
        await finisher
    finally:
        finisher.cancel()
    assert final.state is State.SUCCEEDED and final.result == {"done": True}
    assert seen[0] is State.QUEUED and seen[-1] is State.SUCCEEDED


async def test_wait_loads_a_large_result(api: Api, client: AsyncClient) -> None:
    submitted = await client.submit("big", {}, queue="qb")
    large = {"blob": "b" * 4000}
    finisher = finish_soon(api, submitted.job_id, large, delay=0.05)
    final = await client.wait(submitted.job_id, timeout=10)
    await finisher
    assert final.result == large and final.result_url is not None


async def test_wait_times_out(client: AsyncClient) -> None:
    submitted = await client.submit("echo", {"message": "never run"})
    with pytest.raises(TimeoutError, match="still queued"):
        await client.wait(submitted.job_id, timeout=0.3)


async def test_events_follow_the_job(api: Api, client: AsyncClient) -> None:
    submitted = await client.submit("echo", {"message": "e"}, queue="qe")
    # Events arrive here only when the response ends: start once the stream has
    # read the queued job.
    with stream_started(api, submitted.job_id) as started:
        finisher = finish_soon(api, submitted.job_id, 7, delay=0.1, when=started)
        try:
            async with asyncio.timeout(10):
                events = [e async for e in client.events(submitted.job_id)]
                await finisher
        finally:
            finisher.cancel()
    states = [e.job.state for e in events if e.job]
    assert states[0] is State.QUEUED and states[-1] is State.SUCCEEDED


async def test_operations(api: Api, client: AsyncClient) -> None:
    submitted = await client.submit("echo", {"message": "op"}, queue="qo")
    assert (await client.cancel(submitted.job_id)).state is State.CANCELLED
    assert (await client.retry(submitted.job_id)).state is State.QUEUED
    [held] = api.store.claim("w", ["qo"], 1, 30)
    api.store.finish([Failed(submitted.job_id, held.lease_token, "KeyError: k")])
    assert (await client.failures()).groups[0].error == "KeyError: k"
    assert (await client.stats()).by_state["failed"] == 1
    assert await client.replay(kind="echo") == 1
    assert await client.replay([submitted.job_id]) == 0  # queued now, not failed
    page = await client.list(state="queued", limit=10)
    assert [j.id for j in page.jobs] == [submitted.job_id] and page.next_cursor is None


async def test_errors_are_the_matching_chit_exceptions(client: AsyncClient) -> None:
    with pytest.raises(chit.JobNotFound) as missing:
        await client.get("0" * 26)
    assert isinstance(missing.value, APINotFound) and missing.value.status == 404
    with pytest.raises(chit.InvalidRequest) as unknown:
        await client.submit("nope")
    assert isinstance(unknown.value, APIInvalidRequest)
    assert unknown.value.code == "unknown_kind" and "known kinds: big, echo" in str(unknown.value)
    await client.submit("echo", {"message": "a"}, idempotency_key="k1")
    with pytest.raises(chit.IdempotencyConflict) as conflict:
        await client.submit("echo", {"message": "b"}, idempotency_key="k1")
    assert isinstance(conflict.value, APIIdempotencyConflict)
    queued = await client.submit("echo", {"message": "q"})
    with pytest.raises(chit.InvalidTransition) as transition:
        await client.retry(queued.job_id)
    assert isinstance(transition.value, APIConflict)


async def test_an_unreachable_server_is_a_store_like_error() -> None:
    async with AsyncClient("http://127.0.0.1:9", timeout=2) as c:
        with pytest.raises(chit.StoreError) as raised:
            await c.get("0" * 26)
    assert isinstance(raised.value, APIUnavailable)
    assert "cannot reach the chit API at http://127.0.0.1:9" in str(raised.value)


def test_poll_delay_schedule() -> None:
    assert poll_delay(0, None) == 1.0
    assert poll_delay(9.9, 1) == 1.0
    assert poll_delay(10, 1) == 5.0
    assert poll_delay(2, 30) == 30


def test_sse_parser() -> None:
    parser = SSEParser()
    lines = ["retry: 2000", "", ": keepalive", "", "id: 1", "event: state", "data: {}", ""]
    events = [e for line in lines if (e := parser.feed(line))]
    assert [(e.id, e.event, e.data) for e in events] == [("1", "state", "{}")]
