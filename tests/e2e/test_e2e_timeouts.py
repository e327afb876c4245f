"""Timeouts and the process pool with real `chit worker` processes, on both
backends: an async handler cancelled at its deadline, a sync CPU loop killed at
its deadline under --pool process, children recycled, a child's death failing
only its attempt, progress, checkpoints and cancellation from a child."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import chit
from chit.jobs import AttemptOutcome, State
from support.jobs import app_queue, get, wait_terminal
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

POOL_APP = "support.pool_app:queue"


@pytest.fixture
def pool_queue(db_url: str) -> Iterator[chit.Queue]:
    """The pool app's tasks on the test's database, to enqueue and read jobs."""
    from support import pool_app

    with app_queue(db_url, pool_app.queue) as q:
        yield q


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.timeout(60)
def test_an_async_handler_past_its_timeout_is_failed_within_a_second_of_the_deadline(
    procs: Procs, pool_queue: chit.Queue
) -> None:
    job_id = pool_queue.enqueue("nap", {"seconds": 30}).id
    procs.worker(app=POOL_APP).wait_started()
    job = wait_terminal(pool_queue, job_id, 30)
    assert job.state is State.FAILED
    assert job.error == "timed out after 2 s"
    [attempt] = pool_queue.store.attempts(job_id)
    assert attempt.outcome is AttemptOutcome.FAILED
    assert attempt.error == "timed out after 2 s"
    assert attempt.finished_at is not None
    ran = attempt.finished_at - attempt.started_at
    assert timedelta(seconds=2) <= ran <= timedelta(seconds=3), ran


@pytest.mark.timeout(90)
def test_process_pool_kills_a_cpu_loop_at_its_timeout_and_runs_the_next_job(
    procs: Procs, pool_queue: chit.Queue
) -> None:
    worker = procs.worker("--pool", "process", "--concurrency", "1", app=POOL_APP)
    spin = pool_queue.enqueue("spin", timeout=2).id
    after = pool_queue.enqueue("whoami").id
    job = wait_terminal(pool_queue, spin, 60)
    assert job.state is State.FAILED
    assert job.error == "timed out after 2 s"
    assert job.timeout == 2
    pid = job.checkpoint["pid"]
    assert pid != worker.pid
    wait_until(lambda: gone(pid), 10, what=f"child process {pid} to be gone")
    done = wait_terminal(pool_queue, after, 30)
    assert done.state is State.SUCCEEDED
    assert done.result["pid"] not in (pid, worker.pid)  # a new child
    assert worker.alive()


@pytest.mark.timeout(90)
def test_max_jobs_per_child_recycles_children(procs: Procs, pool_queue: chit.Queue) -> None:
    ids = [pool_queue.enqueue("whoami").id for _ in range(20)]
    procs.worker(
        "--pool", "process", "--concurrency", "2", "--max-jobs-per-child", "5", app=POOL_APP
    )
    jobs = [wait_terminal(pool_queue, job_id, 60) for job_id in ids]
    assert {j.state for j in jobs} == {State.SUCCEEDED}
    assert len({j.result["pid"] for j in jobs}) >= 4


@pytest.mark.timeout(90)
def test_max_memory_per_child_replaces_a_child_that_grew_past_it(
    procs: Procs, pool_queue: chit.Queue
) -> None:
    # Run in claim order, one at a time: two small jobs, one that leaks 300 MB, one more.
    ids = [pool_queue.enqueue("whoami").id for _ in range(2)]
    ids.append(pool_queue.enqueue("leak", {"mb": 300}).id)
    ids.append(pool_queue.enqueue("whoami").id)
    flags = ["--pool", "process", "--concurrency", "1", "--max-memory-per-child", "200"]
    procs.worker(*flags, app=POOL_APP)
    pids = [wait_terminal(pool_queue, job_id, 60).result["pid"] for job_id in ids]
    assert pids[0] == pids[1] == pids[2] != pids[3]


@pytest.mark.timeout(90)
def test_a_sigkilled_child_fails_only_its_attempt(procs: Procs, pool_queue: chit.Queue) -> None:
    worker = procs.worker("--pool", "process", "--concurrency", "2", app=POOL_APP)
    others = [pool_queue.enqueue("whoami").id for _ in range(4)]
    victim = pool_queue.enqueue("die_first").id
    job = wait_terminal(pool_queue, victim, 60)
    assert job.state is State.SUCCEEDED
    assert job.result["attempt"] == 2
    first, second = pool_queue.store.attempts(victim)
    assert first.outcome is AttemptOutcome.RETRIED
    assert first.error == "child process killed by SIGKILL"
    assert second.outcome is AttemptOutcome.SUCCEEDED
    for other in others:
        assert wait_terminal(pool_queue, other, 30).attempts == 1
    assert worker.alive()


@pytest.mark.timeout(90)
def test_progress_checkpoints_and_cancellation_work_from_a_child(
    procs: Procs, pool_queue: chit.Queue, tmp_path: Path
) -> None:
    worker = procs.worker("--pool", "process", "--lease", "3", app=POOL_APP)
    paths = {"go": str(tmp_path / "go"), "finish": str(tmp_path / "finish")}
    job_id = pool_queue.enqueue("steps", paths).id
    # Progress reaches the database with a heartbeat while the child still runs.
    wait_until(lambda: get(pool_queue, job_id).progress.done == 5, 30, what="progress 5/10")
    assert get(pool_queue, job_id).progress.total == 10
    Path(paths["go"]).touch()
    wait_until(lambda: get(pool_queue, job_id).checkpoint, 30, what="the checkpoint")
    stored = get(pool_queue, job_id)
    assert stored.state is State.RUNNING
    assert stored.checkpoint["step"] == 5 and stored.checkpoint["pid"] != worker.pid
    pool_queue.store.cancel(job_id)
    job = wait_terminal(pool_queue, job_id, 30)
    assert job.state is State.CANCELLED

    # Once more to the end: the result, and the progress it came with.
    again = pool_queue.enqueue("steps", paths).id
    Path(paths["finish"]).touch()
    done = wait_terminal(pool_queue, again, 30)
    assert done.state is State.SUCCEEDED
    assert done.result["stored"] is True and done.result["cancelled"] is False
    assert (done.progress.done, done.progress.total) == (5, 10)
    assert done.checkpoint["step"] == 5
