"""One tick of each worker loop, driven from the test: no threads of the test's
own, no sleeps. Jobs run on an inline executor, so a tick runs them to their
outcome before it returns."""

from __future__ import annotations

from typing import Any

import pytest

import chit
from chit.context import JobContext
from chit.errors import StoreError
from chit.jobs import AttemptOutcome, State
from chit.worker import Worker
from chit.worker.execute import Call, Free, Report, Returned, invoke
from chit.worker.heartbeat import PROGRESS_INTERVAL, Heartbeat
from chit.worker.runner import FIRST_ERROR_WAIT, FIRST_IDLE_WAIT, MAX_ERROR_WAIT, Pause


class Inline:
    """An executor that calls the handler at once, on the caller's thread."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def submit(self, call: Call, report: Report, free: Free) -> None:
        self.calls.append(call)
        report(invoke(call))


class Held:
    """An executor that keeps every call until the test reports it (which frees
    its slot too, unless reported as still running)."""

    def __init__(self) -> None:
        self.pending: list[tuple[Call, Report]] = []
        self.free: Free | None = None  # for a call reported while its handler runs on

    def submit(self, call: Call, report: Report, free: Free) -> None:
        self.pending.append((call, report))
        self.free = free


class Spy:
    """Counts the calls to a store method and passes them on."""

    def __init__(self, method: Any) -> None:
        self.method = method
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.method(*args, **kwargs)


def inline_worker(queue: chit.Queue, **options: Any) -> Worker:
    worker = Worker(queue, **options)
    worker.pipeline.sync = Inline()
    return worker


def test_a_claim_tick_runs_what_it_claimed_and_waits_for_jobs_when_it_got_fewer_than_asked(
    queue: chit.Queue,
) -> None:
    queue.task("double")(lambda job, body: body["n"] * 2)
    job = queue.enqueue("double", {"n": 4})
    worker = inline_worker(queue, concurrency=2)
    # One of the two slots filled: nothing more was due, so no claim again at once.
    assert worker.tick() == Pause("jobs", FIRST_IDLE_WAIT)
    assert worker.flush() == 1
    assert queue.store.get(job.id).result == 8


def test_an_idle_claim_tick_waits_for_jobs_longer_each_time_up_to_the_poll_interval(
    queue: chit.Queue,
) -> None:
    worker = inline_worker(queue, poll_interval=0.3)
    waits = [worker.tick() for _ in range(5)]
    assert waits == [
        Pause("jobs", FIRST_IDLE_WAIT),
        Pause("jobs", FIRST_IDLE_WAIT * 2),
        Pause("jobs", FIRST_IDLE_WAIT * 4),
        Pause("jobs", 0.3),
        Pause("jobs", 0.3),
    ]
    queue.task("any")(lambda job, body: None)
    queue.enqueue("any", {})
    # Found work: fast again, and fewer than asked, so it waits for the next wake.
    assert worker.tick() == Pause("jobs", FIRST_IDLE_WAIT)
    assert worker.tick() == Pause("jobs", FIRST_IDLE_WAIT)
    assert worker.tick() == Pause("jobs", FIRST_IDLE_WAIT * 2)


def test_a_full_worker_waits_for_a_slot(queue: chit.Queue) -> None:
    queue.task("any")(lambda job, body: None)
    queue.enqueue_many([chit.JobRequest("any", {}) for _ in range(3)])
    worker = Worker(queue, concurrency=2, poll_interval=0.3)
    held = Held()
    worker.pipeline.sync = held
    assert worker.tick() == Pause("slot", 0.3)
    assert len(held.pending) == 2
    assert worker.tick() == Pause("slot", 0.3)  # claimed nothing more
    for call, report in held.pending:
        report(invoke(call))
    assert worker.flush() == 2
    assert len(held.pending) == 3  # the finisher claimed the third for a freed slot
    assert worker.tick().until == "jobs"


def test_a_failing_claim_backs_off_and_the_loop_goes_on(
    queue: chit.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = inline_worker(queue)
    claim = queue.store.claim

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("database is away", transient=True)

    monkeypatch.setattr(queue.store, "claim", down)
    waits = [worker.tick().seconds for _ in range(7)]
    assert waits[0] == FIRST_ERROR_WAIT
    assert waits == sorted(waits) and waits[-1] == MAX_ERROR_WAIT
    assert {worker.tick().until for _ in range(2)} == {"error"}
    monkeypatch.setattr(queue.store, "claim", claim)
    assert worker.tick().until == "jobs"
    monkeypatch.setattr(queue.store, "claim", down)
    assert worker.tick() == Pause("error", FIRST_ERROR_WAIT)  # recovered, so from the start


def test_a_stopping_worker_claims_nothing(queue: chit.Queue) -> None:
    queue.task("any")(lambda job, body: None)
    job = queue.enqueue("any", {})
    worker = inline_worker(queue)
    worker.stop()
    assert worker.tick().until == "jobs"
    assert queue.store.get(job.id).state is State.QUEUED


def test_a_finisher_tick_records_the_batch_and_fills_the_freed_slots_in_one_store_call(
    queue: chit.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.task("any")(lambda job, body: job.id)
    jobs = queue.enqueue_many([chit.JobRequest("any", {}) for _ in range(4)])
    worker = inline_worker(queue, concurrency=2)
    assert worker.run_once() == 2  # both ran inline: two outcomes wait
    finish_and_claim = Spy(queue.store.finish_and_claim)
    finish, claim = Spy(queue.store.finish), Spy(queue.store.claim)
    monkeypatch.setattr(queue.store, "finish_and_claim", finish_and_claim)
    monkeypatch.setattr(queue.store, "finish", finish)
    monkeypatch.setattr(queue.store, "claim", claim)

    assert worker.finisher.run_once() == 2
    assert (finish_and_claim.calls, finish.calls, claim.calls) == (1, 0, 0)
    assert worker.finisher.run_once() == 2  # the two it claimed, run inline meanwhile
    assert worker.finisher.run_once() == 0
    assert worker.processed == 4
    assert {queue.store.get(j.id).state for j in jobs} == {State.SUCCEEDED}


def test_an_outcome_reported_by_the_executor_is_classified_like_a_handlers(
    queue: chit.Queue,
) -> None:
    """What a deadline will do: the executor stops the call and reports an error."""
    ran: list[str] = []
    queue.task("slow", max_attempts=2)(lambda job, body: ran.append(job.id))
    job = queue.enqueue("slow", {})
    worker = Worker(queue)
    held = Held()
    worker.pipeline.sync = held
    # Not due again within the test, so the finisher's claim leaves it queued.
    worker.pipeline.settings = worker.settings.replace(backoff_base=60.0, backoff_max=60.0)
    worker.run_once()
    [(_, report)] = held.pending
    report(Returned(error=TimeoutError("timed out after 1 s")))
    assert worker.flush() == 1
    assert ran == []
    stored = queue.store.get(job.id)
    assert (stored.state, stored.error.splitlines()[0]) == (
        State.QUEUED,
        "TimeoutError: timed out after 1 s",
    )
    assert queue.store.attempts(job.id)[-1].outcome is AttemptOutcome.RETRIED


def test_a_job_cancelled_while_it_waited_for_a_slot_never_reaches_the_executor(
    queue: chit.Queue,
) -> None:
    queue.task("any")(lambda job, body: None)
    queue.enqueue_many([chit.JobRequest("any", {}) for _ in range(2)])
    worker = Worker(queue, concurrency=1)
    held = Held()
    worker.pipeline.sync = held
    [first, second] = queue.store.claim(worker.id, ["default"], 2, 30)
    worker.slots.hold([first, second], 0)  # the second was claimed ahead
    assert [c.ctx.id for c, _ in held.pending] == [first.id]
    [waiting] = [c for c in worker.held() if c.id == second.id]
    waiting.mark_cancelled()
    call, report = held.pending[0]
    report(invoke(call))  # frees the slot: the cancelled one starts and ends at once
    assert len(held.pending) == 1
    assert worker.flush() == 2
    assert queue.store.get(first.id).state is State.SUCCEEDED
    assert queue.store.get(second.id).state is State.CANCELLED


def test_a_job_ended_while_its_handler_runs_on_keeps_its_slot_until_it_is_freed(
    queue: chit.Queue,
) -> None:
    queue.task("any")(lambda job, body: None)
    queue.enqueue_many([chit.JobRequest("any", {}) for _ in range(2)])
    worker = Worker(queue, concurrency=1, prefetch=0)
    held = Held()
    worker.pipeline.sync = held
    # Not due again within the test, so no claim beside a batch takes it.
    worker.pipeline.settings = worker.settings.replace(backoff_base=60.0, backoff_max=60.0)
    [first, second] = queue.store.claim(worker.id, ["default"], 2, 30)
    worker.slots.hold([first, second], 0)  # the second was claimed ahead
    [(call, report)] = held.pending
    report(Returned(error=TimeoutError("past its deadline")), running=True)
    worker.slots.freed.clear()
    assert worker.flush() == 1  # recorded while the handler runs on
    assert queue.store.get(first.id).state is State.QUEUED  # to be retried
    assert (worker.slots.busy(), worker.slots.count(), len(held.pending)) == (1, 2, 1)
    assert worker.slots.reserve() == 0
    assert held.free is not None
    worker.slots.freed.clear()
    held.free(call.ctx.id)  # the handler returned: the second starts in its slot
    assert worker.slots.freed.is_set()
    assert len(held.pending) == 2
    held.pending[1][1](invoke(held.pending[1][0]))
    assert worker.flush() == 1
    assert queue.store.get(second.id).state is State.SUCCEEDED
    assert (worker.slots.busy(), worker.slots.count()) == (0, 0)


def test_a_heartbeat_tick_renews_leases_every_third_of_the_lease_and_carries_progress_sooner(
    queue: chit.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.task("any")(lambda job, body: None)
    job = queue.enqueue("any", {})
    worker = Worker(queue, lease_seconds=300)
    worker.pipeline.sync = Held()
    worker.run_once()
    [ctx] = worker.held()
    held: list[JobContext] = []
    beat = Heartbeat(queue.store, lambda: held, lease_seconds=300)
    calls = Spy(queue.store.heartbeat)
    monkeypatch.setattr(queue.store, "heartbeat", calls)

    beat.run_once(now=1000.0)  # holding nothing: the clock starts here
    held.append(ctx)
    beat.run_once(now=1000.0 + PROGRESS_INTERVAL / 2)
    assert calls.calls == 0  # no progress, and a third of 300 s has not passed
    ctx.progress(1, 2)
    beat.run_once(now=1000.0 + PROGRESS_INTERVAL / 2)
    assert calls.calls == 0  # progress waits for the progress interval
    beat.run_once(now=1000.0 + PROGRESS_INTERVAL)
    assert calls.calls == 1
    assert queue.store.get(job.id).progress.done == 1
    since_then = 1000.0 + PROGRESS_INTERVAL
    beat.run_once(now=since_then + 99)
    assert calls.calls == 1  # nothing new to carry, and the lease is not due
    beat.run_once(now=since_then + 100)
    assert calls.calls == 2  # a third of the lease: renewed with nothing to carry


def test_every_background_loop_stops_when_asked_and_a_stop_before_start_is_harmless(
    queue: chit.Queue,
) -> None:
    idle = Worker(queue)
    idle.finisher.stop()
    idle.heartbeat.stop()
    idle.maintenance.stop()
    worker = Worker(queue)
    loops = [worker.finisher, worker.heartbeat, worker.maintenance]
    for loop in loops:
        loop.start()
    for loop in loops:
        loop.stop()
    threads = [*worker.finisher._threads, worker.heartbeat._thread, worker.maintenance._thread]
    assert not any(t.is_alive() for t in threads)
