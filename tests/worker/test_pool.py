"""The thread pool's wait_here: an idle worker's wait for jobs runs on one of
its job threads, which runs the first job the wait starts itself."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from chit.context import JobContext
from chit.jobs import ClaimedJob
from chit.queue import Task
from chit.worker.execute import Call, Returned
from chit.worker.pool import ThreadPool


def call(job_id: str, ran_on: dict[str, int], after: threading.Event | None = None) -> Call:
    def handler(job: JobContext, body: Any) -> None:
        ran_on[job.id] = threading.get_ident()
        if after is not None:
            assert after.wait(10)

    task = Task("k", handler, None, None, "default", 0)
    job = ClaimedJob(job_id, "k", "default", {}, 1, 3, "tok")
    ctx = JobContext.of(job, store=None, lease_seconds=30)  # type: ignore[arg-type]  # writes nothing
    return Call(task, ctx, {}, job)


def test_the_waiting_thread_runs_the_first_job_its_wait_starts_and_the_pool_the_others() -> None:
    pool = ThreadPool(2)
    ran_on: dict[str, int] = {}
    reported: list[Returned] = []
    both = threading.Semaphore(0)
    waited_on: list[int] = []

    def report(returned: Returned, running: bool = False) -> None:
        reported.append(returned)
        both.release()

    second_ran = threading.Event()

    def wait() -> None:  # as a wake's claim does: the jobs it claimed start
        waited_on.append(threading.get_ident())
        # The first runs until the second has: the second is not kept for later.
        pool.submit(call("first", ran_on, after=second_ran), report, lambda job_id: None)
        pool.submit(
            call("second", ran_on), lambda r, running=False: second_ran.set(), lambda _: None
        )

    pool.wait_here(wait)
    assert both.acquire(timeout=10)
    assert waited_on[0] != threading.get_ident()  # a pool thread waited
    assert ran_on["first"] == waited_on[0]
    assert ran_on["second"] != waited_on[0]
    assert [r.error for r in reported] == [None]


def test_a_job_submitted_by_another_thread_meanwhile_is_not_taken_by_the_waiting_one() -> None:
    pool = ThreadPool(2)
    ran_on: dict[str, int] = {}
    done = threading.Event()
    waiting, go_on = threading.Event(), threading.Event()
    waited_on: list[int] = []

    def wait() -> None:
        waited_on.append(threading.get_ident())
        waiting.set()
        assert go_on.wait(10)

    thread = threading.Thread(target=pool.wait_here, args=(wait,))
    thread.start()
    assert waiting.wait(10)
    pool.submit(call("other", ran_on), lambda r, running=False: done.set(), lambda job_id: None)
    assert done.wait(10)
    go_on.set()
    thread.join(10)
    assert ran_on["other"] != waited_on[0]


def test_what_the_wait_raises_is_raised_to_the_caller_and_the_thread_serves_on() -> None:
    pool = ThreadPool(1)

    def wait() -> None:
        raise RuntimeError("the store went away")

    with pytest.raises(RuntimeError, match="the store went away"):
        pool.wait_here(wait)
    ran_on: dict[str, int] = {}
    done = threading.Event()
    pool.submit(call("after", ran_on), lambda r, running=False: done.set(), lambda job_id: None)
    assert done.wait(10)
