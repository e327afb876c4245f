"""Snooze, expiry and unique jobs in the store (DESIGN.md "Time"), on every backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chit.jobs import AttemptOutcome, ClaimedJob, NewJob, Snoozed, State, Succeeded
from chit.store.base import Store

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
