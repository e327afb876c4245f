"""An idle worker on Redis claims in the round trip that wakes it (ClaimsOnWake):
the blocking read moves the wake token into the worker's own list and the claim
pipelined behind it runs only when it finds one there."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from typing import Any, TypeVar

import pytest
import redis

import chit
from chit.fleet import WorkerBeat
from chit.jobs import Claimed, NewJob, State
from chit.limits import Limits
from chit.settings import Settings
from chit.store.redis import RedisStore
from chit.worker import Worker, runner
from chit.worker.execute import Call, Free, Report, invoke
from chit.worker.runner import FIRST_IDLE_WAIT, IDLE_AFTER, Pause
from support.waiting import wait_until

PREFIX = "{chit-wake}"
T = TypeVar("T")


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    with closing(redis.Redis.from_url(redis_url, decode_responses=True)) as c:
        yield c
        for key in c.scan_iter(match=f"{PREFIX}:*"):
            c.delete(key)


@pytest.fixture
def store(redis_url: str, client: redis.Redis) -> Iterator[RedisStore]:
    with closing(RedisStore(redis_url, prefix=PREFIX)) as s:
        yield s


def waiting(client: redis.Redis, start: Callable[[], T]) -> Future[T]:
    """`start` on a thread, returned once its blocking read is under way (the
    server lists a client blocked in BLMOVE or BLPOP)."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(start)
    pool.shutdown(wait=False)
    deadline = time.monotonic() + 10
    while not any(c.get("cmd") in ("blmove", "blpop") for c in client.client_list()):
        assert not future.done(), future.result()
        assert time.monotonic() < deadline, "the wait never blocked"
        time.sleep(0.005)
    return future


def test_a_wake_claims_the_job_it_announces_in_the_same_call(
    store: RedisStore, redis_url: str, client: redis.Redis
) -> None:
    future = waiting(client, lambda: store.claim_on_wake("w1", ["default"], 4, 30, 10))
    with closing(RedisStore(redis_url, prefix=PREFIX)) as other:
        job_id = other.enqueue(NewJob("k", {"n": 1})).id
    claimed = future.result(timeout=10)
    assert claimed is not None and [job.id for job in claimed] == [job_id]
    assert claimed[0].payload == {"n": 1} and claimed[0].attempt == 1
    got = store.get(job_id)
    assert got is not None and got.state is State.RUNNING and got.worker == "w1"
    assert not client.exists(f"{PREFIX}:wk:w1")  # the token taken is gone


def test_a_wait_that_ends_without_a_wake_claims_nothing(
    store: RedisStore, client: redis.Redis
) -> None:
    assert store.claim_on_wake("w1", ["default"], 4, 30, 0.05) is None
    stop = threading.Event()
    stop.set()
    assert store.claim_on_wake("w1", ["default"], 4, 30, 10, stop) is None
    # A job queued with no token left to announce it waits for the next claim.
    job_id = store.enqueue(NewJob("k", {})).id
    client.delete(f"{PREFIX}:w:default")
    assert store.claim_on_wake("w1", ["default"], 4, 30, 0.05) is None
    assert store.get(job_id).state is State.QUEUED  # type: ignore[union-attr]
    assert not client.keys(f"{PREFIX}:wk:*")


@pytest.mark.parametrize("shape", ["two queues", "a limited kind"])
def test_a_wait_it_cannot_pair_with_one_claim_only_waits(
    store: RedisStore, client: redis.Redis, shape: str
) -> None:
    queues = ["default", "other"] if shape == "two queues" else ["default"]
    if shape == "a limited kind":
        store.declare_limits({"k": Limits(concurrency=1)})
    future = waiting(client, lambda: store.claim_on_wake("w1", queues, 4, 30, 10))
    job_id = store.enqueue(NewJob("k", {})).id
    assert future.result(timeout=10) is None  # woken, and the caller claims
    assert store.get(job_id).state is State.QUEUED  # type: ignore[union-attr]
    assert [job.id for job in store.claim("w1", queues, 4, 30)] == [job_id]


def test_a_wake_after_the_server_lost_the_library_loads_it_and_still_claims(
    store: RedisStore, client: redis.Redis
) -> None:
    job_id = store.enqueue(NewJob("k", {})).id
    client.delete(f"{PREFIX}:w:default")  # its token, sent again below
    future = waiting(client, lambda: store.claim_on_wake("w1", ["default"], 4, 30, 10))
    client.function_flush()  # as a restart without the library would leave it
    client.rpush(f"{PREFIX}:w:default", "1")
    claimed = future.result(timeout=10)
    assert claimed is not None and [job.id for job in claimed] == [job_id]
    assert not client.exists(f"{PREFIX}:wk:w1")


def test_a_worker_forgotten_or_gone_stale_leaves_no_token_list(
    store: RedisStore, client: redis.Redis
) -> None:
    # As a crash between the wait's move and its claim would leave one.
    client.rpush(f"{PREFIX}:wk:gone", "1")
    client.rpush(f"{PREFIX}:wk:stopped", "1")
    store.forget_worker("stopped")
    assert not client.exists(f"{PREFIX}:wk:stopped")
    client.hset(f"{PREFIX}:workers", "gone", "{}")
    client.zadd(f"{PREFIX}:wstale", {"gone": 0})
    store.beat_worker(WorkerBeat("w1", "host", 1, ("default",), ("k",), 1, 0), 30)
    assert not client.exists(f"{PREFIX}:wk:gone")


class Inline:
    """Runs each handler at once on the caller's thread."""

    def submit(self, call: Call, report: Report, free: Free) -> None:
        report(invoke(call))


def test_a_worker_idle_on_redis_runs_the_job_its_wait_claimed_without_claiming_again(
    redis_url: str, client: redis.Redis
) -> None:
    url = f"{redis_url}?prefix=%7Bchit-wake%7D"  # PREFIX, URL-encoded
    settings = Settings(database_url=url, concurrency=2)
    queue = chit.Queue(settings=settings)
    queue.task("double")(lambda job, body: body["n"] * 2)
    worker = Worker(queue)
    worker.pipeline.sync = Inline()
    claims: list[Any] = []
    claim = worker.store.claim

    def counted(*args: Any, **kwargs: Any) -> Claimed:
        claims.append(args)
        return claim(*args, **kwargs)

    worker.store.claim = counted  # type: ignore[method-assign]
    try:
        assert worker.tick() == Pause("jobs", FIRST_IDLE_WAIT)  # nothing queued: claimed nothing
        assert len(claims) == 1
        future = waiting(client, lambda: worker._wait(Pause("jobs", 10)))
        job = queue.enqueue("double", {"n": 4})
        future.result(timeout=10)
        # The wait claimed it: the tick counts it, claims nothing more, waits again.
        assert worker.tick() == Pause("jobs", FIRST_IDLE_WAIT)
        assert len(claims) == 1
        assert worker.flush() == 1
        assert queue.store.get(job.id).result == 8  # type: ignore[union-attr]
    finally:
        queue.close()


def test_an_idle_worker_waits_on_a_job_thread_which_runs_the_job_its_wake_claimed(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{redis_url}?prefix=%7Bchit-wake%7D"  # PREFIX, URL-encoded
    queue = chit.Queue(settings=Settings(database_url=url, concurrency=2))
    ran_on: dict[str, int] = {}
    queue.task("where")(lambda job, body: ran_on.setdefault(job.id, threading.get_ident()))
    worker = Worker(queue)
    waited_on: list[int] = []
    claim_on_wake = worker.store.claim_on_wake  # type: ignore[attr-defined]

    def recorded(*args: Any, **kwargs: Any) -> Claimed | None:
        waited_on.append(threading.get_ident())
        return claim_on_wake(*args, **kwargs)

    worker.store.claim_on_wake = recorded  # type: ignore[attr-defined]
    here = threading.get_ident()
    try:
        # Through a backlog (its wake already there, the wait short): this thread
        # waits. Short against a bound no busy machine's wait reaches, not 5 ms.
        first = queue.enqueue("where")
        monkeypatch.setattr(runner, "IDLE_AFTER", 10.0)
        worker._wait(Pause("jobs", 10))
        assert waited_on == [here]
        # A wait that outlasts IDLE_AFTER (nothing to wake it): the worker is idle.
        monkeypatch.setattr(runner, "IDLE_AFTER", IDLE_AFTER)
        worker._wait(Pause("jobs", IDLE_AFTER * 4))
        assert waited_on == [here, here]
        # So the next wait is a job thread's, which runs the job its wake claimed.
        caller: list[int] = []

        def wait() -> None:
            caller.append(threading.get_ident())
            worker._wait(Pause("jobs", 10))

        future = waiting(client, wait)
        job = queue.enqueue("where")
        future.result(timeout=10)
        assert waited_on[2] not in (here, caller[0])
        wait_until(lambda: job.id in ran_on, 10)
        assert ran_on[job.id] == waited_on[2]

        def recorded_all() -> bool:
            worker.flush()
            return all(queue.store.get(j.id).state is State.SUCCEEDED for j in (first, job))  # type: ignore[union-attr]

        wait_until(recorded_all, 10)
    finally:
        worker.stop()
        queue.close()
