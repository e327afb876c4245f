"""Snooze, expiry and unique jobs in the store (DESIGN.md "Time"), on every backend."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from chit.jobs import (
    AttemptOutcome,
    ClaimedJob,
    Enqueued,
    Failed,
    NewJob,
    ReplaySelector,
    Snoozed,
    State,
    Succeeded,
)
from chit.store.base import Store

if TYPE_CHECKING:
    from support.store_backends import Backend

LEASE = 30.0


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def new(kind: str = "k", **fields: object) -> NewJob:
    return NewJob(kind, {"n": 1}, **fields)  # type: ignore[arg-type]


def claim(store: Store, now: datetime | None = None, limit: int = 1) -> list[ClaimedJob]:
    return store.claim("w1", ["default"], limit, LEASE, now=now)


# Snooze


def test_snoozed_twice_then_succeeded_counts_one_attempt(store: Store) -> None:
    job_id = store.enqueue(new(max_attempts=1)).id
    at = datetime.now(UTC)
    for n in range(2):
        [job] = claim(store, now=at)
        assert job.attempt == 1, n  # the snooze before did not count
        assert store.finish([Snoozed(job.id, job.lease_token, 60)], now=at) == [True]
        got = store.get(job_id)
        assert got is not None
        assert (got.state, got.attempts, got.lease_expires_at) == (State.QUEUED, 0, None)
        assert got.run_at is not None and abs((got.run_at - at).total_seconds() - 60) < 0.01
        assert claim(store, now=at + timedelta(seconds=59)) == []  # not due yet
        at += timedelta(seconds=61)
    [job] = claim(store, now=at)
    assert store.finish([Succeeded(job.id, job.lease_token, "ok")], now=at) == [True]
    got = store.get(job_id)
    assert got is not None and (got.state, got.attempts) == (State.SUCCEEDED, 1)
    history = store.attempts(job_id)
    assert [a.outcome for a in history] == [
        AttemptOutcome.SNOOZED,
        AttemptOutcome.SNOOZED,
        AttemptOutcome.SUCCEEDED,
    ]
    assert [a.attempt for a in history] == [1, 1, 1]
    assert all(a.finished_at is not None and a.error is None for a in history)


def test_a_snooze_is_fenced_by_the_lease_and_ends_a_cancel_requested_job(store: Store) -> None:
    job_id = store.enqueue(new()).id
    [job] = claim(store)
    assert store.finish([Snoozed(job_id, "stolen", 5)]) == [False]
    store.cancel(job_id)
    assert store.finish([Snoozed(job_id, job.lease_token, 5)]) == [True]
    got = store.get(job_id)
    assert got is not None and got.state is State.CANCELLED and got.finished_at is not None
    assert [a.outcome for a in store.attempts(job_id)] == [AttemptOutcome.CANCELLED]


def test_snoozes_and_successes_in_one_batch(store: Store) -> None:
    a, b = (store.enqueue(new()).id for _ in range(2))
    jobs = {j.id: j for j in claim(store, limit=2)}
    outcomes = [Snoozed(a, jobs[a].lease_token, 0), Succeeded(b, jobs[b].lease_token, 1)]
    assert store.finish(outcomes) == [True, True]
    snoozed, succeeded = store.get(a), store.get(b)
    assert snoozed is not None and (snoozed.state, snoozed.attempts) == (State.QUEUED, 0)
    assert succeeded is not None and succeeded.state is State.SUCCEEDED
    [again] = claim(store)  # a delay of 0: due at once
    assert (again.id, again.attempt) == (a, 1)


# Expiry


def test_expires_in_counts_from_the_store_clock_and_expires_at_is_kept(store: Store) -> None:
    before = datetime.now(UTC)
    relative = store.get(store.enqueue(new(expires_in=60)).id)
    at = before + timedelta(hours=1)
    absolute = store.get(store.enqueue(new(expires_at=at)).id)
    never = store.get(store.enqueue(new()).id)
    assert relative is not None and relative.expires_at is not None
    assert abs((relative.expires_at - relative.created_at).total_seconds() - 60) < 0.01
    assert absolute is not None and absolute.expires_at is not None
    assert abs((absolute.expires_at - at).total_seconds()) < 0.01
    assert never is not None and never.expires_at is None


def test_a_job_not_started_by_its_expiry_is_never_claimed_and_ends_cancelled(
    store: Store,
) -> None:
    expiring = store.enqueue(new(expires_in=60)).id
    keeps = store.enqueue(new(priority=1)).id  # claimed after it, were it claimable
    past = later(61)
    [job] = claim(store, now=past)
    assert job.id == keeps
    assert claim(store, now=past) == []
    assert store.expire_jobs(now=later(1)) == 0  # not yet
    assert store.expire_jobs(now=past) == 1
    got = store.get(expiring)
    assert got is not None
    assert (got.state, got.error, got.attempts) == (State.CANCELLED, "expired before it started", 0)
    assert got.finished_at is not None and got.started_at is None
    assert store.attempts(expiring) == []
    assert store.expire_jobs(now=past) == 0


def test_a_job_that_started_before_its_expiry_runs_to_its_end(store: Store) -> None:
    job_id = store.enqueue(new(expires_in=60)).id
    [job] = claim(store)
    assert store.finish([Snoozed(job_id, job.lease_token, 120)]) == [True]
    past = later(121)
    assert store.expire_jobs(now=past) == 0
    [again] = claim(store, now=past)  # started once: not expired
    assert again.id == job_id
    assert store.finish([Succeeded(job_id, again.lease_token, 1)], now=past) == [True]


def test_an_expired_waiting_job_is_cancelled_with_its_dependents(store: Store) -> None:
    first = store.enqueue(new()).id
    waiting, dependent = store.enqueue_many(
        [
            new(ref="a", depends_on=(first,), expires_in=60),
            new(depends_on=("a",)),
        ]
    )
    assert store.expire_jobs(now=later(61)) == 1
    got, after = store.get(waiting.id), store.get(dependent.id)
    assert got is not None and (got.state, got.error) == (
        State.CANCELLED,
        "expired before it started",
    )
    assert after is not None and after.state is State.CANCELLED
    assert after.error == f"dependency {waiting.id} cancelled"


def test_a_flow_claim_skips_expired_jobs_too(store: Store) -> None:
    from chit.limits import Limits

    store.declare_limits({"k": Limits(concurrency=5)})  # type: ignore[attr-defined]
    store.enqueue(new(expires_in=60))
    fresh = store.enqueue(new()).id
    assert [j.id for j in claim(store, now=later(61), limit=5)] == [fresh]


def test_a_replayed_expired_job_runs_without_its_expiry(store: Store) -> None:
    from chit.jobs import ReplaySelector

    job_id = store.enqueue(new(expires_in=60)).id
    assert store.expire_jobs(now=later(61)) == 1
    assert store.replay(ReplaySelector(ids=(job_id,))) == 1  # type: ignore[attr-defined]
    got = store.get(job_id)
    assert got is not None and (got.state, got.expires_at) == (State.QUEUED, None)
    assert [j.id for j in claim(store, now=later(61))] == [job_id]


def test_many_jobs_with_expiry_in_one_batch(store: Store) -> None:
    """On PostgreSQL a batch this large is copied in (COPY), not inserted."""
    at = later(3600)
    results = store.enqueue_many(
        [new(expires_in=60) for _ in range(150)] + [new(expires_at=at) for _ in range(150)]
    )
    jobs = [store.get(r.id) for r in results]
    assert all(j is not None and j.expires_at is not None for j in jobs)
    first, last = jobs[0], jobs[-1]
    assert first is not None and first.expires_at is not None
    assert abs((first.expires_at - first.created_at).total_seconds() - 60) < 0.01
    assert last is not None and last.expires_at is not None
    assert abs((last.expires_at - at).total_seconds()) < 0.01
    assert store.expire_jobs(now=later(61)) == 150


# Unique while active


def finish_ok(store: Store, job_id: str) -> None:
    [job] = claim(store)
    assert job.id == job_id
    assert store.finish([Succeeded(job.id, job.lease_token, None)]) == [True]


def test_a_unique_key_returns_the_active_job_until_it_has_finished(store: Store) -> None:
    first = store.enqueue(new(unique_key="sync:42"))
    assert first.created and not first.unique
    again = store.enqueue(NewJob("k", {"other": "payload"}, unique_key="sync:42"))
    assert (again.id, again.created, again.unique) == (first.id, False, True)
    other_tenant = store.enqueue(new(unique_key="sync:42", tenant="acme"))
    assert other_tenant.created and other_tenant.id != first.id
    [job] = claim(store)  # running still holds the key
    assert job.id == first.id
    assert store.enqueue(new(unique_key="sync:42")).id == first.id
    assert store.finish([Succeeded(job.id, job.lease_token, None)]) == [True]
    after = store.enqueue(new(unique_key="sync:42"))
    assert after.created and after.id != first.id
    got = store.get(after.id)
    assert got is not None and got.unique_key == "sync:42"
    assert store.get(first.id).unique_key == "sync:42"  # type: ignore[union-attr]


def test_a_waiting_job_holds_its_unique_key_and_cancelling_frees_it(store: Store) -> None:
    first = store.enqueue(new()).id
    waiting = store.enqueue(new(unique_key="u", depends_on=(first,)))
    got = store.get(waiting.id)
    assert got is not None and got.state is State.WAITING
    assert store.enqueue(new(unique_key="u")).id == waiting.id
    store.cancel(waiting.id)
    assert store.enqueue(new(unique_key="u")).created


def test_unique_keys_in_one_batch_and_beside_idempotency_keys(store: Store) -> None:
    a, b, c = store.enqueue_many(
        [new(unique_key="u"), new(unique_key="u"), new(unique_key="v", idempotency_key="i")]
    )
    assert a.created and (b.id, b.created, b.unique) == (a.id, False, True)
    assert c.created
    finish_ok(store, a.id)
    [job] = claim(store)
    assert store.finish([Succeeded(job.id, job.lease_token, None)]) == [True]
    # The idempotency key still names its job for ever; the unique key is free.
    same = store.enqueue(new(unique_key="v", idempotency_key="i"))
    assert (same.id, same.created, same.unique) == (c.id, False, False)
    assert store.enqueue(new(unique_key="v")).created


def test_a_large_batch_with_unique_keys(store: Store) -> None:
    """On PostgreSQL a batch this large is copied in, the keyed jobs inserted."""
    results = store.enqueue_many([new(unique_key=f"k{n % 50}") for n in range(200)])
    assert sum(r.created for r in results) == 50
    assert {r.id for r in results} == {r.id for r in results[:50]}


def test_concurrent_enqueues_of_one_unique_key_store_one_job(backend: Backend) -> None:
    stores = [backend.open() for _ in range(6)]
    results: list[Enqueued] = []
    lock = threading.Lock()
    start = threading.Barrier(len(stores))

    def enqueue(store: Store) -> None:
        start.wait()
        for _ in range(5):
            result = store.enqueue(new(unique_key="race"))
            with lock:
                results.append(result)

    threads = [threading.Thread(target=enqueue, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 30
    assert sum(r.created for r in results) == 1
    assert len({r.id for r in results}) == 1
    assert backend.inspect.job_count() == 1


def test_concurrent_enqueues_while_the_holder_finishes_never_hold_two(backend: Backend) -> None:
    """Enqueuers race a worker that keeps finishing the key's job: at every
    moment at most one job holds the key, and every enqueue gets an answer."""
    worker = backend.open()
    stores = [backend.open() for _ in range(4)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def enqueue(store: Store) -> None:
        try:
            while not stop.is_set():
                result = store.enqueue(new(unique_key="busy"))
                assert result.created or result.unique
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=enqueue, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    finished = 0
    try:
        while finished < 20:
            for job in worker.claim("w", ["default"], 1, LEASE):
                assert worker.finish([Succeeded(job.id, job.lease_token, None)]) == [True]
                finished += 1
            assert backend.inspect.active_jobs_holding("busy") <= 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []


def test_replay_puts_back_at_most_one_job_per_unique_key(store: Store) -> None:
    from chit.jobs import Failed, ReplaySelector

    ids = []
    for _ in range(3):
        job_id = store.enqueue(new(unique_key="u", max_attempts=1)).id
        [job] = claim(store)
        assert store.finish([Failed(job.id, job.lease_token, "boom")]) == [True]
        ids.append(job_id)
    assert store.replay(ReplaySelector(kind="k")) == 1  # type: ignore[attr-defined]
    states = [store.get(i).state for i in ids]  # type: ignore[union-attr]
    assert states == [State.FAILED, State.FAILED, State.QUEUED]  # the newest
    # While it is active, no other job of the key is replayed.
    assert store.replay(ReplaySelector(ids=(ids[0],))) == 0  # type: ignore[attr-defined]
    assert store.enqueue(new(unique_key="u")).id == ids[2]


def test_a_replay_leaves_cancelled_a_dependent_whose_unique_key_is_taken(store: Store) -> None:
    from chit.jobs import Failed, ReplaySelector

    first = store.enqueue(new(max_attempts=1)).id
    dependent = store.enqueue(new(unique_key="u", depends_on=(first,))).id
    [job] = claim(store)
    assert store.finish([Failed(job.id, job.lease_token, "boom")]) == [True]
    assert store.get(dependent).state is State.CANCELLED  # type: ignore[union-attr]
    holder = store.enqueue(new(unique_key="u"))
    assert holder.created
    assert store.replay(ReplaySelector(ids=(first,))) == 1  # type: ignore[attr-defined]
    assert store.get(dependent).state is State.CANCELLED  # type: ignore[union-attr]
    assert store.get(first).state is State.QUEUED  # type: ignore[union-attr]


def test_a_dependent_put_back_by_a_replay_still_expires(store: Store) -> None:
    # Its dependency's failure cancelled it; replaying that puts it back to
    # wait, with the expiry it had, which must still end it.
    a, b = store.enqueue_many(
        [new(ref="a", max_attempts=1), new(ref="b", depends_on=("a",), expires_at=later(60))]
    )
    [job] = claim(store)
    assert store.finish([Failed(a.id, job.lease_token, "boom")]) == [True]
    assert store.get(b.id).state is State.CANCELLED  # type: ignore[union-attr]
    assert store.retry(a.id)
    assert store.get(b.id).state is State.WAITING  # type: ignore[union-attr]
    [job] = claim(store)
    assert store.finish([Succeeded(a.id, job.lease_token)]) == [True]
    assert store.get(b.id).state is State.QUEUED  # type: ignore[union-attr]
    assert claim(store, now=later(120)) == []  # expired: not started
    assert store.expire_jobs(now=later(120)) == 1
    got = store.get(b.id)
    assert got is not None and got.state is State.CANCELLED
    assert got.error == "expired before it started"


def test_a_replay_puts_back_only_the_newest_failed_job_of_a_unique_key(store: Store) -> None:
    def failed(**fields: object) -> str:
        job_id = store.enqueue(new(max_attempts=1, **fields)).id
        [job] = claim(store)
        assert store.finish([Failed(job_id, job.lease_token, "boom")]) == [True]
        return job_id

    older, newer = failed(unique_key="u"), failed(unique_key="u")
    theirs = failed(unique_key="u", tenant="t2")
    assert store.retry(older) is False  # a newer one failed
    assert store.replay(ReplaySelector(ids=(older, newer))) == 1
    assert store.get(older).state is State.FAILED  # type: ignore[union-attr]
    assert store.get(newer).state is State.QUEUED  # type: ignore[union-attr]
    assert store.get(theirs).state is State.FAILED  # type: ignore[union-attr]
    [job] = claim(store)
    assert store.finish([Succeeded(newer, job.lease_token)]) == [True]
    # Succeeded, the newer one holds nothing back: the older may come again.
    assert store.replay(ReplaySelector(error_prefix="boom")) == 2
    assert {store.get(i).state for i in (older, theirs)} == {State.QUEUED}  # type: ignore[union-attr]


def test_a_claim_takes_the_earliest_due_job_before_1970_too(store: Store) -> None:
    # Redis wrote ready entries' times as '%013d': "-000000000005" sorted
    # before "-000000000010", so the later job came first.
    before_1970 = datetime(1969, 12, 31, 23, 0, tzinfo=UTC)
    store.enqueue(NewJob("k", {}, run_at=before_1970 + timedelta(seconds=5)))
    early = store.enqueue(NewJob("k", {}, run_at=before_1970)).id
    [job] = store.claim("w1", ["default"], 1, LEASE, now=before_1970 + timedelta(seconds=10))
    assert job.id == early


def test_a_job_due_long_before_1970_or_far_ahead_is_still_claimed(store: Store) -> None:
    # Redis's ready entries hold a due time in 13 characters: one before 1938
    # took 15, and its claim read a wrong id and dropped it, for ever queued.
    long_ago = store.enqueue(NewJob("k", {}, run_at=datetime(1900, 1, 1, tzinfo=UTC))).id
    ahead = store.enqueue(NewJob("k", {}, run_at=datetime(2300, 1, 1, tzinfo=UTC))).id
    claimed = store.claim("w1", ["default"], 5, LEASE, now=datetime(2301, 1, 1, tzinfo=UTC))
    assert [c.id for c in claimed] == [long_ago, ahead]
