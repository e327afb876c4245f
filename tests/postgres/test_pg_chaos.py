"""Invariants under real concurrency on PostgreSQL: sixteen worker processes.

Executions are counted from the handlers' own files (one per process), never
from the database under test. On a private server: sixteen workers hold up to
a hundred connections, which the shared test server (max_connections 100, used
by other sessions too) should not have to give.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

import chit
from chit.jobs import State
from support.jobs import all_jobs, lines
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

CLUSTER_SETTINGS = {"max_connections": "300"}
WORKERS = 16
CONCURRENCY = 4


@pytest.fixture
def db_url(cluster_database_url: str) -> str:
    return cluster_database_url


def by_state(q: chit.Queue) -> dict[str, int]:
    return {str(k): v for k, v in q.store.stats().by_state.items()}


def unfinished(q: chit.Queue) -> int:
    counts = by_state(q)
    return counts[State.QUEUED] + counts[State.RUNNING]


def executions(out: Path, suffix: str = "log") -> Counter[str]:
    """How many times each job ran to the end (`log`) or started (`started`)."""
    return Counter(line for f in out.glob(f"*.{suffix}") for line in lines(f))


@pytest.mark.timeout(240)
def test_sixteen_workers_run_each_of_20000_jobs_exactly_once(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    workers = procs.workers(WORKERS, "--concurrency", str(CONCURRENCY))
    started = time.monotonic()
    requests = [chit.JobRequest("record", {"dir": str(out)}) for _ in range(20_000)]
    ids = [e.id for e in queue.enqueue_many(requests)]
    wait_until(
        lambda: by_state(queue)[State.SUCCEEDED] == 20_000, 180, 0.5, what="20000 jobs to succeed"
    )
    elapsed = time.monotonic() - started
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.stderr()[-3000:]

    runs = executions(out)
    files = list(out.glob("*.log"))
    print(
        f"\n20000 jobs on {WORKERS} workers in {elapsed:.1f}s ({20_000 / elapsed:.0f}/s); "
        f"{len(files)} processes ran jobs; executions {sum(runs.values())}, "
        f"ran twice {sum(n > 1 for n in runs.values())}"
    )
    assert set(runs) == set(ids)
    assert [i for i, n in runs.items() if n != 1] == []
    assert {int(f.stem) for f in files} <= {w.pid for w in workers}
    assert len(files) >= WORKERS // 2, "the work was not spread over the processes"
    jobs = all_jobs(queue)
    assert len(jobs) == 20_000
    assert {(j.state, j.attempts) for j in jobs} == {(State.SUCCEEDED, 1)}
    stderr = "".join(w.stderr() for w in workers)
    assert "fenced out" not in stderr
    assert "Traceback" not in stderr


CHAOS_SECONDS = 60
KILL_EVERY = 2.0
LEASE = 2
JOB_SECONDS = 0.1
BACKLOG = 2000


@pytest.mark.timeout(300)
def test_sigkill_every_two_seconds_for_a_minute_loses_no_job_and_bounds_duplicates(
    procs: Procs, queue: chit.Queue, tmp_path: Path
) -> None:
    """A random worker is SIGKILLed every KILL_EVERY seconds for CHAOS_SECONDS and
    replaced at once, while jobs keep coming (the backlog is topped up so the
    workers are busy the whole time). A killed process held at most CONCURRENCY
    jobs, so it can have caused at most that many second executions: counted
    both as runs that started again and as runs that finished twice."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    out = tmp_path / "runs"
    out.mkdir()
    flags = ("--concurrency", str(CONCURRENCY), "--lease", str(LEASE))
    live = procs.workers(WORKERS, *flags)
    enqueued = 0

    def top_up() -> None:
        nonlocal enqueued
        if by_state(queue)[State.QUEUED] < BACKLOG // 2:
            body = {"dir": str(out), "seconds": JOB_SECONDS, "log_start": True}
            # Attempts to spare: one job may be held by several of the killed.
            batch = [chit.JobRequest("record", body, max_attempts=20) for _ in range(BACKLOG)]
            queue.enqueue_many(batch)
            enqueued += len(batch)

    top_up()
    kills = 0
    started = time.monotonic()
    next_kill = started + KILL_EVERY
    while next_kill <= started + CHAOS_SECONDS:
        top_up()
        # Paced, not waiting for anything: the next kill is due at a fixed time.
        time.sleep(max(0.0, next_kill - time.monotonic()))
        victim = rng.choice(live)
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        kills += 1
        live.remove(victim)
        live.append(procs.worker(*flags, name=f"r{kills}"))
        next_kill += KILL_EVERY
    chaos = time.monotonic() - started

    wait_until(lambda: unfinished(queue) == 0, 120, 0.5, what="every job to reach a terminal state")
    drained = time.monotonic() - started - chaos
    for w in live:
        assert w.alive(), f"{w.name} died:\n{w.stderr()[-3000:]}"
        # A replacement started late in the chaos may not have installed its
        # signal handlers yet: SIGTERM before then kills it (exit -15).
        w.wait_started()
        w.signal(signal.SIGTERM)
    for w in live:
        assert w.wait(30) == 0, w.stderr()[-3000:]

    jobs = all_jobs(queue)
    runs = executions(out)
    starts = executions(out, "started")
    duplicates = sum(n - 1 for n in runs.values())
    restarts = sum(n - 1 for n in starts.values())
    states = Counter(str(j.state) for j in jobs)
    reclaimed = sum(j.attempts > 1 for j in jobs)
    # A live worker that lost a lease (starved of CPU past LEASE) says so.
    lost = sum(w.stderr().count("lease lost") for w in procs.all)
    print(
        f"\nchaos (seed {seed}): {len(jobs)} jobs, {kills} kills in {chaos:.0f}s "
        f"(drained {drained:.1f}s after), states {dict(states)}; {reclaimed} jobs claimed "
        f"more than once; duplicate executions: {restarts} started again, {duplicates} "
        f"finished twice (bound {kills * CONCURRENCY}); leases lost by live workers: {lost}"
    )
    assert kills == CHAOS_SECONDS // KILL_EVERY
    assert len(jobs) == enqueued
    assert states == {State.SUCCEEDED: enqueued}
    # Every job ran to the end; the only second runs are those a kill can explain.
    assert set(runs) == set(starts) == {j.id for j in jobs}
    assert duplicates <= restarts <= kills * CONCURRENCY
