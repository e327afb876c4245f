"""SIGTERM with real processes: finish what runs and claim nothing more; after
the grace period hand unfinished jobs back uncounted; a second signal exits at once."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

import chit
from chit.jobs import AttemptOutcome, State
from support.jobs import get, lines
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.mark.timeout(60)
def test_sigterm_finishes_the_running_job_claims_nothing_more_and_exits_0(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    first = queue.enqueue("sleep", {"log": str(log), "seconds": 2}).id
    w = procs.worker("--concurrency", "1", name="w")
    wait_until(lambda: lines(log), 10, what="the first job to start")
    second = queue.enqueue("sleep", {"log": str(log), "seconds": 0}).id

    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0

    job = get(queue, first)
    assert job.state is State.SUCCEEDED
    assert job.attempts == 1
    assert [a.outcome for a in queue.store.attempts(first)] == [AttemptOutcome.SUCCEEDED]
    # The job queued behind it was not claimed once the signal arrived.
    waiting = get(queue, second)
    assert (waiting.state, waiting.attempts) == (State.QUEUED, 0)
    assert queue.store.attempts(second) == []
    assert lines(log) == [f"start {first} 1 {w.pid}", f"end {first} 1 {w.pid}"]
    assert "SIGTERM: finishing running jobs" in w.stderr()


@pytest.mark.timeout(60)
def test_sigterm_after_grace_hands_the_job_back_uncounted_and_exits_0(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    job_id = queue.enqueue("sleep", {"log": str(log), "seconds": 60}).id
    w = procs.worker("--grace", "1", "--lease", "30", name="w")
    wait_until(lambda: lines(log), 10, what="the job to start")

    started = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    assert time.monotonic() - started < 6

    job = get(queue, job_id)
    assert job.state is State.QUEUED
    assert job.attempts == 0
    assert job.lease_expires_at is None
    # Queued again at once, not after the 30-second lease.
    assert job.run_at <= datetime.now(UTC)
    assert [a.outcome for a in queue.store.attempts(job_id)] == [AttemptOutcome.RELEASED]
    assert "handing back 1 unfinished jobs" in w.stderr()

    # The next worker takes it straight away, and it is attempt 1 again.
    again = procs.worker(name="again")
    again.wait_started()
    wait_until(lambda: len(lines(log)) == 2, 10, what="the job to start again")
    assert lines(log) == [f"start {job_id} 1 {w.pid}", f"start {job_id} 1 {again.pid}"]


@pytest.mark.timeout(60)
def test_second_sigterm_exits_at_once_nonzero(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    job_id = queue.enqueue("sleep", {"log": str(log), "seconds": 60}).id
    w = procs.worker(name="w")  # default grace: 30 s
    wait_until(lambda: lines(log), 10, what="the job to start")

    w.signal(signal.SIGTERM)
    wait_until(lambda: "finishing running jobs" in w.stderr(), 5, what="the first signal")
    started = time.monotonic()
    w.signal(signal.SIGTERM)
    rc = w.wait(5)

    # The first signal hands the next one to the kernel's default action, which
    # works even while the worker waits in C on a busy database.
    assert rc == -signal.SIGTERM
    assert time.monotonic() - started < 3
    # Left as it was: the lease runs out and a worker's rescue takes it back.
    assert get(queue, job_id).state is State.RUNNING
