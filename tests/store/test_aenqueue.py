"""`Queue.aenqueue` and `aenqueue_many` on every backend: the same results and
errors as the sync calls, and an event loop that keeps running while the store
makes the call wait. (On the application's own async connection:
test_sql_caller_transaction.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

import chit
from chit.errors import (
    IdempotencyConflict,
    InvalidPayload,
    InvalidRequest,
    PayloadTooLarge,
    UnknownKind,
)
from chit.jobs import State
from chit.store.capabilities import FullStore
from support.store_backends import needs
from support.store_queue import report_queue

if TYPE_CHECKING:
    from support.store_backends import Backend

pytestmark = pytest.mark.anyio


@pytest.fixture
async def queue(backend: Backend) -> AsyncIterator[chit.Queue]:
    q = report_queue(backend.database_url)
    yield q
    await q.aclose()


def count(queue: chit.Queue) -> int:
    return sum(queue.store.stats().by_state.values())


@needs(FullStore)
async def test_aenqueue_stores_what_enqueue_stores(queue: chit.Queue) -> None:
    sync = queue.enqueue("report", {"region": "emea"}, idempotency_key="s", concurrency_key="c")
    done = await queue.aenqueue(
        "report", {"region": "emea"}, idempotency_key="a", concurrency_key="c"
    )
    assert done.created and sync.created and done.id != sync.id
    a, s = queue.get(done.id), queue.get(sync.id)
    fields = ("kind", "payload", "queue", "priority", "max_attempts", "concurrency_key", "state")
    assert [getattr(a, f) for f in fields] == [getattr(s, f) for f in fields]
    assert a.payload == {"region": "emea", "year": 2026} and a.queue == "reports"


@needs(FullStore)
async def test_the_same_idempotency_key_answers_the_same_job(queue: chit.Queue) -> None:
    first = await queue.aenqueue("free", {"n": 1}, idempotency_key="k")
    again = await queue.aenqueue("free", {"n": 1}, idempotency_key="k")
    sync_again = queue.enqueue("free", {"n": 1}, idempotency_key="k")
    assert first.created and not again.created and not sync_again.created
    assert again.id == first.id == sync_again.id
    with pytest.raises(IdempotencyConflict):
        await queue.aenqueue("free", {"n": 2}, idempotency_key="k")
    assert count(queue) == 1


@needs(FullStore)
@pytest.mark.parametrize(
    ("kind", "payload", "error"),
    [
        ("nope", {}, UnknownKind),
        ("report", {"year": 1}, InvalidPayload),
        ("free", [1, 2], InvalidPayload),
        ("free", {"x": "y" * 3000}, PayloadTooLarge),
    ],
)
async def test_bad_input_raises_and_stores_nothing(
    queue: chit.Queue, kind: str, payload: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await queue.aenqueue(kind, payload)
    # One bad job in a batch: none of the batch is stored.
    batch = [chit.JobRequest("free", {"n": n}) for n in range(3)] + [chit.JobRequest(kind, payload)]
    with pytest.raises(error):
        await queue.aenqueue_many(batch)
    with pytest.raises(InvalidRequest):
        await queue.aenqueue("free", {}, priority=10**9)
    assert count(queue) == 0


@needs(FullStore)
async def test_aenqueue_many_stores_a_batch_and_a_graph(queue: chit.Queue) -> None:
    batch = await queue.aenqueue_many(chit.JobRequest("free", {"n": n}) for n in range(150))
    assert len({e.id for e in batch}) == 150 and all(e.created for e in batch)
    assert [queue.get(e.id).payload["n"] for e in batch[:3]] == [0, 1, 2]

    a, b, c = await queue.aenqueue_many(
        [
            chit.JobRequest("free", {}, ref="a"),
            chit.JobRequest("free", {}, ref="b", depends_on=[batch[0].id]),
            chit.JobRequest("free", {}, depends_on=["a", "b"]),
        ]
    )
    assert a.workflow_id is not None and a.workflow_id == b.workflow_id == c.workflow_id
    assert queue.get(c.id).state is State.WAITING
    assert queue.get(c.id).depends_on == (a.id, b.id)

    with pytest.raises(InvalidRequest, match="cycle"):
        await queue.aenqueue_many(
            [
                chit.JobRequest("free", {}, ref="x", depends_on=["y"]),
                chit.JobRequest("free", {}, ref="y", depends_on=["x"]),
            ]
        )
    assert count(queue) == 153


@needs(FullStore)
async def test_aenqueue_after_aclose_opens_the_store_again(queue: chit.Queue) -> None:
    first = await queue.aenqueue("free", {})
    await queue.aclose()
    second = await queue.aenqueue("free", {})
    assert queue.get(first.id).state is queue.get(second.id).state is State.QUEUED


@needs(FullStore)
async def test_aenqueue_from_another_event_loop(queue: chit.Queue) -> None:
    # A pool lives on one loop; a second loop (asyncio.run in a thread) gets its own.
    here = await queue.aenqueue("free", {})

    def elsewhere() -> chit.Enqueued:
        async def go() -> chit.Enqueued:
            done = await queue.aenqueue("free", {})
            await queue.store.aclose()
            return done

        return asyncio.run(go())

    there = await asyncio.to_thread(elsewhere)
    again = await queue.aenqueue("free", {})
    assert len({here.id, there.id, again.id}) == 3


@needs(FullStore)
async def test_the_event_loop_runs_while_the_database_makes_aenqueue_wait(
    backend: Backend, queue: chit.Queue
) -> None:
    """Another connection holds the write lock; aenqueue waits for it, the loop does not.
    (An aenqueue that blocked the loop would never let the ticks reach 40: the
    lock is released only after they do, so the test would hang to its timeout.)"""
    await queue.aenqueue("free", {})  # the store, pool and thread opened
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    try:
        # Let go of in a quick call: no need to leave the loop.
        with backend.inspect.hold_writes():
            pending = asyncio.create_task(queue.aenqueue("free", {"held": True}))
            while ticks < 40:  # about 0.2 s of ticks while the lock is held
                await asyncio.sleep(0.005)
            assert not pending.done()
        done = await asyncio.wait_for(pending, 30)
        assert queue.get(done.id).payload == {"held": True}
    finally:
        ticking.cancel()
