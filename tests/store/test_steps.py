"""Durable steps on every backend (DESIGN.md, "Workflows and steps"; issue 14):
`JobContext.step` over a real store runs its function once per job, a later
attempt gets the stored result, a fenced-out write stores nothing and is
logged, bad names and results are refused with nothing stored, steps survive
retry and replay and go with their job when it is pruned."""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from chit import InvalidStep, JobContext, PermanentError
from chit.jobs import ClaimedJob, Failed, NewJob, ReplaySelector, Succeeded
from chit.store.base import Store

if TYPE_CHECKING:
    from support.store_inspection import StoreInspection

LEASE = 30.0


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def claim(store: Store, **kwargs: Any) -> ClaimedJob:
    claimed = store.claim("w1", ["default"], 1, LEASE, **kwargs)
    assert len(claimed) == 1, claimed
    return claimed[0]


def context(store: Store, job: ClaimedJob) -> JobContext:
    return JobContext.of(job, store, LEASE)


class Counted:
    """A step function that counts its calls."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.result if not args and not kwargs else [self.result, list(args), kwargs]


def test_a_step_runs_once_and_a_later_attempt_gets_its_result(store: Store) -> None:
    job_id = store.enqueue(NewJob("k", {}, max_attempts=3)).id
    first = context(store, claim(store))
    fn = Counted({"rows": 3})
    assert first.step("fetch", fn, 1, 2, b="c") == [{"rows": 3}, [1, 2], {"b": "c"}]
    assert first.step("fetch", fn) == [{"rows": 3}, [1, 2], {"b": "c"}]  # same attempt
    assert fn.calls == 1

    # The worker dies: the lease runs out and another attempt takes the job.
    store.rescue_expired(now=later(LEASE * 3))
    second = context(store, claim(store, now=later(LEASE * 3)))
    assert second.attempt == 2
    assert second.step("fetch", fn) == [{"rows": 3}, [1, 2], {"b": "c"}]
    assert fn.calls == 1
    assert second.step("merge", Counted("done")) == "done"
    steps = store.steps(job_id)
    assert [(s.name, s.attempt) for s in steps] == [("fetch", 1), ("merge", 2)]
    assert steps[1].result == "done" and steps[0].created_at <= steps[1].created_at


def test_the_stored_form_is_returned_the_first_time_too(store: Store) -> None:
    store.enqueue(NewJob("k", {}))
    ctx = context(store, claim(store))
    assert ctx.step("t", Counted((1, 2))) == [1, 2]
    assert ctx.step("none", Counted(None)) is None
    assert ctx.stored_step("none") == (True, None)
    assert ctx.stored_step("never") == (False, None)


def test_a_fenced_out_step_stores_nothing_and_is_logged(
    store: Store, inspect: StoreInspection, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = store.enqueue(NewJob("k", {}, max_attempts=3)).id
    stale = context(store, claim(store))
    # Another worker takes the job over; the first one still runs.
    store.rescue_expired(now=later(LEASE * 3))
    holder = claim(store, now=later(LEASE * 3))
    fn = Counted("late")
    with caplog.at_level(logging.WARNING, logger="chit.worker"):
        assert stale.step("fetch", fn) == "late"  # the handler goes on; nothing sticks
    assert fn.calls == 1
    assert stale.lease_lost
    assert f"job {job_id}: step 'fetch' not stored: the lease was lost" in caplog.text
    assert store.steps(job_id) == [] and inspect.step_count() == 0
    assert not store.save_step(job_id, stale.lease_token, "fetch", "late")
    # The holder's write is not held back by the stale one.
    assert context(store, holder).step("fetch", Counted("mine")) == "mine"
    assert [(s.name, s.result) for s in store.steps(job_id)] == [("fetch", "mine")]


def test_a_finished_job_stores_no_step(store: Store, inspect: StoreInspection) -> None:
    store.enqueue(NewJob("k", {}))
    job = claim(store)
    assert store.finish([Succeeded(job.id, job.lease_token)]) == [True]
    assert not store.save_step(job.id, job.lease_token, "late", 1)
    assert inspect.step_count() == 0


def test_a_step_already_stored_keeps_its_first_result(store: Store) -> None:
    store.enqueue(NewJob("k", {}))
    job = claim(store)
    assert store.save_step(job.id, job.lease_token, "s", {"v": 1})
    assert store.save_step(job.id, job.lease_token, "s", {"v": 2})
    assert store.step(job.id, "s") == (True, {"v": 1})


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "a step name must not be empty"),
        ("x" * 201, "is 201 characters; at most 200"),
        ("a\x00b", "holds a NUL or a lone surrogate"),
        ("\ud800", "holds a NUL or a lone surrogate"),
        (7, "a step name is text, not int"),
    ],
)
def test_a_bad_step_name_is_refused_before_anything_runs(
    store: Store, inspect: StoreInspection, name: Any, message: str
) -> None:
    store.enqueue(NewJob("k", {}))
    ctx = context(store, claim(store))
    fn = Counted(1)
    with pytest.raises(InvalidStep, match=message):
        ctx.step(name, fn)
    assert fn.calls == 0 and inspect.step_count() == 0
    with pytest.raises(InvalidStep, match=message):
        asyncio.run(ctx.astep(name, fn))
    assert fn.calls == 0 and inspect.step_count() == 0


def test_a_step_name_of_200_characters_is_stored(store: Store) -> None:
    store.enqueue(NewJob("k", {}))
    ctx = context(store, claim(store))
    assert ctx.step("é" * 200, Counted(1)) == 1
    assert [s.name for s in store.steps(ctx.id)] == ["é" * 200]


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        ({1, 2}, "TypeError: Object of type set is not JSON serializable"),
        (math.nan, "ValueError: Out of range float values are not JSON compliant"),
        ({"k": object()}, "TypeError: Object of type object is not JSON serializable"),
        ("a\x00b", "contains a NUL character"),
    ],
)
def test_a_result_that_is_not_json_is_refused_and_nothing_stored(
    store: Store, inspect: StoreInspection, result: Any, problem: str
) -> None:
    store.enqueue(NewJob("k", {}))
    ctx = context(store, claim(store))
    with pytest.raises(InvalidStep) as raised:
        ctx.step("bad", Counted(result))
    assert f"step 'bad' returned a value that is not JSON ({problem}" in str(raised.value)
    assert str(raised.value).endswith("nothing was stored")
    assert isinstance(raised.value, PermanentError)  # a retry would run the same code
    assert inspect.step_count() == 0 and ctx.stored_step("bad") == (False, None)


def test_astep_awaits_a_coroutine_function_and_step_refuses_one(
    store: Store, inspect: StoreInspection
) -> None:
    store.enqueue(NewJob("k", {}))
    ctx = context(store, claim(store))
    calls = []

    async def fetch(n: int) -> dict[str, int]:
        calls.append(n)
        await asyncio.sleep(0)
        return {"n": n}

    assert asyncio.run(ctx.astep("fetch", fetch, 5)) == {"n": 5}
    assert asyncio.run(ctx.astep("fetch", fetch, 6)) == {"n": 5}
    assert asyncio.run(ctx.astep("plain", Counted("p"))) == "p"
    assert calls == [5]
    with pytest.raises(InvalidStep, match=r"coroutine function; .*await job\.astep"):
        ctx.step("other", fetch, 1)
    with pytest.raises(InvalidStep, match="returned an awaitable"):
        ctx.step("other", lambda: fetch(1))
    assert calls == [5] and inspect.step_count() == 2


def test_steps_are_kept_by_retry_and_replay(store: Store) -> None:
    store.enqueue(NewJob("k", {}, max_attempts=1))
    job = claim(store)
    context(store, job).step("fetch", Counted("kept"))
    assert store.finish([Failed(job.id, job.lease_token, "boom")]) == [True]
    assert store.replay(ReplaySelector(ids=(job.id,))) == 1
    again = context(store, claim(store))
    fn = Counted("new")
    assert again.step("fetch", fn) == "kept" and fn.calls == 0
    assert store.finish([Failed(job.id, again.lease_token, "boom")]) == [True]
    assert store.retry(job.id)
    assert context(store, claim(store)).stored_step("fetch") == (True, "kept")


def test_prune_deletes_the_steps_of_pruned_jobs_only(
    store: Store, inspect: StoreInspection
) -> None:
    store.enqueue(NewJob("k", {}))
    done = claim(store)
    context(store, done).step("s", Counted(1))
    assert store.finish([Succeeded(done.id, done.lease_token)]) == [True]
    store.enqueue(NewJob("k", {}))
    running = claim(store)
    context(store, running).step("s", Counted(2))
    assert inspect.step_count() == 2

    assert store.prune(60, now=later(3600)) == 1
    assert store.steps(done.id) == []
    assert [s.result for s in store.steps(running.id)] == [2]
    assert inspect.step_count() == 1
