"""Debounce in the store (DESIGN.md "Changing work already queued"), on every
backend: the first enqueue of a key stores a job due `debounce` from now; until
it starts, each later one replaces its payload and moves its start, never past
`debounce_max` after the first; once it started, a new job."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from chit.errors import InvalidRequest
from chit.jobs import Debounce, Enqueued, Failed, NewJob, State, Succeeded
from chit.store.base import Store

if TYPE_CHECKING:
    from support.store_backends import Backend

LEASE = 30.0


def debounced(
    n: int,
    key: str = "user:42",
    kind: str = "k",
    debounce: float = 60.0,
    debounce_max: float = 600.0,
    tenant: str = "",
) -> NewJob:
    return NewJob(kind, {"n": n}, tenant=tenant, debounce=Debounce(key, debounce, debounce_max))


def seconds_from_now(at: datetime) -> float:
    return (at - datetime.now(UTC)).total_seconds()


def test_a_debounced_job_handed_a_run_at_starts_when_the_debounce_says(store: Store) -> None:
    # The API refuses the pair (checks.check_debounce); code that builds a
    # NewJob itself gets the same start on every store: PostgreSQL took the
    # run_at where SQLite and Redis took the debounce.
    job = debounced(1, debounce=10.0, debounce_max=30.0)
    job = NewJob(
        job.kind, job.payload, run_at=datetime.now(UTC) + timedelta(hours=1), debounce=job.debounce
    )
    stored = store.get(store.enqueue(job).id)
    assert stored is not None and stored.run_at is not None
    assert 0 < seconds_from_now(stored.run_at) <= 10


def test_a_later_enqueue_replaces_the_payload_and_moves_the_start(store: Store) -> None:
    first = store.enqueue(debounced(1))
    assert first.created and not first.debounced
    job = store.get(first.id)
    assert job is not None and job.state is State.QUEUED and job.debounce_key == "user:42"
    assert 58 < seconds_from_now(job.run_at) <= 60
    again = store.enqueue(debounced(2, debounce=120.0))
    assert (again.id, again.created, again.debounced) == (first.id, False, True)
    job = store.get(first.id)
    assert job is not None and job.payload == {"n": 2}
    assert 118 < seconds_from_now(job.run_at) <= 120
    assert store.claim("w", ["default"], 10, LEASE) == []  # not due


def test_the_start_never_moves_past_debounce_max_after_the_first(store: Store) -> None:
    first = store.enqueue(debounced(1, debounce=10.0, debounce_max=30.0))
    # Its own bound holds, whatever a later enqueue asks for.
    store.enqueue(debounced(2, debounce=100.0, debounce_max=1000.0))
    job = store.get(first.id)
    assert job is not None and 28 < seconds_from_now(job.run_at) <= 30
    assert abs((job.run_at - job.created_at).total_seconds() - 30) < 0.01


def test_once_started_the_key_makes_a_new_job(store: Store) -> None:
    first = store.enqueue(debounced(1, debounce=0.001, debounce_max=0.001))
    [claimed] = store.claim(
        "w", ["default"], 1, LEASE, now=datetime.now(UTC) + timedelta(seconds=1)
    )
    assert claimed.id == first.id and claimed.payload == {"n": 1}
    second = store.enqueue(debounced(2))
    assert second.created and second.id != first.id
    # A retry puts the first back to queued: it does not take the key again
    # (nor clash with the second on the key's unique index).
    assert store.finish([Failed(first.id, claimed.lease_token, "boom", retry_in=60)]) == [True]
    assert store.get(first.id).state is State.QUEUED  # type: ignore[union-attr]
    third = store.enqueue(debounced(3))
    assert (third.id, third.debounced) == (second.id, True)


def test_a_cancelled_or_replayed_job_leaves_the_key(store: Store) -> None:
    first = store.enqueue(debounced(1))
    store.cancel(first.id)
    second = store.enqueue(debounced(2))
    assert second.created and second.id != first.id
    assert store.retry(first.id)  # queued again, its key cleared: no clash with `second`
    replayed = store.get(first.id)
    assert replayed is not None and replayed.state is State.QUEUED
    assert replayed.debounce_key is None
    assert store.enqueue(debounced(3)).id == second.id


def test_keys_are_per_tenant_and_apart_from_other_keys(store: Store) -> None:
    a = store.enqueue(debounced(1, tenant="a"))
    b = store.enqueue(debounced(1, tenant="b"))
    other = store.enqueue(debounced(1, key="user:43", tenant="a"))
    assert len({a.id, b.id, other.id}) == 3
    assert store.enqueue(debounced(2, tenant="b")).id == b.id


def test_a_key_held_by_another_kind_is_refused_and_stores_nothing(store: Store) -> None:
    first = store.enqueue(debounced(1, kind="digest"))
    before = store.get(first.id)
    with pytest.raises(InvalidRequest, match=r"held by job .* of kind 'digest'"):
        store.enqueue_many([NewJob("plain", {}), debounced(2, kind="reindex")])
    assert store.get(first.id) == before
    assert store.stats().by_state["queued"] == 1  # the plain job was not stored either


def test_one_batch_of_one_key_stores_one_job_with_the_last_payload(store: Store) -> None:
    results = store.enqueue_many([debounced(1), debounced(2), debounced(3)])
    assert [r.created for r in results] == [True, False, False]
    assert [r.debounced for r in results] == [False, True, True]
    assert len({r.id for r in results}) == 1
    assert store.get(results[0].id).payload == {"n": 3}  # type: ignore[union-attr]
    more = store.enqueue_many([debounced(4), debounced(5)])
    assert {r.id for r in more} == {results[0].id} and all(r.debounced for r in more)
    assert store.get(results[0].id).payload == {"n": 5}  # type: ignore[union-attr]


def test_concurrent_enqueues_of_one_key_store_one_job(backend: Backend) -> None:
    stores = [backend.open() for _ in range(4)]
    go = threading.Barrier(len(stores))
    answers: list[list[Enqueued]] = [[] for _ in stores]

    def submit(n: int) -> None:
        go.wait()
        for i in range(25):
            answers[n].append(stores[n].enqueue(debounced(100 * n + i)))

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [a for answer in answers for a in answer]
    assert len({a.id for a in flat}) == 1
    assert sum(a.created for a in flat) == 1 and sum(a.debounced for a in flat) == 99
    assert stores[0].stats().by_state["queued"] == 1


def test_enqueues_racing_claims_never_change_a_started_job(backend: Backend) -> None:
    """Each enqueue either debounces into a job not yet claimed (and the claim
    then runs the payload it left) or makes a new job: a payload never lands in
    a running job, and every enqueued payload reaches a job."""
    submitter, worker = backend.open(), backend.open()
    stop = threading.Event()
    ran: list[dict] = []

    def work() -> None:
        while not stop.is_set() or worker.stats().by_state["queued"]:
            soon = datetime.now(UTC) + timedelta(seconds=5)
            for job in worker.claim("w", ["default"], 1, LEASE, now=soon):
                ran.append(job.payload)
                worker.finish([Succeeded(job.id, job.lease_token)])

    thread = threading.Thread(target=work)
    thread.start()
    answers = [
        submitter.enqueue(debounced(n, debounce=0.001, debounce_max=0.001)) for n in range(200)
    ]
    stop.set()
    thread.join()
    created = [a.id for a in answers if a.created]
    assert len(ran) == len(created)  # one run per job stored
    # The last payload sent to each job is the one it ran with.
    last: dict[str, int] = {}
    for n, a in enumerate(answers):
        last[a.id] = n
    assert sorted(p["n"] for p in ran) == sorted(last.values())
