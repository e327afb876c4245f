"""Waits with a real `chit worker` process (issue 25), on SQLite, PostgreSQL
and Redis: a handler waiting for a signal frees its only slot (another job
runs meanwhile), and the signal sent over HTTP resumes it from the top, its
wait returning the data; a handler that enqueues children in a step waits for
them without a slot (they run on the same single slot), a failed child not
failing it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import chit
from chit.jobs import JobFilter, State
from support.api import Api, running_api
from support.jobs import lines, wait_terminal
from support.processes import Procs
from support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def api(queue: chit.Queue) -> AsyncIterator[Api]:
    async for a in running_api(queue):
        yield a


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("kind", "pool"), [("approve", "thread"), ("approve_async", "thread"), ("approve", "process")]
)
async def test_a_job_waiting_for_a_signal_frees_its_slot_and_the_signal_resumes_it(
    api: Api, procs: Procs, queue: chit.Queue, tmp_path: Path, kind: str, pool: str
) -> None:
    log = tmp_path / "runs.log"
    waiter = queue.enqueue(kind, {"log": str(log), "timeout": 3600}).id
    procs.worker("--concurrency", "1", "--pool", pool)
    job = wait_until(
        lambda: (j := queue.get(waiter)).state is State.WAITING and j, 60, what="the wait"
    )
    assert job.waiting_for is not None and job.waiting_for.signal == "approval"
    assert job.attempts == 0 and job.lease_expires_at is None  # no attempt counted, no lease

    # The only slot is free: another job runs while the first waits.
    other = queue.enqueue("noop", {}).id
    assert wait_terminal(queue, other, 60).state is State.SUCCEEDED
    assert queue.get(waiter).state is State.WAITING

    sent = await api.http.post(f"/jobs/{waiter}/signals/approval", json={"by": "ana"})
    assert sent.status_code == 201, sent.text
    done = wait_terminal(queue, waiter, 60)
    assert (done.state, done.result) == (State.SUCCEEDED, {"decision": {"by": "ana"}})
    assert done.attempts == 1  # the wait did not count: max_attempts=1 was enough
    assert lines(log) == [f"start {waiter} 1", f"start {waiter} 1"]  # run again from the top


@pytest.mark.timeout(120)
async def test_a_job_waits_for_the_children_it_enqueued_in_a_step(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    body = {"log": str(log), "numbers": [1, 2, 3], "fail": [2]}
    parent = queue.enqueue("fan_out", body).id
    procs.worker("--concurrency", "1")  # the children run on the slot the parent freed
    done = wait_terminal(queue, parent, 90)
    assert done.state is State.SUCCEEDED, done.error
    assert done.result == [
        ["succeeded", 2, None],
        ["failed", None, done.result[1][2]],
        ["succeeded", 6, None],
    ]
    assert done.result[1][2].startswith("PermanentError: refused 2")
    assert len(lines(log)) == 2  # once to enqueue and wait, once to collect
    kinds = [j.kind for j in queue.store.list(JobFilter(kind="double")).jobs]
    assert len(kinds) == 3  # the rerun did not enqueue them again


@pytest.mark.timeout(120)
async def test_a_waits_timeout_resumes_it_within_seconds_not_at_the_next_upkeep(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    # A 10-minute lease: upkeep (rescues, expiry) comes every 15 s; timed-out
    # waits are looked for every second.
    procs.worker("--concurrency", "1", "--lease", "600")
    waiter = queue.enqueue("approve", {"log": str(tmp_path / "runs.log"), "timeout": 1}).id
    wait_until(lambda: queue.get(waiter).state is State.WAITING, 60, what="the wait")
    waiting_since = time.monotonic()
    done = wait_terminal(queue, waiter, 60)
    assert (done.state, done.result) == (State.SUCCEEDED, {"decision": None})
    # Well short of the next upkeep (15 s after the worker's first): a machine
    # busy enough to take this long to run a no-op would fail far more.
    assert time.monotonic() - waiting_since < 12
