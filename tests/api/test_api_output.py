"""A job's output over HTTP (issue 25), on both backends: `GET
/jobs/{id}/output` pages it, bad `after` is a 422 and another tenant's job a
404; `output` events on `GET /jobs/{id}/events` come in order between the
states, resume from `Last-Event-ID` with nothing lost or repeated, and a job
that runs and finishes between two reads still shows running before
succeeded; `AsyncClient.output` and `.stream` read them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

import chit
from chit.client import AsyncClient, SSEParser
from chit.client.sse import Event
from chit.jobs import ClaimedJob, Succeeded, Suspended
from support.api import (
    ACME_KEY,
    ACME_READER,
    GLOBEX_ADMIN,
    Api,
    assert_error,
    bearer,
    running_api,
    stream_started,
)
from support.waiting import until

pytestmark = pytest.mark.anyio


def events_of(response: httpx.Response) -> list[Event]:
    parser = SSEParser()
    return [e for line in [*response.text.splitlines(), ""] if (e := parser.feed(line))]


def claim(api: Api, job_id: str) -> ClaimedJob:
    [job] = api.store.claim("w", [api.job(job_id).queue], 1, 30)
    return job


def emit(api: Api, job: ClaimedJob, *values: str) -> None:
    assert api.store.append_output(job.id, job.lease_token, list(values), 1) is not None


def told(events: list[Event]) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for e in events:
        if e.output is not None:
            out.append(("output", (e.output.seq, e.output.attempt, e.output.data)))
        else:
            assert e.job is not None
            out.append((e.event, e.job.state.value))
    return out


async def test_output_pages_by_seq_and_refuses_a_bad_after(api: Api) -> None:
    job_id = await api.submit()
    empty = await api.http.get(f"/jobs/{job_id}/output")
    assert empty.status_code == 200 and empty.json() == {"output": [], "next_after": 0}
    held = claim(api, job_id)
    emit(api, held, '"a"', '{"b":1}', "3")
    page = (await api.http.get(f"/jobs/{job_id}/output", params={"limit": 2})).json()
    assert [(o["seq"], o["attempt"], o["data"]) for o in page["output"]] == [
        (1, 1, "a"),
        (2, 1, {"b": 1}),
    ]
    assert page["next_after"] == 2 and page["output"][0]["at"].endswith(("Z", "+00:00"))
    rest = (await api.http.get(f"/jobs/{job_id}/output", params={"after": 2})).json()
    assert [o["data"] for o in rest["output"]] == [3] and rest["next_after"] == 3
    after_all = (await api.http.get(f"/jobs/{job_id}/output", params={"after": 3})).json()
    assert after_all == {"output": [], "next_after": 3}
    for bad in ("-1", "x", "1.5", str(2**60)):
        response = await api.http.get(f"/jobs/{job_id}/output", params={"after": bad})
        assert_error(response, 422)
    assert_error(await api.http.get(f"/jobs/{job_id}/output", params={"limit": 0}), 422)
    assert_error(await api.http.get("/jobs/01JNOSUCHJOB0000000000000/output"), 404)


async def test_output_of_another_tenants_job_is_404(keyed_api: Api) -> None:
    job_id = await keyed_api.submit(ACME_KEY)
    mine = await keyed_api.http.get(f"/jobs/{job_id}/output", headers=bearer(ACME_READER))
    assert mine.status_code == 200
    other = await keyed_api.http.get(f"/jobs/{job_id}/output", headers=bearer(GLOBEX_ADMIN))
    assert_error(other, 404, "job_not_found")


async def test_a_job_run_between_two_reads_shows_running_its_output_then_succeeded(
    api: Api,
) -> None:
    job_id = await api.submit()
    hub = api.app.state.chit.hub
    task = asyncio.create_task(api.http.get(f"/jobs/{job_id}/events"))
    await until(lambda: hub.listeners == 1, "the stream to watch the job")
    watch = next(iter(hub._watches[job_id]))
    await until(lambda: watch.seen is not None, "the stream to send the queued job")
    polls = hub.polls
    await until(lambda: hub.polls > polls, "the hub to read the queued job")
    # No await from here to the finish: the hub cannot read in between (a read
    # under way on its thread reads the heads before the job, so it cannot
    # see output of an attempt whose running it has not seen).
    held = claim(api, job_id)
    emit(api, held, '"x"', '"y"')
    api.store.finish([Succeeded(job_id, held.lease_token, "done")])
    response = await asyncio.wait_for(task, 10)
    events = events_of(response)
    assert told(events) == [
        ("state", "queued"),
        ("state", "running"),
        ("output", (1, 1, "x")),
        ("output", (2, 1, "y")),
        ("state", "succeeded"),
    ]
    assert len({e.id for e in events}) == len(events)

    # Reconnecting after the first value: the rest once, then nothing at all.
    again = await api.http.get(
        f"/jobs/{job_id}/events", headers={"Last-Event-ID": events[2].id or ""}
    )
    assert told(events_of(again)) == [("output", (2, 1, "y")), ("state", "succeeded")]
    done = await api.http.get(
        f"/jobs/{job_id}/events", headers={"Last-Event-ID": events[-1].id or ""}
    )
    assert done.status_code == 204


@pytest.fixture
async def client(api: Api) -> AsyncIterator[AsyncClient]:
    transport = httpx.ASGITransport(app=api.app)
    async with AsyncClient("http://test", transport=transport) as c:
        yield c


async def test_the_client_reads_and_streams_output(api: Api, client: AsyncClient) -> None:
    """(httpx's ASGI transport hands over a response once it is whole: the
    stream as it is written is tested against a real server, tests/e2e.)"""
    job_id = await api.submit()
    held = claim(api, job_id)
    emit(api, held, '"first"', '"second"')
    api.store.finish([Succeeded(job_id, held.lease_token, None)])
    got = [(value.seq, value.attempt, value.data) async for value in client.stream(job_id)]
    assert got == [(1, 1, "first"), (2, 1, "second")]
    page = await client.output(job_id, after=1)
    assert [(o.seq, o.data) for o in page.output] == [(2, "second")] and page.next_after == 2


@pytest.fixture
async def pushed_api(queue: chit.Queue) -> AsyncIterator[Api]:
    """The app with its event hub's interval read an hour: what reaches a
    stream within a test's wait was pushed (NOTIFY, pub/sub, SQLite's data
    version), not found by the periodic read."""
    async for a in running_api(queue, event_interval=3600):
        yield a


async def test_a_cancel_and_a_signal_are_pushed_to_a_stream(pushed_api: Api) -> None:
    api = pushed_api
    cancelled = await api.submit()
    with stream_started(api, cancelled) as started:
        task = asyncio.create_task(api.http.get(f"/jobs/{cancelled}/events"))
        await until(started, "the stream to read the queued job")
        api.store.cancel(cancelled)
        response = await asyncio.wait_for(task, 10)
    assert told(events_of(response)) == [("state", "queued"), ("state", "cancelled")]

    waiting = await api.submit()
    held = claim(api, waiting)
    api.store.finish([Suspended(waiting, held.lease_token, signal="go")])
    with stream_started(api, waiting) as started:
        task = asyncio.create_task(api.http.get(f"/jobs/{waiting}/events"))
        await until(started, "the stream to read the waiting job")
        watch = next(iter(api.app.state.chit.hub._watches[waiting]))
        first = watch.seen
        api.queue.signal(waiting, "go", {"by": "ana"})
        await until(lambda: watch.seen != first, "the queued job to be sent")
        api.store.cancel(waiting)
        response = await asyncio.wait_for(task, 10)
    assert told(events_of(response)) == [
        ("state", "waiting"),
        ("state", "queued"),
        ("state", "cancelled"),
    ]
