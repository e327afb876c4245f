"""Timeouts in a worker of the test's own process, on both backends: a sync
thread past its deadline sees `job.cancelled`, keeps its slot until it returns
and what it returns is dropped; an async handler is cancelled, and keeps its
slot while it goes on after its cancellation; a job's own
timeout wins over its task's. And the process pool's start-up refusals."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import chit
from chit.errors import ConfigError
from chit.jobs import AttemptOutcome, State
from chit.settings import Settings
from chit.worker import Worker
from chit.worker.deadlines import Deadlines
from support.jobs import get, wait_terminal
from support.postgres import sqlite_or_emptied_postgres
from support.waiting import wait_until


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def timeouts_queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[chit.Queue]:
    url = sqlite_or_emptied_postgres(request, tmp_path)
    settings = Settings(database_url=url, backoff_base=0.001, backoff_max=0.002)
    q = chit.Queue(settings=settings)
    q.store.migrate()
    yield q
    q.close()


@pytest.fixture
def running() -> Iterator[list[tuple[Worker, threading.Thread]]]:
    """Workers run on threads of their own; at teardown each is stopped and
    waited for, before its queue's store is closed under it."""
    workers: list[tuple[Worker, threading.Thread]] = []
    yield workers
    for worker, _ in workers:
        worker.stop()
    for _, thread in workers:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a worker did not stop"


def start(workers: list[tuple[Worker, threading.Thread]], worker: Worker) -> Worker:
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    workers.append((worker, thread))
    return worker


@pytest.mark.timeout(60)
def test_a_thread_past_its_deadline_sees_cancelled_keeps_its_slot_and_its_result_is_dropped(
    timeouts_queue: chit.Queue, running: list[tuple[Worker, threading.Thread]]
) -> None:
    q = timeouts_queue
    reasons: list[str | None] = []
    release = threading.Event()

    @q.task("stubborn", timeout=0.5, max_attempts=1)
    def stubborn(job: chit.JobContext, body: dict) -> dict:
        waiting = threading.Event()
        while not job.cancelled:
            waiting.wait(0.01)
        reasons.append(job.cancel_reason)
        release.wait(30)
        return {"late": True}

    q.task("after")(lambda job, body: "ran")
    first = q.enqueue("stubborn").id
    second = q.enqueue("after").id
    start(running, Worker(q, concurrency=1, poll_interval=0.05))

    job = wait_terminal(q, first, 30)
    assert job.state is State.FAILED
    assert job.error == "timed out after 0.5 s"
    wait_until(lambda: reasons, 10, what="the handler to see job.cancelled")
    assert reasons == ["timed out after 0.5 s"]
    # Its thread still runs: the one slot is taken, so the next job waits.
    assert get(q, second).state is State.QUEUED
    release.set()
    assert wait_terminal(q, second, 30).state is State.SUCCEEDED
    job = get(q, first)
    assert (job.state, job.result, job.error) == (State.FAILED, None, "timed out after 0.5 s")
    [attempt] = q.store.attempts(first)
    assert (attempt.outcome, attempt.error) == (AttemptOutcome.FAILED, "timed out after 0.5 s")


@pytest.mark.timeout(60)
def test_a_timed_out_attempt_is_retried_like_any_error(
    timeouts_queue: chit.Queue, running: list[tuple[Worker, threading.Thread]]
) -> None:
    q = timeouts_queue

    @q.task("slow_first", max_attempts=3)
    async def slow_first(job: chit.JobContext, body: dict) -> int:
        if job.attempt == 1:
            await asyncio.sleep(30)
        return job.attempt

    job_id = q.enqueue("slow_first", timeout=0.3).id
    start(running, Worker(q, poll_interval=0.05))
    job = wait_terminal(q, job_id, 30)
    assert (job.state, job.result, job.attempts) == (State.SUCCEEDED, 2, 2)
    first, second = q.store.attempts(job_id)
    assert (first.outcome, first.error) == (AttemptOutcome.RETRIED, "timed out after 0.3 s")
    assert second.outcome is AttemptOutcome.SUCCEEDED


def test_an_async_handler_is_cancelled_at_its_deadline(
    timeouts_queue: chit.Queue, running: list[tuple[Worker, threading.Thread]]
) -> None:
    q = timeouts_queue
    cleaned_up = threading.Event()

    @q.task("nap", timeout=0.2, max_attempts=1)
    async def nap(job: chit.JobContext, body: dict) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cleaned_up.set()
            raise

    job_id = q.enqueue("nap").id
    start(running, Worker(q, poll_interval=0.05))
    job = wait_terminal(q, job_id, 30)
    assert (job.state, job.error) == (State.FAILED, "timed out after 0.2 s")
    assert cleaned_up.is_set()  # cancelled before the outcome was recorded


@pytest.mark.timeout(60)
def test_an_async_handler_that_goes_on_after_its_cancellation_keeps_its_slot_until_it_ends(
    timeouts_queue: chit.Queue, running: list[tuple[Worker, threading.Thread]]
) -> None:
    q = timeouts_queue
    release = threading.Event()
    cancelled = threading.Event()

    @q.task("deaf", timeout=0.2, max_attempts=1)
    async def deaf(job: chit.JobContext, body: dict) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            await asyncio.to_thread(release.wait, 30)  # cleaning up, at length

    q.task("after")(lambda job, body: "ran")
    first = q.enqueue("deaf").id
    second = q.enqueue("after").id
    worker = start(running, Worker(q, concurrency=1, poll_interval=0.05))

    job = wait_terminal(q, first, 30)
    assert (job.state, job.error) == (State.FAILED, "timed out after 0.2 s")
    assert cancelled.is_set()
    # Recorded, while the handler goes on: the one slot is taken, the next job waits.
    assert worker.slots.busy() == 1
    assert get(q, second).state is State.QUEUED
    release.set()
    assert wait_terminal(q, second, 30).state is State.SUCCEEDED


def test_a_jobs_own_timeout_wins_over_its_tasks_and_none_means_the_tasks(
    timeouts_queue: chit.Queue,
) -> None:
    q = timeouts_queue
    q.task("t", timeout=60)(lambda job, body: job.timeout)
    q.task("plain")(lambda job, body: job.timeout)
    ids = [q.enqueue("t").id, q.enqueue("t", timeout=5).id, q.enqueue("plain").id]
    assert [get(q, i).timeout for i in ids] == [60.0, 5.0, None]
    Worker(q).run_until_idle()
    assert [get(q, i).result for i in ids] == [60.0, 5.0, None]


def test_the_same_idempotency_key_with_another_timeout_is_a_conflict(
    timeouts_queue: chit.Queue,
) -> None:
    q = timeouts_queue
    q.task("t")(lambda job, body: None)
    first = q.enqueue("t", idempotency_key="k", timeout=2)
    assert q.enqueue("t", idempotency_key="k", timeout=2.0).id == first.id
    with pytest.raises(chit.IdempotencyConflict):
        q.enqueue("t", idempotency_key="k", timeout=3)


def test_deadlines_fire_in_order_and_not_once_cancelled() -> None:
    deadlines = Deadlines()
    fired: list[str] = []
    # Far enough ahead that the timer thread does not fire them; run_once does.
    a = deadlines.after(100, lambda: fired.append("a"))
    deadlines.after(50, lambda: fired.append("b"))
    deadlines.after(200, lambda: fired.append("c"))
    a.cancel()
    now = a.at - 100  # when they were set
    assert deadlines.run_once(now + 150) is not None
    assert fired == ["b"]
    assert deadlines.run_once(now + 250) is None
    assert fired == ["b", "c"]


def test_a_process_pool_needs_the_app_by_name(tmp_path: Path) -> None:
    q = chit.Queue(settings=Settings(database_url=f"sqlite:///{tmp_path / 'chit.db'}"))
    with pytest.raises(ConfigError, match="needs the app as module:queue"):
        Worker(q, pool="process")


def test_a_process_pool_whose_children_cannot_load_the_app_refuses_to_start(
    tmp_path: Path,
) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'chit.db'}", app="no_such_mod:q")
    with pytest.raises(ConfigError, match="cannot load the app 'no_such_mod:q'"):
        Worker(chit.Queue(settings=settings), pool="process", concurrency=1)
