"""Edits of jobs not yet started (DESIGN.md "Changing work already queued"):
Store.update on every backend."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from chit.encoding import canonical
from chit.jobs import ChangeResult, JobChange, NewJob, State, Succeeded
from chit.store.base import Store

if TYPE_CHECKING:
    from support.store_backends import Backend

LEASE = 30.0


def new(kind: str = "k", **fields: object) -> NewJob:
    return NewJob(kind, {"n": 1}, **fields)  # type: ignore[arg-type]


def claim(store: Store, now: datetime | None = None, limit: int = 1) -> list[str]:
    return [c.id for c in store.claim("w1", ["default"], limit, LEASE, now=now)]


def test_an_edit_replaces_only_what_it_gives(store: Store) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    job_id = store.enqueue(new(priority=5, run_at=later)).id
    before = store.get(job_id)
    assert before is not None
    assert store.update(job_id, JobChange(priority=-3)) is ChangeResult.CHANGED
    got = store.get(job_id)
    assert got is not None
    assert (got.priority, got.run_at, got.payload) == (-3, before.run_at, {"n": 1})
    payload = {"n": 2, "text": "é"}
    assert store.update(job_id, JobChange(payload_json=canonical(payload))) is ChangeResult.CHANGED
    got = store.get(job_id)
    assert got is not None and (got.priority, got.payload) == (-3, payload)
    sooner = later - timedelta(minutes=30)
    assert store.update(job_id, JobChange(run_at=sooner)) is ChangeResult.CHANGED
    got = store.get(job_id)
    assert got is not None and got.run_at is not None
    assert abs((got.run_at - sooner).total_seconds()) < 0.001
    assert got.updated_at >= before.updated_at and got.state is State.QUEUED


def test_run_now_makes_a_delayed_job_due_and_leaves_a_due_one_in_its_place(store: Store) -> None:
    at = datetime.now(UTC)
    delayed = store.enqueue(new(run_at=at + timedelta(hours=1))).id
    due = store.enqueue(new(run_at=at - timedelta(hours=1))).id
    assert claim(store, now=at, limit=2) == [due]
    store.enqueue(new(run_at=at - timedelta(hours=2)))  # due before `delayed` is made due
    assert store.update(delayed, JobChange(run_now=True)) is ChangeResult.CHANGED
    got = store.get(delayed)
    assert got is not None and got.run_at is not None
    assert got.run_at <= datetime.now(UTC) + timedelta(seconds=1)
    queued_before = store.enqueue(new(run_at=at - timedelta(hours=3))).id
    assert store.update(queued_before, JobChange(run_now=True)) is ChangeResult.CHANGED
    moved = store.get(queued_before)
    assert moved is not None and moved.run_at is not None
    assert abs((moved.run_at - (at - timedelta(hours=3))).total_seconds()) < 0.001
    # Oldest due first: run-now did not push the job due three hours ago behind the others.
    assert claim(store, limit=3)[0] == queued_before


def test_a_higher_priority_moves_the_job_ahead_of_the_line(store: Store) -> None:
    first = store.enqueue(new()).id
    second = store.enqueue(new()).id
    assert store.update(second, JobChange(priority=-1)) is ChangeResult.CHANGED
    assert claim(store, limit=2) == [second, first]


def test_a_waiting_job_can_be_changed(store: Store) -> None:
    [_, child] = store.enqueue_many([new(ref="a"), new(ref="b", depends_on=("a",))])
    assert store.get(child.id).state is State.WAITING  # type: ignore[union-attr]
    assert store.update(child.id, JobChange(priority=7)) is ChangeResult.CHANGED
    assert store.get(child.id).priority == 7  # type: ignore[union-attr]
    assert store.get(child.id).state is State.WAITING  # type: ignore[union-attr]


def test_a_started_finished_unknown_or_other_tenants_job_is_not_changed(store: Store) -> None:
    job_id = store.enqueue(new(tenant="t")).id
    [claimed] = store.claim("w1", ["default"], 1, LEASE)
    running = store.get(job_id)
    assert store.update(job_id, JobChange(priority=1)) is ChangeResult.STARTED
    assert store.update(job_id, JobChange(run_now=True), tenant="t") is ChangeResult.STARTED
    assert store.get(job_id) == running
    store.finish([Succeeded(job_id, claimed.lease_token)])
    assert store.update(job_id, JobChange(priority=1)) is ChangeResult.STARTED
    assert store.update("0" * 26, JobChange(priority=1)) is ChangeResult.NOT_FOUND
    queued = store.enqueue(new(tenant="t")).id
    assert store.update(queued, JobChange(priority=9), tenant="u") is ChangeResult.NOT_FOUND
    assert store.get(queued).priority == 0  # type: ignore[union-attr]
    assert store.update(queued, JobChange(priority=9), tenant="t") is ChangeResult.CHANGED


def test_an_edit_racing_claims_either_lands_before_the_claim_or_is_refused(
    backend: Backend,
) -> None:
    """A claim and an edit of the same job: the worker runs the payload the store
    answered CHANGED for, or the edit is answered STARTED and changed nothing.
    (PostgreSQL's claim skips the row the edit holds locked: claimed next time.)"""
    store, other = backend.open(), backend.open()

    def edit(job_id: str, go: threading.Barrier, results: list[ChangeResult]) -> None:
        go.wait()
        results.append(other.update(job_id, JobChange(payload_json='{"n":1}')))

    for n in range(20):
        job_id = store.enqueue(NewJob("k", {"n": 0})).id
        results: list[ChangeResult] = []
        go = threading.Barrier(2)
        thread = threading.Thread(target=edit, args=(job_id, go, results))
        thread.start()
        go.wait()
        claimed = store.claim("w1", ["default"], 1, LEASE)
        thread.join()
        if not claimed:
            claimed = store.claim("w1", ["default"], 1, LEASE)
        [job] = claimed
        if results == [ChangeResult.CHANGED]:
            assert job.payload == {"n": 1}, n
        else:
            assert results == [ChangeResult.STARTED] and job.payload == {"n": 0}, n
        store.finish([Succeeded(job.id, job.lease_token)])
