"""Waits and signals on every backend (DESIGN.md "Long AI tasks"; issue 25):
a job that waits holds no lease and no attempt, is never claimed, shows what
it waits for, and is queued in the transaction that stores its signal, ends
the last job it waits for, or passes its deadline; its rerun's wait returns
at once. First signal wins; bad input is refused with nothing stored."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from chit import JobContext
from chit.errors import InvalidWait, JobFinished, JobNotFound, Suspend
from chit.jobs import (
    AttemptOutcome,
    ClaimedJob,
    Failed,
    NewJob,
    SignalStatus,
    State,
    Succeeded,
    Suspended,
)
from chit.store.capabilities import FullStore, Reports
from chit.waits import send_signal

if TYPE_CHECKING:
    from support.store_inspection import StoreInspection

LEASE = 30.0


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def claim(store: FullStore, queue: str = "default", **kwargs: Any) -> ClaimedJob:
    claimed = store.claim("w1", [queue], 1, LEASE, **kwargs)
    assert len(claimed) == 1, claimed
    return claimed[0]


def run(store: FullStore, job: ClaimedJob, handler: Any) -> Any:
    """Run `handler(ctx)` as the worker would: a wait records Suspended."""
    ctx = JobContext.of(job, store, LEASE)
    try:
        result = handler(ctx)
    except Suspend as e:
        outcome = Suspended(job.id, job.lease_token, e.signal, e.jobs, e.timeout)
        assert store.finish([outcome]) == [True]
        return Suspend
    assert store.finish([Succeeded(job.id, job.lease_token, result)]) == [True]
    return result


def test_a_wait_frees_the_job_and_its_signal_queues_it(store: FullStore) -> None:
    job_id = store.enqueue(NewJob("k", {}, max_attempts=1)).id
    first = claim(store)
    assert run(store, first, lambda ctx: ctx.wait_for("approval", timeout=3600)) is Suspend

    job = store.get(job_id)
    assert job is not None and job.state is State.WAITING
    assert job.attempts == 0 and job.lease_expires_at is None  # no attempt, no lease
    assert job.waiting_for is not None and job.waiting_for.signal == "approval"
    assert job.waiting_for.jobs is None and job.waiting_for.until is not None
    assert abs((job.waiting_for.until - later(3600)).total_seconds()) < 60
    assert store.claim("w1", ["default"], 5, LEASE) == []  # never claimed while it waits

    sent = store.signal(job_id, "approval", {"by": "ana"})
    assert (sent.status, sent.data) == (SignalStatus.CREATED, {"by": "ana"})
    resumed = store.get(job_id)
    assert resumed is not None and resumed.state is State.QUEUED and resumed.waiting_for is None

    second = claim(store)
    assert second.attempt == 1  # the wait did not use up the only attempt
    assert run(store, second, lambda ctx: ctx.wait_for("approval")) == {"by": "ana"}
    done = store.get(job_id)
    assert done is not None and done.state is State.SUCCEEDED and done.result == {"by": "ana"}
    if isinstance(store, Reports):
        outcomes = [a.outcome for a in store.attempts(job_id)]
        assert outcomes == [AttemptOutcome.SNOOZED, AttemptOutcome.SUCCEEDED]


def test_the_first_signal_wins_and_one_sent_early_is_read_at_once(store: FullStore) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    first = send_signal(store, job_id, "go", {"n": 1})
    again = send_signal(store, job_id, "go", {"n": 2})
    assert (first.created, first.data) == (True, {"n": 1})
    assert (again.created, again.data) == (False, {"n": 1})  # the stored one, unchanged
    job = store.get(job_id)
    assert job is not None and job.state is State.QUEUED  # a signal does not start a job

    # Sent before the handler waits: its wait returns at once, no suspension.
    assert run(store, claim(store), lambda ctx: ctx.wait_for("go")) == {"n": 1}


def test_a_signal_to_a_finished_unknown_or_other_tenants_job_stores_nothing(
    store: FullStore, inspect: StoreInspection
) -> None:
    done_id = store.enqueue(NewJob("k", {})).id
    run(store, claim(store), lambda ctx: None)
    with pytest.raises(JobFinished, match="finished"):
        send_signal(store, done_id, "go", {})
    with pytest.raises(JobNotFound):
        send_signal(store, "01NOSUCHJOB", "go", {})
    theirs = store.enqueue(NewJob("k", {}, tenant="acme")).id
    with pytest.raises(JobNotFound):
        send_signal(store, theirs, "go", {}, tenant="other")
    for name, data in [("", {}), ("x" * 201, {}), ("a\x00b", {}), ("go", [1]), ("go", "x")]:
        with pytest.raises(InvalidWait):
            send_signal(store, theirs, name, data)
    with pytest.raises(InvalidWait, match="bytes"):
        send_signal(store, theirs, "go", {"big": "x" * 70_000})
    assert inspect.signal_count() == 0
    assert send_signal(store, theirs, "go", None, tenant="acme").data == {}


def test_the_timeout_queues_the_job_and_its_wait_returns_none(store: FullStore) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    run(store, claim(store), lambda ctx: ctx.wait_for("approval", timeout=60))
    assert store.wake_waiters(now=later(30)) == 0  # not yet
    assert store.wake_waiters(now=later(61)) == 1
    job = store.get(job_id)
    assert job is not None and job.state is State.QUEUED
    # A signal after the timeout changes nothing: the wait ended without it.
    late = store.signal(job_id, "approval", {"by": "late"})
    assert late.status is SignalStatus.EXISTING and late.data is None
    assert run(store, claim(store), lambda ctx: ctx.wait_for("approval", timeout=60)) is None


def test_a_signal_racing_the_timeout_resumes_the_job_once(store: FullStore) -> None:
    ids = [store.enqueue(NewJob("k", {})).id for _ in range(6)]
    for _ in ids:
        run(store, claim(store), lambda ctx: ctx.wait_for("go", timeout=1))
    woken: list[int] = []
    start = threading.Barrier(2)

    def wake() -> None:
        start.wait()
        woken.append(store.wake_waiters(now=later(5)))

    thread = threading.Thread(target=wake)
    thread.start()
    start.wait()
    sent = [store.signal(job_id, "go", {}) for job_id in ids]
    thread.join()
    created = sum(s.status is SignalStatus.CREATED for s in sent)
    # Each job was queued once: by its signal or by the timeout, never both.
    assert created + woken[0] == len(ids)
    claimed = store.claim("w1", ["default"], 20, LEASE)
    assert sorted(j.id for j in claimed) == sorted(ids)
    assert all(j.attempt == 1 for j in claimed)


def test_bad_waits_fail_with_a_clear_error(store: FullStore) -> None:
    other = store.enqueue(NewJob("k", {}, tenant="acme", queue="q2")).id
    store.enqueue(NewJob("k", {}))
    job = claim(store)
    ctx = JobContext.of(job, store, LEASE)
    for timeout in (0, -1, float("nan"), float("inf"), "60", True, 11 * 365 * 86400):
        with pytest.raises(InvalidWait, match="timeout"):
            ctx.wait_for("x", timeout=timeout)
    with pytest.raises(InvalidWait, match="itself"):
        ctx.wait_for_jobs([job.id])
    with pytest.raises(InvalidWait, match="no job"):
        ctx.wait_for_jobs(["01NOSUCHJOB"])
    with pytest.raises(InvalidWait, match="no job"):
        ctx.wait_for_jobs([other])  # another tenant's: as unknown
    with pytest.raises(InvalidWait):
        ctx.wait_for_jobs([])
    with pytest.raises(InvalidWait):
        ctx.wait_for_jobs("abc")
    with pytest.raises(InvalidWait):
        ctx.wait_for("")


def test_wait_for_jobs_resumes_when_the_last_ends_however_it_ends(store: FullStore) -> None:
    parent_id = store.enqueue(NewJob("parent", {}, queue="p")).id
    children = [store.enqueue(NewJob("child", {"n": n}, max_attempts=1)).id for n in range(3)]
    parent = claim(store, "p")
    assert run(store, parent, lambda ctx: ctx.wait_for_jobs(children)) is Suspend
    job = store.get(parent_id)
    assert job is not None and job.state is State.WAITING and job.attempts == 0
    assert job.waiting_for is not None and job.waiting_for.jobs == tuple(children)
    assert job.waiting_for.until is None

    first = claim(store)
    store.finish([Succeeded(first.id, first.lease_token, {"ok": first.payload["n"]})])
    second = claim(store)
    store.finish([Failed(second.id, second.lease_token, "Boom: no")])  # does not fail the parent
    still = store.get(parent_id)
    assert still is not None and still.state is State.WAITING
    store.cancel(children[2])  # the last one ends by a cancel: the parent is queued with it
    resumed = store.get(parent_id)
    assert resumed is not None and resumed.state is State.QUEUED

    def outcomes(ctx: JobContext) -> list[Any]:
        return [(j.id, j.kind, j.state, j.result, j.error) for j in ctx.wait_for_jobs(children)]

    got = run(store, claim(store, "p"), outcomes)
    assert got == [
        (children[0], "child", "succeeded", {"ok": 0}, None),
        (children[1], "child", "failed", None, "Boom: no"),
        (children[2], "child", "cancelled", None, None),
    ]


def test_every_way_a_job_ends_queues_its_waiter(store: FullStore) -> None:
    """A rescue out of attempts, an expiry and a dependency's cascade end jobs
    too, each in its own statement: the last of them queues the waiter."""
    parent_id = store.enqueue(NewJob("parent", {}, queue="p")).id
    dependency = store.enqueue(NewJob("child", {}, queue="d", max_attempts=1)).id
    cascaded = store.enqueue(NewJob("child", {}, queue="d", depends_on=(dependency,))).id
    expiring = store.enqueue(NewJob("child", {}, queue="x", expires_in=60)).id
    rescued = store.enqueue(NewJob("child", {}, queue="r", max_attempts=1)).id
    waited = [cascaded, expiring, rescued]
    assert run(store, claim(store, "p"), lambda ctx: ctx.wait_for_jobs(waited)) is Suspend

    def state(job_id: str) -> State:
        job = store.get(job_id)
        assert job is not None
        return job.state

    first = claim(store, "d")
    store.finish([Failed(first.id, first.lease_token, "Boom: no")])
    assert state(cascaded) is State.CANCELLED and state(parent_id) is State.WAITING
    assert store.expire_jobs(now=later(61)) == 1
    assert state(expiring) is State.CANCELLED and state(parent_id) is State.WAITING
    claim(store, "r")
    assert store.rescue_expired(now=later(LEASE + 5)).failed == 1
    assert state(rescued) is State.FAILED and state(parent_id) is State.QUEUED


def test_wait_for_jobs_already_finished_returns_at_once_or_queues_at_once(
    store: FullStore,
) -> None:
    child = store.enqueue(NewJob("child", {})).id
    run(store, claim(store), lambda ctx: 7)
    parent_id = store.enqueue(NewJob("parent", {}, queue="p")).id
    got = run(store, claim(store, "p"), lambda ctx: [j.result for j in ctx.wait_for_jobs([child])])
    assert got == [7]
    job = store.get(parent_id)
    assert job is not None and job.state is State.SUCCEEDED


def test_a_waited_job_that_had_ended_and_is_retried_queues_its_waiter_when_it_ends(
    store: FullStore,
) -> None:
    # The waiter was named only on the jobs not ended when it began to wait:
    # one retried after that ended again naming no one, and it waited for ever.
    failed = store.enqueue(NewJob("child", {}, max_attempts=1)).id
    store.finish([Failed(failed, claim(store).lease_token, "Boom: no")])
    open_one = store.enqueue(NewJob("child", {}, queue="o")).id  # claimed by its own queue
    parent_id = store.enqueue(NewJob("parent", {}, queue="p")).id
    assert run(store, claim(store, "p"), lambda ctx: ctx.wait_for_jobs([failed, open_one])) is (
        Suspend
    )
    assert store.retry(failed)
    assert store.finish([Succeeded(open_one, claim(store, "o").lease_token, 1)]) == [True]

    def state(job_id: str) -> State:
        job = store.get(job_id)
        assert job is not None
        return job.state

    assert state(parent_id) is State.WAITING  # the retried one is open
    assert store.finish([Succeeded(failed, claim(store).lease_token, 2)]) == [True]
    assert state(parent_id) is State.QUEUED


def test_a_wait_that_holds_as_it_is_recorded_queues_the_job_in_the_same_call(
    store: FullStore,
) -> None:
    # Its jobs end in the very batch of outcomes that records the wait, or its
    # signal came while it ran: queued by the call that records the wait, with
    # every index and count as if it had never waited (the Redis ones are
    # checked against the jobs after each test).
    parent_id = store.enqueue(NewJob("parent", {}, queue="p")).id
    child_id = store.enqueue(NewJob("child", {})).id
    parent, child = claim(store, "p"), claim(store)
    waits = Suspended(parent.id, parent.lease_token, None, (child_id,), None)
    assert store.finish([waits, Succeeded(child.id, child.lease_token, 1)]) == [True, True]
    job = store.get(parent_id)
    assert job is not None and job.state is State.QUEUED

    again = claim(store, "p")
    send_signal(store, parent_id, "go", {"n": 1})
    assert store.finish([Suspended(again.id, again.lease_token, "go")]) == [True]
    job = store.get(parent_id)
    assert job is not None and job.state is State.QUEUED
    assert isinstance(store, Reports)
    assert store.stats().by_state["waiting"] == 0


def test_wait_for_jobs_times_out_with_the_jobs_as_they_are(store: FullStore) -> None:
    child = store.enqueue(NewJob("child", {}, queue="c")).id
    parent_id = store.enqueue(NewJob("parent", {}, queue="p")).id
    run(store, claim(store, "p"), lambda ctx: ctx.wait_for_jobs([child], timeout=0.2))
    assert store.wake_waiters() == 0
    # The rerun reads the store's clock against the deadline: wake by it too.
    deadline = time.monotonic() + 10
    while store.wake_waiters() == 0:
        assert time.monotonic() < deadline, "the wait's deadline never passed"
        time.sleep(0.02)
    job = store.get(parent_id)
    assert job is not None and job.state is State.QUEUED
    got = run(store, claim(store, "p"), lambda ctx: [j.state for j in ctx.wait_for_jobs([child])])
    assert got == ["queued"]


def test_signals_go_with_their_job(store: FullStore, inspect: StoreInspection) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    store.signal(job_id, "a", {"x": 1})
    run(store, claim(store), lambda ctx: ctx.wait_for("a"))
    assert inspect.signal_count() == 1
    assert store.prune(0, now=later(5)) == 1
    assert inspect.signal_count() == 0


def test_a_cancel_requested_wait_ends_cancelled(store: FullStore) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    job = claim(store)
    store.cancel(job_id)
    run(store, job, lambda ctx: ctx.wait_for("a"))
    done = store.get(job_id)
    assert done is not None and done.state is State.CANCELLED
