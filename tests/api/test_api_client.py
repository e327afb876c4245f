"""chit.AsyncClient against the in-process app (the blocking Client is exercised
end to end against a real server in test_api_e2e.py)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

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
from chit.jobs import Failed, JobFilter, Progress, State, Succeeded
from chit.limits import Rate
from chit.worker.scheduler import Scheduler
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


async def test_submit_sets_the_jobs_timeout(api: Api, client: AsyncClient) -> None:
    timed = await client.submit("echo", {"message": "t"}, timeout=7.5)
    assert api.job(timed.job_id).timeout == 7.5
    assert (await client.get(timed.job_id)).timeout == 7.5
    plain = await client.submit("echo", {"message": "t"})
    assert api.job(plain.job_id).timeout is None  # the task's: echo has none


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


async def test_update_and_run_now(api: Api, client: AsyncClient) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    submitted = await client.submit("echo", {"message": "a"}, queue="qe", run_at=later)
    sooner = later - timedelta(minutes=30)
    status = await client.update(submitted.job_id, run_at=sooner, payload={"message": "b"})
    assert status.run_at is not None and abs((status.run_at - sooner).total_seconds()) < 0.01
    assert api.job(submitted.job_id).payload["message"] == "b"
    assert (await client.update(submitted.job_id, priority=3)).priority == 3
    assert api.store.claim("w", ["qe"], 1, 30) == []
    await client.run_now(submitted.job_id)
    [held] = api.store.claim("w", ["qe"], 1, 30)
    with pytest.raises(chit.InvalidTransition) as started:
        await client.update(held.id, priority=1)
    assert isinstance(started.value, APIConflict)
    with pytest.raises(chit.InvalidRequest, match="say what to change"):
        await client.update(held.id)
    with pytest.raises(chit.JobNotFound):
        await client.run_now("0" * 26)


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


# Flow control


async def test_submit_with_a_concurrency_key(api: Api, client: AsyncClient) -> None:
    submitted = await client.submit("echo", {"message": "k"}, concurrency_key="customer-7")
    assert api.job(submitted.job_id).concurrency_key == "customer-7"
    assert (await client.get(submitted.job_id)).concurrency_key == "customer-7"
    with pytest.raises(chit.InvalidRequest, match="concurrency_key"):
        await client.submit("echo", {"message": "k"}, concurrency_key="")
    assert len(api.store.list(JobFilter()).jobs) == 1


async def test_limits_set_read_back_and_clear(api: Api, client: AsyncClient) -> None:
    assert (await client.limits()).limits == []
    entry = await client.set_limits("echo", concurrency=3, rate="10/s")
    assert (entry.kind, entry.concurrency, entry.rate) == ("echo", 3, "10/s")
    merged = await client.set_limits("echo", key_concurrency=1, key_rate=Rate.parse("5/m"))
    assert (merged.concurrency, merged.key_concurrency, merged.key_rate) == (3, 1, "5/m")
    [listed] = (await client.limits()).limits
    assert listed == merged
    assert (await client.stats()).limits == [merged]
    assert await client.clear_limits("echo") is True
    assert await client.clear_limits("echo") is False
    assert (await client.limits()).limits == []


async def test_limits_of_kinds_that_need_escaping(api: Api, client: AsyncClient) -> None:
    for kind in ("reports/daily", "50% off", "a?b#c", "ünïcode kind"):
        assert (await client.set_limits(kind, concurrency=2)).kind == kind
        assert await client.pause(kind=kind) is True
    assert sorted(k.kind for k in api.store.limits()) == sorted(
        ["reports/daily", "50% off", "a?b#c", "ünïcode kind"]
    )
    assert [p.kind for p in (await client.limits()).paused] == sorted(
        ["reports/daily", "50% off", "a?b#c", "ünïcode kind"]
    )
    assert await client.resume(kind="a?b#c") is True
    assert await client.clear_limits("reports/daily") is True


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        ({}, "say which limits to set"),
        ({"rate": "0/s"}, "not 0"),
        ({"rate": "abc"}, "rate 'abc' is not N/s"),
        ({"concurrency": -1}, "not -1"),
        ({"concurrency": 10**12}, "not 1000000000000"),
        ({"key_rate": "1/d"}, "is not N/s"),
    ],
)
async def test_bad_limits_raise_the_servers_message_and_store_nothing(
    api: Api, client: AsyncClient, limits: dict, says: str
) -> None:
    with pytest.raises(chit.InvalidRequest, match=re.escape(says)) as raised:
        await client.set_limits("echo", **limits)
    assert isinstance(raised.value, APIInvalidRequest) and raised.value.status == 422
    assert api.store.limits() == []


async def test_pause_and_resume(api: Api, client: AsyncClient) -> None:
    assert await client.pause("emails") is True
    assert await client.pause("emails") is False
    assert await client.pause(kind="echo") is True
    assert [(p.queue, p.kind) for p in (await client.limits()).paused] == [
        ("emails", None),
        (None, "echo"),
    ]
    assert [(p.queue, p.kind) for p in (await client.stats()).paused] == [
        ("emails", None),
        (None, "echo"),
    ]
    assert await client.resume("emails") is True
    assert await client.resume("emails") is False
    assert await client.resume(kind="echo") is True
    assert api.store.pauses() == []


@pytest.mark.parametrize("given", [{}, {"queue": "q", "kind": "k"}])
async def test_pause_needs_a_queue_or_a_kind(api: Api, client: AsyncClient, given: dict) -> None:
    for action in (client.pause, client.resume):
        with pytest.raises(chit.InvalidRequest, match="exactly one"):
            await action(**given)
    assert api.store.pauses() == []


# Schedules


async def test_schedules_put_list_get_pause_resume_and_remove(
    api: Api, client: AsyncClient
) -> None:
    assert (await client.schedules()).schedules == []
    nightly = await client.put_schedule(
        "nightly", "echo", {"message": "n"}, cron="0 8 * * *", tz="Europe/Paris", catch_up="none"
    )
    assert (nightly.rule, nightly.catch_up, nightly.source, nightly.paused) == (
        "0 8 * * * (Europe/Paris)",
        "none",
        "operator",
        False,
    )
    assert nightly.payload["message"] == "n" and nightly.runs == []
    # A name with "." and ":" is one path segment.
    tick = await client.put_schedule("team.a:tick", "echo", {"message": "t"}, every="1s")
    assert (tick.every, tick.cron, tick.rule) == (1, None, "every 1s")
    Scheduler(api.store, api.queue).run_once(datetime.now(UTC) + timedelta(seconds=2))

    listed = (await client.schedules()).schedules
    assert [s.name for s in listed] == ["nightly", "team.a:tick"]
    got = await client.get_schedule("team.a:tick")
    [run] = got.runs or []
    assert (run.job_id, run.state) == (got.last_job_id, State.QUEUED)
    assert api.job(run.job_id).idempotency_key == f"schedule:team.a:tick:{run.slot}"

    assert (await client.pause_schedule("team.a:tick")).paused is True
    assert api.store.get_schedule("team.a:tick").paused  # type: ignore[union-attr]
    assert (await client.resume_schedule("team.a:tick")).paused is False
    # The same rule again keeps its next slot; `paused` given sets the pause.
    again = await client.put_schedule(
        "nightly", "echo", {"message": "n"}, cron="0 8 * * *", tz="Europe/Paris", paused=True
    )
    assert (again.paused, again.next_at, again.catch_up) == (True, nightly.next_at, "latest")

    removed = await client.remove_schedule("team.a:tick")
    assert (removed.name, removed.removed) == ("team.a:tick", True)
    assert [s.name for s in api.store.list_schedules()] == ["nightly"]


async def test_an_unknown_schedule_raises_not_found(api: Api, client: AsyncClient) -> None:
    for call in (
        client.get_schedule,
        client.pause_schedule,
        client.resume_schedule,
        client.remove_schedule,
    ):
        with pytest.raises(chit.JobNotFound) as raised:
            await call("nope")
        assert isinstance(raised.value, APINotFound)
        assert (raised.value.status, raised.value.code) == (404, "schedule_not_found")
        assert str(raised.value) == "no schedule named 'nope'"
    assert api.store.list_schedules() == []


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"cron": "61 * * * *"}, "cron rule '61 * * * *' does not parse"),
        ({}, "exactly one of cron= and every="),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every": "1m", "kind": "nope"}, "unknown job kind 'nope'"),
        ({"every": "1m", "payload": {"message": 3}}, "message"),
    ],
)
async def test_bad_schedules_raise_the_servers_message_and_store_nothing(
    api: Api, client: AsyncClient, given: dict[str, Any], says: str
) -> None:
    fields = {"kind": "echo", "payload": {"message": "m"}} | given
    with pytest.raises(chit.InvalidRequest, match=re.escape(says)) as raised:
        await client.put_schedule("s", **fields)
    assert isinstance(raised.value, APIInvalidRequest) and raised.value.status == 422
    assert api.store.list_schedules() == []


async def test_signal_stores_the_first_and_answers_it_after(api: Api, client: AsyncClient) -> None:
    submitted = await client.submit("echo", {"message": "a"})
    first = await client.signal(submitted.job_id, "approval", {"by": "ana"})
    assert (first.created, first.data) == (True, {"by": "ana"})
    again = await client.signal(submitted.job_id, "approval")
    assert (again.created, again.data) == (False, {"by": "ana"})
    with pytest.raises(chit.InvalidRequest, match="at most 200"):
        await client.signal(submitted.job_id, "x" * 201)
    with pytest.raises(chit.JobNotFound):
        await client.signal("0" * 26, "approval")
    [held] = api.store.claim("w", [api.job(submitted.job_id).queue], 1, 30)
    api.store.finish([Succeeded(held.id, held.lease_token, None)])
    with pytest.raises(chit.InvalidTransition):
        await client.signal(submitted.job_id, "other")
