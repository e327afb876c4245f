"""A `redis-server` stalled with `DEBUG SLEEP` under real workers: shorter
than the lease, every lease holds (no rescue, each job run once); longer, a
lease may lapse and its job be rescued, and the late worker's outcome is then
fenced out. Either way each job succeeds exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import redis

import chit
from chit.jobs import AttemptOutcome, State
from support.jobs import app_queue, get, lines, wait_terminal
from support.processes import Proc, running_procs
from support.redis import redis_server
from support.waiting import wait_until

pytestmark = pytest.mark.slow

LEASE = 4
JOBS = 4
JOB_SECONDS = 3


@pytest.fixture
def debug_redis() -> Iterator[str]:
    """A private server that takes DEBUG (Redis 7 refuses it unless enabled)."""
    with redis_server("--enable-debug-command", "yes") as url:
        yield url


def stall(url: str, seconds: float) -> None:
    """The server runs nothing else for `seconds` (this call returns after them)."""
    with closing(redis.Redis.from_url(url, socket_timeout=seconds + 30)) as client:
        client.execute_command("DEBUG", "SLEEP", seconds)


@contextmanager
def stalled(
    tmp_path: Path, url: str, seconds: float
) -> Iterator[tuple[chit.Queue, list[str], list[Proc]]]:
    """JOBS sleep jobs started on two workers, the server stalled `seconds`
    while they run, each waited on until it succeeds; the queue, the ids and
    the workers, still running."""
    log = tmp_path / "runs.log"
    with running_procs(tmp_path, url) as procs, app_queue(url) as queue:
        body = {"log": str(log), "seconds": JOB_SECONDS}
        ids = [queue.enqueue("sleep", body).id for _ in range(JOBS)]
        workers = [procs.worker("--lease", str(LEASE), "--concurrency", "2", name=n) for n in "ab"]
        wait_until(
            lambda: sum(line.startswith("start") for line in lines(log)) >= JOBS,
            60,
            what="every job to start",
        )
        stall(url, seconds)
        for job_id in ids:
            assert wait_terminal(queue, job_id, 60).state is State.SUCCEEDED
        assert all(w.alive() for w in workers), [w.stderr() for w in workers]
        yield queue, ids, workers


def once_each(queue: chit.Queue, ids: list[str]) -> list[list[AttemptOutcome | None]]:
    """Every job's attempts' outcomes, after checking that exactly one succeeded
    and that the job's result is that attempt's."""
    every = []
    for job_id in ids:
        attempts = queue.store.attempts(job_id)
        outcomes = [a.outcome for a in attempts]
        assert outcomes.count(AttemptOutcome.SUCCEEDED) == 1, (job_id, outcomes)
        job = get(queue, job_id)
        assert job.result["attempt"] == job.attempts == len(attempts)
        every.append(outcomes)
    return every


@pytest.mark.timeout(120)
def test_a_stall_shorter_than_the_lease_keeps_every_lease(tmp_path: Path, debug_redis: str) -> None:
    # Heartbeats every LEASE/3 s: a 1 s stall leaves each lease over 1.5 s to spare.
    with stalled(tmp_path, debug_redis, 1) as (queue, ids, workers):
        assert once_each(queue, ids) == [[AttemptOutcome.SUCCEEDED]] * JOBS
        logs = "".join(w.stderr() for w in workers)
        assert "rescued" not in logs and "fenced out" not in logs
        assert len(lines(tmp_path / "runs.log")) == 2 * JOBS  # each started and ended once


@pytest.mark.timeout(120)
def test_a_stall_longer_than_the_lease_rescues_or_holds_never_twice(
    tmp_path: Path, debug_redis: str
) -> None:
    with stalled(tmp_path, debug_redis, LEASE + 2) as (queue, ids, workers):
        every = once_each(queue, ids)
        for outcomes in every:
            # Held (its heartbeat or finish came first), or rescued and run again.
            assert outcomes in (
                [AttemptOutcome.SUCCEEDED],
                [AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.SUCCEEDED],
            ), outcomes
        rescued = sum(len(outcomes) - 1 for outcomes in every)
        starts = [line for line in lines(tmp_path / "runs.log") if line.startswith("start")]
        assert len(starts) == JOBS + rescued
        # Each rescued job's first run ended late: its outcome fenced out, not recorded.
        wait_until(
            lambda: "".join(w.stderr() for w in workers).count("outcome fenced out") >= rescued,
            30,
            what="the late workers to log their outcomes fenced out",
        )
