"""Leases with real processes: a killed worker's job is rescued, a long job is
kept by its heartbeats, a frozen worker's late outcome is fenced out, and a job
that kills its worker every time stops after max_attempts."""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path

import pytest

import chit
from chit.jobs import AttemptOutcome, State
from support.jobs import get, lines, wait_terminal
from support.processes import Database, Procs, stop_outside_write
from support.waiting import wait_until

pytestmark = pytest.mark.slow


def outcomes(q: chit.Queue, job_id: str) -> list[AttemptOutcome | None]:
    return [a.outcome for a in q.store.attempts(job_id)]


@pytest.mark.timeout(60)
def test_sigkilled_worker_job_is_rescued_after_the_lease_and_finished(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    job_id = queue.enqueue("sleep", {"log": str(log), "seconds": 1.0}).id
    a = procs.worker("--lease", "2", name="a")
    wait_until(lambda: lines(log), 10, what="the job to start on worker a")

    a.signal(signal.SIGKILL)
    assert a.wait(5) == -signal.SIGKILL
    assert get(queue, job_id).state is State.RUNNING
    # Nobody rescues it before the lease runs out; meanwhile it reads as stale.
    wait_until(lambda: get(queue, job_id).stale, 5, what="the lease to expire")
    assert get(queue, job_id).state is State.RUNNING

    b = procs.worker("--lease", "2", name="b")
    job = wait_terminal(queue, job_id, 20)

    assert job.state is State.SUCCEEDED
    assert job.attempts == 2
    assert job.result == {"pid": b.pid, "attempt": 2}
    history = queue.store.attempts(job_id)
    assert [h.outcome for h in history] == [AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.SUCCEEDED]
    assert f":{a.pid}:" in history[0].worker
    assert f":{b.pid}:" in history[1].worker
    # The lease a claim takes is at least 2 s: the job was not taken back sooner.
    assert history[1].started_at - history[0].started_at >= timedelta(seconds=2)
    assert lines(log) == [
        f"start {job_id} 1 {a.pid}",
        f"start {job_id} 2 {b.pid}",
        f"end {job_id} 2 {b.pid}",
    ]


@pytest.mark.timeout(60)
def test_ten_second_job_under_three_second_lease_runs_exactly_once(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    workers = procs.workers(2, "--lease", "3")
    log = tmp_path / "runs.log"
    job_id = queue.enqueue("sleep", {"log": str(log), "seconds": 10}).id

    job = wait_terminal(queue, job_id, 30)

    assert job.state is State.SUCCEEDED
    assert job.attempts == 1
    assert outcomes(queue, job_id) == [AttemptOutcome.SUCCEEDED]
    runs = lines(log)
    assert [r.split()[0] for r in runs] == ["start", "end"], runs
    ran_on = {int(r.split()[3]) for r in runs}
    assert len(ran_on) == 1
    idle = next(w for w in workers if w.pid not in ran_on)
    for w in workers:
        assert w.alive()
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
    assert "rescued" not in idle.stderr()
    assert "lease lost" not in "".join(w.stderr() for w in workers)


@pytest.mark.timeout(60)
def test_frozen_workers_late_outcome_is_fenced_out(
    procs: Procs, queue: chit.Queue, tmp_path: Path, database: Database
) -> None:
    log = tmp_path / "runs.log"
    job_id = queue.enqueue("sleep", {"log": str(log), "seconds": 3}).id
    a = procs.worker("--lease", "2", name="a")
    wait_until(lambda: lines(log), 10, what="the job to start on worker a")
    # Frozen: no heartbeats, no outcome, until SIGCONT.
    stop_outside_write(a, database)

    b = procs.worker("--lease", "2", name="b")
    done = wait_terminal(queue, job_id, 20)
    assert done.state is State.SUCCEEDED
    assert done.result == {"pid": b.pid, "attempt": 2}
    history = queue.store.attempts(job_id)

    a.signal(signal.SIGCONT)
    # a's handler wakes past its deadline, finishes, and tries to record success.
    wait_until(
        lambda: f"{job_id}: succeeded outcome fenced out" in a.stderr(),
        10,
        what="worker a to log that its outcome was fenced out",
    )
    assert f"end {job_id} 1 {a.pid}" in lines(log)
    after = get(queue, job_id)
    assert after == done
    assert queue.store.attempts(job_id) == history
    assert [h.outcome for h in history] == [AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.SUCCEEDED]
    for w in (a, b):
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0


@pytest.mark.timeout(60)
def test_poison_job_is_claimed_max_attempts_times_then_failed(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    log = tmp_path / "claims.log"
    job_id = queue.enqueue("poison", {"log": str(log)}).id
    assert get(queue, job_id).max_attempts == 2

    died = 0
    for n in range(6):  # a bound, so a job that loops for ever fails the test
        w = procs.worker("--lease", "1", name=f"w{n}")
        wait_until(
            lambda w=w: not w.alive() or get(queue, job_id).state.terminal,
            15,
            what="the worker to die or the job to end",
        )
        if not w.alive():
            assert w.wait(1) == 1
            died += 1
            continue
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        break

    job = get(queue, job_id)
    assert job.state is State.FAILED
    assert job.error == "worker lost: lease expired after 2 attempts"
    assert job.attempts == 2
    assert died == 2
    assert len(lines(log)) == 2
    assert outcomes(queue, job_id) == [AttemptOutcome.LEASE_EXPIRED] * 2
