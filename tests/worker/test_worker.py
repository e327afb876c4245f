"""The worker in-process: one tick at a time, real SQLite file, no sleeps to wait on."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

import chit
from chit.jobs import AttemptOutcome, JobFilter, State, Succeeded
from chit.worker import Worker
from support.waiting import wait_until


def test_sync_and_async_handlers_run_to_success(queue: chit.Queue) -> None:
    @queue.task("double")
    def double(job: chit.JobContext, body: dict) -> int:
        return body["n"] * 2

    @queue.task("later")
    async def later(job: chit.JobContext, body: dict) -> str:
        await asyncio.sleep(0.01)
        return f"{job.kind}:{job.attempt}"

    a = queue.enqueue("double", {"n": 21})
    b = queue.enqueue("later", {})
    assert Worker(queue).run_until_idle() == 2
    assert queue.store.get(a.id).result == 42
    assert queue.store.get(b.id).result == "later:1"


def test_a_flaky_job_is_retried_until_it_succeeds(queue: chit.Queue) -> None:
    @queue.task("flaky", max_attempts=3)
    def flaky(job: chit.JobContext, body: dict) -> int:
        if job.attempt < 3:
            raise ConnectionError(f"try {job.attempt}")
        return job.attempt

    job = queue.enqueue("flaky", {})
    Worker(queue).run_until_idle()
    stored = queue.store.get(job.id)
    assert (stored.state, stored.attempts, stored.result) == (State.SUCCEEDED, 3, 3)
    outcomes = [a.outcome for a in queue.store.attempts(job.id)]
    assert outcomes == [AttemptOutcome.RETRIED, AttemptOutcome.RETRIED, AttemptOutcome.SUCCEEDED]


def test_attempts_run_out_and_the_job_fails_with_its_last_error(queue: chit.Queue) -> None:
    @queue.task("doomed", max_attempts=2)
    def doomed(job: chit.JobContext, body: dict) -> None:
        raise KeyError(f"missing {job.attempt}")

    job = queue.enqueue("doomed", {})
    Worker(queue).run_until_idle()
    stored = queue.store.get(job.id)
    assert stored.state is State.FAILED
    assert stored.error.splitlines()[0] == "KeyError: 'missing 2'"
    assert "Traceback" in stored.error


def test_progress_is_written_with_the_lease_renewal_not_per_call(queue: chit.Queue) -> None:
    entered, release = threading.Event(), threading.Event()

    @queue.task("counting")
    def counting(job: chit.JobContext, body: dict) -> None:
        for i in range(1, 101):
            job.progress(i, 100)
        entered.set()
        release.wait(10)

    job = queue.enqueue("counting", {})
    worker = Worker(queue)
    worker.run_once()
    assert entered.wait(10)
    assert queue.store.get(job.id).progress.done is None  # a hundred calls, no write yet
    worker.heartbeat.run_once(force=True)
    stored = queue.store.get(job.id)
    assert (stored.progress.done, stored.progress.total) == (100, 100)
    release.set()
    worker.run_until_idle()


def test_a_checkpoint_survives_and_the_next_attempt_resumes_from_it(queue: chit.Queue) -> None:
    seen: list[object] = []

    @queue.task("resumable", max_attempts=2)
    def resumable(job: chit.JobContext, body: dict) -> int:
        seen.append(job.last_checkpoint)
        if job.attempt == 1:
            job.checkpoint({"next": 40})
            raise TimeoutError("interrupted")
        return job.last_checkpoint["next"]

    job = queue.enqueue("resumable", {})
    Worker(queue).run_until_idle()
    assert seen == [None, {"next": 40}]
    assert queue.store.get(job.id).result == 40


def test_cancelling_a_running_job_reaches_the_handler_at_the_next_heartbeat(
    queue: chit.Queue,
) -> None:
    started, stopped = threading.Event(), threading.Event()

    @queue.task("long")
    def long(job: chit.JobContext, body: dict) -> str:
        started.set()
        while not job.cancelled:
            stopped.wait(0.01)
        return "stopped early"

    job = queue.enqueue("long", {})
    worker = Worker(queue)
    worker.run_once()
    assert started.wait(10)
    assert queue.store.cancel(job.id).value == "requested"
    worker.heartbeat.run_once(force=True)
    worker.run_until_idle()
    stored = queue.store.get(job.id)
    assert stored.state is State.CANCELLED
    assert queue.store.attempts(job.id)[-1].outcome is AttemptOutcome.CANCELLED


def test_a_worker_that_lost_its_lease_is_told_and_its_outcome_is_fenced_out(
    queue: chit.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    started, finish = threading.Event(), threading.Event()

    @queue.task("slow")
    def slow(job: chit.JobContext, body: dict) -> str:
        started.set()
        finish.wait(10)
        return "late"

    job = queue.enqueue("slow", {})
    worker = Worker(queue, lease_seconds=30)
    worker.run_once()
    assert started.wait(10)
    # The lease runs out (by the store's clock) and another worker takes the job.
    later = datetime.now(UTC) + timedelta(seconds=60)
    assert queue.store.rescue_expired(now=later).requeued == 1
    other = queue.store.claim("other", ["default"], 1, 30, now=later)
    assert [c.id for c in other] == [job.id]

    with caplog.at_level(logging.WARNING, logger="chit.worker"):
        worker.heartbeat.run_once(force=True)
        assert worker.held()[0].lease_lost
        finish.set()
        worker.run_until_idle()
    assert "lease lost" in caplog.text
    assert "fenced out" in caplog.text
    stored = queue.store.get(job.id)
    assert (stored.state, stored.worker) == (State.RUNNING, "other")


def test_release_hands_jobs_back_at_once_without_using_an_attempt(queue: chit.Queue) -> None:
    started, finish = threading.Event(), threading.Event()

    @queue.task("held")
    def held(job: chit.JobContext, body: dict) -> None:
        started.set()
        finish.wait(10)

    job = queue.enqueue("held", {})
    worker = Worker(queue)
    worker.run_once()
    assert started.wait(10)
    assert worker.release_held() == 1
    stored = queue.store.get(job.id)
    assert (stored.state, stored.attempts) == (State.QUEUED, 0)
    assert queue.store.attempts(job.id)[-1].outcome is AttemptOutcome.RELEASED
    finish.set()


def test_claims_fill_only_the_free_slots(queue: chit.Queue) -> None:
    gate = threading.Event()

    @queue.task("wait")
    def wait(job: chit.JobContext, body: dict) -> None:
        gate.wait(10)

    queue.enqueue_many([chit.JobRequest("wait", {}) for _ in range(10)])
    worker = Worker(queue, concurrency=3)
    assert worker.run_once() == 3
    assert worker.run_once() == 0
    gate.set()
    assert worker.run_until_idle() == 10


def test_run_stops_on_request_and_returns_zero(queue: chit.Queue) -> None:
    @queue.task("quick")
    def quick(job: chit.JobContext, body: dict) -> int:
        return 1

    queue.enqueue_many([chit.JobRequest("quick", {}) for _ in range(20)])
    worker = Worker(queue, poll_interval=0.05)
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(worker.run(install_signals=False)))
    thread.start()
    wait_until(
        lambda: queue.store.stats().by_state["succeeded"] == 20, 10, 0.02, what="20 jobs to succeed"
    )
    worker.stop()
    thread.join(10)
    assert code == [0]
    assert queue.store.stats().by_state["succeeded"] == 20


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        ({"text": "pdf\x00text"}, "NUL character"),
        ({"name": "caf\udce9.txt"}, "UnicodeEncodeError"),
        ({"n": float("inf")}, "ValueError"),
    ],
)
def test_a_result_no_store_can_hold_fails_the_job_instead_of_stalling_the_worker(
    queue: chit.Queue, result: object, problem: str
) -> None:
    @queue.task("odd")
    def odd(job: chit.JobContext, body: dict) -> object:
        return result

    @queue.task("fine")
    def fine(job: chit.JobContext, body: dict) -> int:
        return 1

    bad = queue.enqueue("odd", {})
    good = queue.enqueue("fine", {})
    Worker(queue).run_until_idle()
    stored = queue.store.get(bad.id)
    assert stored.state is State.FAILED
    assert stored.error.startswith("ResultNotJSON") and problem in stored.error
    assert queue.store.get(good.id).state is State.SUCCEEDED


def test_an_exception_that_cannot_describe_itself_still_fails_the_job(queue: chit.Queue) -> None:
    class Mute(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no words")

    @queue.task("mute", max_attempts=1)
    def mute(job: chit.JobContext, body: dict) -> None:
        raise Mute()

    job = queue.enqueue("mute", {})
    Worker(queue).run_until_idle()
    stored = queue.store.get(job.id)
    assert stored.state is State.FAILED
    assert stored.error.startswith("Mute: <the exception's message could not be read>")


def test_an_outcome_the_store_refuses_is_recorded_as_a_failure_without_holding_up_others(
    queue: chit.Queue,
) -> None:
    queue.task("any")(lambda job, body: None)
    queue.enqueue_many([chit.JobRequest("any", {}) for _ in range(3)])
    worker = Worker(queue)
    first, *rest = queue.store.claim(worker.id, ["default"], 3, 30)
    # A lone surrogate: no store can encode it (classify refuses such results;
    # this is the finisher's last line of defence).
    worker.slots._outcomes = [
        Succeeded(first.id, first.lease_token, "\udc80"),
        *(Succeeded(j.id, j.lease_token, "ok") for j in rest),
    ]
    assert worker.flush() == 3
    refused = queue.store.get(first.id)
    assert refused.state is State.FAILED
    assert refused.error.startswith("OutcomeNotStored")
    assert {queue.store.get(j.id).state for j in rest} == {State.SUCCEEDED}


def test_a_job_handed_back_at_shutdown_takes_no_second_outcome(queue: chit.Queue) -> None:
    started, finish = threading.Event(), threading.Event()

    @queue.task("late")
    def late(job: chit.JobContext, body: dict) -> str:
        started.set()
        finish.wait(10)
        return "too late"

    job = queue.enqueue("late", {})
    worker = Worker(queue)
    worker.run_once()
    assert started.wait(10)
    assert worker.release_held() == 1
    finish.set()
    assert worker.slots.outcome_ready.wait(10)  # the handler returned its (now ignored) result
    assert worker.flush() == 0
    assert worker.processed == 1
    assert queue.store.get(job.id).state is State.QUEUED


def test_the_final_progress_is_stored_even_when_a_heartbeat_carried_it_first(
    queue: chit.Queue,
) -> None:
    reported, release = threading.Event(), threading.Event()

    @queue.task("steps")
    def steps(job: chit.JobContext, body: dict) -> str:
        job.progress(99, 100)
        job.progress(100, 100)
        reported.set()
        release.wait(10)
        return "done"

    job = queue.enqueue("steps", {})
    worker = Worker(queue)
    worker.run_once()
    assert reported.wait(10)
    worker.heartbeat.run_once(force=True)  # takes the "changed" flag
    release.set()
    worker.run_until_idle()
    stored = queue.store.get(job.id)
    assert (stored.state, stored.progress.done, stored.progress.total) == (
        State.SUCCEEDED,
        100,
        100,
    )


def _prime_with_short_jobs(
    queue: chit.Queue, worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run a few instant jobs, so the worker knows its jobs are short. "Short"
    is raised to a second for the test: a busy machine can stall a no-op job's
    hand-off to its thread past the real 20 ms."""
    monkeypatch.setattr("chit.worker.slots.PREFETCH_BELOW_SECONDS", 1.0)

    @queue.task("instant")
    def instant(job: chit.JobContext, body: dict) -> None:
        return None

    queue.enqueue_many([chit.JobRequest("instant", {}) for _ in range(5)])
    assert worker.run_until_idle() == 5


def _gated(queue: chit.Queue) -> tuple[threading.Event, list[int]]:
    """A "gated" task that waits for the event; the list gets the most at once."""
    gate, lock, running, most = threading.Event(), threading.Lock(), [0], [0]

    @queue.task("gated")
    def gated(job: chit.JobContext, body: dict) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        gate.wait(10)
        with lock:
            running[0] -= 1

    return gate, most


def test_short_jobs_are_claimed_ahead_but_never_run_beyond_the_concurrency(
    queue: chit.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker(queue, concurrency=2, prefetch=3)
    _prime_with_short_jobs(queue, worker, monkeypatch)
    gate, most = _gated(queue)
    queue.enqueue_many([chit.JobRequest("gated", {"i": i}) for i in range(10)])
    assert worker.run_once() == 5
    held = queue.store.list(JobFilter(state=State.RUNNING)).jobs
    assert len(held) == 5 and {j.worker for j in held} == {worker.id}
    assert worker.run_once() == 0
    wait_until(lambda: most == [2], 10, 0.01, what="both slots' jobs to start")
    gate.set()
    assert worker.run_until_idle() == 10
    assert most == [2]


def test_long_jobs_are_not_claimed_ahead(queue: chit.Queue) -> None:
    worker = Worker(queue, concurrency=2, prefetch=3)

    @queue.task("slow")
    def slow(job: chit.JobContext, body: dict) -> None:
        time.sleep(0.05)

    queue.enqueue_many([chit.JobRequest("slow", {}) for _ in range(2)])
    assert worker.run_until_idle() == 2
    gate, _ = _gated(queue)
    queue.enqueue_many([chit.JobRequest("gated", {}) for _ in range(10)])
    assert worker.run_once() == 2
    gate.set()
    assert worker.run_until_idle() == 10


def test_jobs_claimed_ahead_are_handed_back_at_once_when_the_worker_stops(
    queue: chit.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker(queue, concurrency=2, prefetch=3, grace_seconds=10, poll_interval=0.05)
    _prime_with_short_jobs(queue, worker, monkeypatch)
    gate, most = _gated(queue)
    queue.enqueue_many([chit.JobRequest("gated", {"i": i}) for i in range(5)])
    assert worker.run_once() == 5
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(worker.run(install_signals=False)))
    thread.start()
    worker.stop()

    def handed_back() -> list[chit.Job] | None:
        jobs = queue.store.list(JobFilter(state=State.QUEUED)).jobs
        return jobs if len(jobs) == 3 else None

    queued = wait_until(handed_back, 10, 0.02, what="three jobs handed back")
    # The three that never started are back in the queue, their attempt not counted,
    # while the two running ones still have their grace period.
    assert sorted(j.attempts for j in queued) == [0, 0, 0]
    assert len(queue.store.list(JobFilter(state=State.RUNNING)).jobs) == 2
    wait_until(lambda: most == [2], 10, 0.01, what="both slots' jobs to start")
    gate.set()
    thread.join(15)
    assert code == [0]
    assert len(queue.store.list(JobFilter(state=State.SUCCEEDED, kind="gated")).jobs) == 2
    assert most == [2]
