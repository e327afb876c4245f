"""GET /jobs/{id}/events in-process: one event per visible change until the
terminal state, Last-Event-ID reconnects, and one poller however many listen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

from chit.api.events import version
from chit.client import Event, SSEParser
from chit.errors import StoreError
from chit.jobs import Beat, ClaimedJob, Failed, Progress, Succeeded
from support.api import Api, stream_started
from support.waiting import until

pytestmark = pytest.mark.anyio

TICK = 0.1  # several poller intervals (0.02 s in these tests)
# Streams a test left running when it failed: cancelled at teardown, or they
# would be collected during a later test as "coroutine never awaited".
STREAMS: list[asyncio.Task] = []


@pytest.fixture(autouse=True)
async def _cancel_streams_left_behind() -> AsyncIterator[None]:
    yield
    for task in STREAMS:
        task.cancel()
    await asyncio.gather(*STREAMS, return_exceptions=True)
    STREAMS.clear()


def events_of(response: httpx.Response) -> list[Event]:
    parser = SSEParser()
    return [e for line in [*response.text.splitlines(), ""] if (e := parser.feed(line))]


def claim(api: Api, job_id: str) -> ClaimedJob:
    [job] = api.store.claim("w", [api.job(job_id).queue], 1, 30)
    return job


async def listen(api: Api, job_id: str, headers: dict[str, str] | None = None) -> asyncio.Task:
    """Open a stream; return once it is watching the job and has read it since."""
    with stream_started(api, job_id) as started:
        task = asyncio.create_task(api.http.get(f"/jobs/{job_id}/events", headers=headers or {}))
        STREAMS.append(task)
        await until(lambda: started() or task.done(), "the stream to watch the job and read it")
    return task


async def polled(api: Api) -> None:
    """Return once the poller has read every watched job since the last change
    (two polls: the first may have started before it), so the next change
    cannot hide this one."""
    hub = api.app.state.chit.hub
    target = hub.polls + 2
    await until(lambda: hub.polls >= target, "the poller to read the change")


def summary(events: Sequence[Event]) -> list[tuple[str, str | None, Any]]:
    out = []
    for e in events:
        job = e.job
        assert job is not None
        out.append((e.event, job.state.value, (job.progress.done, job.progress.total)))
    return out


async def test_one_event_per_change_until_the_terminal_state(api: Api) -> None:
    job_id = await api.submit()
    task = await listen(api, job_id)
    held = claim(api, job_id)
    await polled(api)
    for done in (1, 2):
        api.store.heartbeat([Beat(job_id, held.lease_token, Progress(done, 3))], 30)
        await polled(api)
    api.store.heartbeat([Beat(job_id, held.lease_token)], 30)  # lease only: nothing to tell
    await polled(api)
    api.store.finish([Succeeded(job_id, held.lease_token, {"ok": True})])
    response = await asyncio.wait_for(task, 5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response)
    assert summary(events) == [
        ("state", "queued", (None, None)),
        ("state", "running", (None, None)),
        ("progress", "running", (1, 3)),
        ("progress", "running", (2, 3)),
        ("state", "succeeded", (2, 3)),
    ]
    assert events[-1].job is not None and events[-1].job.result == {"ok": True}
    assert len({e.id for e in events}) == len(events)
    assert response.text.startswith("retry: ")


async def test_a_retry_and_a_failure_are_state_events(api: Api) -> None:
    job_id = await api.submit()
    task = await listen(api, job_id)
    first = claim(api, job_id)
    await polled(api)
    api.store.finish([Failed(job_id, first.lease_token, "flaky", retry_in=0)])
    await polled(api)
    second = claim(api, job_id)
    await polled(api)
    api.store.finish([Failed(job_id, second.lease_token, "PermanentError: no")])
    events = events_of(await asyncio.wait_for(task, 5))
    states = [(e.event, e.job.state.value, e.job.attempts) for e in events if e.job]
    assert states == [
        ("state", "queued", 0),
        ("state", "running", 1),
        ("state", "queued", 1),
        ("state", "running", 2),
        ("state", "failed", 2),
    ]
    assert events[-1].job is not None and events[-1].job.error == "PermanentError: no"


async def test_reconnect_with_last_event_id_resumes_without_repeating(api: Api) -> None:
    job_id = await api.submit()
    held = claim(api, job_id)
    api.store.finish([Succeeded(job_id, held.lease_token, 1)])
    full = events_of(await api.http.get(f"/jobs/{job_id}/events"))
    assert [e.event for e in full] == ["state"]
    last = full[-1].id
    assert last is not None
    # The client saw the terminal event: 204 tells EventSource to stop reconnecting.
    again = await api.http.get(f"/jobs/{job_id}/events", headers={"Last-Event-ID": last})
    assert again.status_code == 204
    # An id from before: the current status comes at once.
    stale = await api.http.get(f"/jobs/{job_id}/events", headers={"Last-Event-ID": "0123"})
    assert [e.id for e in events_of(stale)] == [last]


async def test_reconnect_to_an_unfinished_job_waits_for_the_next_change(api: Api) -> None:
    job_id = await api.submit()
    held = claim(api, job_id)
    seen = version(api.job(job_id))  # what a first connection's last event carried
    task = await listen(api, job_id, {"Last-Event-ID": seen})
    api.store.finish([Succeeded(job_id, held.lease_token, 2)])
    events = events_of(await asyncio.wait_for(task, 5))
    assert [(e.event, e.job.state.value) for e in events if e.job] == [("state", "succeeded")]


async def test_many_listeners_share_one_poller(api: Api) -> None:
    ids = [await api.submit() for _ in range(5)]
    calls: list[int] = []
    hub = api.app.state.chit.hub
    # Each read of the hub's, counted as it starts (so a read under way when
    # the listeners leave is counted before they do).
    read = hub._read

    def counting(job_ids: Sequence[str]) -> Any:
        calls.append(len(job_ids))
        return read(job_ids)

    hub._read = counting
    # Polls under way: one that began before the streams left may still read.
    under_way = [0]
    poll_once = hub.poll_once

    async def counting_polls(job_ids: Sequence[str] | None = None) -> int:
        under_way[0] += 1
        try:
            return await poll_once(job_ids)
        finally:
            under_way[0] -= 1

    hub.poll_once = counting_polls
    tasks = [
        asyncio.create_task(api.http.get(f"/jobs/{job_id}/events"))
        for job_id in ids
        for _ in range(8)
    ]
    STREAMS.extend(tasks)
    await until(lambda: hub.listeners == 40, "40 streams to start watching")
    before, polls_before, started = len(calls), hub.polls, time.monotonic()
    await until(lambda: hub.polls >= polls_before + 5, "five polls with 40 streams watching")
    elapsed = time.monotonic() - started
    made, polls = len(calls) - before, hub.polls - polls_before
    # One call per tick for all 40 listeners, each reading the 5 watched jobs:
    # not 40 calls per tick (one call may be under way at either end), and not
    # much faster than the 0.02 s interval (asyncio fires a timer up to its
    # clock's resolution early: 5 calls in 78 ms were seen on a busy machine).
    assert made <= polls + 1, (made, polls)
    assert made <= elapsed / 0.02 + 2, (made, elapsed)
    assert max(calls) == 5
    for job_id in ids:
        held = claim(api, job_id)
        api.store.finish([Succeeded(job_id, held.lease_token, None)])
    responses = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert all(events_of(r)[-1].job.state.value == "succeeded" for r in responses)  # type: ignore[union-attr]
    await until(
        lambda: hub.listeners == 0 and not under_way[0], "the streams to stop, and their last poll"
    )
    idle = len(calls)
    await asyncio.sleep(TICK * 2)
    assert len(calls) == idle  # nobody listening: no polling


async def test_cancelling_a_queued_job_ends_its_stream(api: Api) -> None:
    job_id = await api.submit()
    task = await listen(api, job_id)
    api.store.cancel(job_id)
    events = events_of(await asyncio.wait_for(task, 5))
    assert [(e.event, e.job.state.value) for e in events if e.job] == [
        ("state", "queued"),
        ("state", "cancelled"),
    ]


async def test_a_job_deleted_while_watched_ends_the_stream(api: Api) -> None:
    job_id = await api.submit()
    task = await listen(api, job_id)
    api.store.get_many = lambda job_ids: []  # type: ignore[method-assign]
    events = events_of(await asyncio.wait_for(task, 5))
    assert [e.event for e in events] == ["state", "gone"]


async def test_a_database_error_as_the_stream_starts_is_an_error_event(api: Api) -> None:
    job_id = await api.submit()
    get = api.store.get
    calls = []

    def failing_second_time(*args: Any) -> Any:
        calls.append(args)
        if len(calls) > 1:
            raise StoreError("database is locked")
        return get(*args)

    api.store.get = failing_second_time  # type: ignore[method-assign]
    response = await api.http.get(f"/jobs/{job_id}/events")
    [event] = events_of(response)
    assert event.event == "error" and event.job is None
    assert "unavailable" in event.data and "reconnect" in event.data
    assert "locked" not in event.data  # the store's message goes to the log only
