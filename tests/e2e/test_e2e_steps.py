"""Durable steps with real processes (DESIGN.md, "Workflows and steps"; issue
14): a `chit worker` SIGKILLed between two steps leaves the first stored, and
the attempt that takes the job over resumes after it; the first step's function
ran exactly once. With the thread pool and with `--pool process` (where a step's
read and write travel from the child to the worker, which holds the lease)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import chit
from chit.jobs import State
from support.jobs import lines, wait_terminal
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.mark.timeout(90)
@pytest.mark.parametrize("pool", ["thread", "process"])
def test_worker_killed_between_two_steps_resumes_after_the_first(
    procs: Procs, queue: chit.Queue, tmp_path: Path, pool: str
) -> None:
    log = tmp_path / "steps.log"
    job_id = queue.enqueue("two_steps", {"log": str(log), "seconds": 120}).id
    a = procs.worker("--lease", "2", "--pool", pool, name="a")
    wait_until(
        lambda: any(line.startswith("between") for line in lines(log)),
        60,
        what="the first step to be stored on worker a",
    )
    assert [(s.name, s.attempt) for s in queue.store.steps(job_id)] == [("first", 1)]

    a.signal(signal.SIGKILL)
    assert a.wait(5) == -signal.SIGKILL
    b = procs.worker("--lease", "2", "--pool", pool, name="b")
    job = wait_terminal(queue, job_id, 60)

    assert job.state is State.SUCCEEDED, job.error
    assert job.attempts == 2
    assert job.result == {
        "first": {"step": "first", "attempt": 1},
        "second": {"step": "second", "attempt": 2},
        "attempt": 2,
    }
    ran = [line.split()[:3] for line in lines(log)]
    assert ran == [
        ["first", job_id, "1"],
        ["between", job_id, "1"],
        ["second", job_id, "2"],
    ]
    steps = queue.store.steps(job_id)
    assert [(s.name, s.attempt, s.result) for s in steps] == [
        ("first", 1, {"step": "first", "attempt": 1}),
        ("second", 2, {"step": "second", "attempt": 2}),
    ]
    b.signal(signal.SIGTERM)
    assert b.wait(10) == 0
