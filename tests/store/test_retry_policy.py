"""Retrying a job whose dependency will not succeed is refused above the store
(chit.retrying, through Queue.retry and Queue.replay), the same on every
backend: a store added to BACKENDS gets it without a line of its own."""

from __future__ import annotations

import pytest

import chit
from chit.errors import InvalidTransition
from chit.jobs import Failed, ReplaySelector, RunOn, State
from chit.settings import Settings
from chit.store.capabilities import FullStore
from store.test_contract import LEASE
from store.test_workflows import graph, new, state


@pytest.fixture
def queue(store: FullStore) -> chit.Queue:
    q = chit.Queue(settings=Settings())
    q.use_store(store)
    return q


def fail_first(store: FullStore) -> str:
    [job] = store.claim("w1", ["default"], 1, LEASE)
    assert store.finish([Failed(job.id, job.lease_token, "boom")]) == [True]
    return job.id


def test_a_job_cancelled_by_its_failed_dependency_is_refused_naming_it(
    store: FullStore, queue: chit.Queue
) -> None:
    ids = graph(store, new("extract", ref="a"), new("load", ref="b", depends_on=("a",)))
    fail_first(store)
    assert state(store, ids["b"]) is State.CANCELLED

    with pytest.raises(InvalidTransition) as refused:
        queue.retry(ids["b"])
    assert f"{ids['a']} (extract) is failed" in str(refused.value)
    assert f"retry {ids['a']} first" in str(refused.value)
    with pytest.raises(InvalidTransition, match=f"retry {ids['a']} first"):
        queue.replay(ReplaySelector(ids=(ids["b"],)))
    assert state(store, ids["b"]) is State.CANCELLED  # nothing changed

    # Retrying the dependency, as the refusal says, brings the dependent back.
    assert queue.retry(ids["a"]).state is State.QUEUED
    assert state(store, ids["b"]) is State.WAITING


def test_a_job_whose_dependency_was_cancelled_is_refused_too(
    store: FullStore, queue: chit.Queue
) -> None:
    ids = graph(store, new("a", ref="a"), new("b", ref="b", depends_on=("a",)))
    queue.cancel(ids["a"])
    with pytest.raises(InvalidTransition, match=r"\(a\) is cancelled"):
        queue.retry(ids["b"])


def test_a_replay_naming_one_refused_job_replays_none(store: FullStore, queue: chit.Queue) -> None:
    ids = graph(store, new("a", ref="a"), new("b", ref="b", depends_on=("a",)))
    other = store.enqueue(new("c")).id
    fail_first(store)
    queue.cancel(other)
    with pytest.raises(InvalidTransition):
        queue.replay(ReplaySelector(ids=(other, ids["b"])))
    assert state(store, other) is State.CANCELLED
    assert queue.replay(ReplaySelector(ids=(other, ids["a"]))) == 2


def test_a_callback_is_retried_whatever_its_dependencies_ended_as(
    store: FullStore, queue: chit.Queue
) -> None:
    ids = graph(
        store,
        new("a", ref="a"),
        new("notify", ref="n", depends_on=("a",), run_on=RunOn.FINISHED),
    )
    fail_first(store)
    assert state(store, ids["n"]) is State.QUEUED  # released: a failure is an ending
    queue.cancel(ids["n"])
    assert state(store, ids["n"]) is State.CANCELLED
    assert queue.retry(ids["n"]).state is State.QUEUED


def test_only_failed_or_cancelled_jobs_are_retried(store: FullStore, queue: chit.Queue) -> None:
    job = store.enqueue(new("a")).id
    with pytest.raises(InvalidTransition, match="is queued: only failed or cancelled"):
        queue.retry(job)
    with pytest.raises(chit.JobNotFound):
        queue.retry("01JUNKJUNKJUNKJUNKJUNKJUNK")
