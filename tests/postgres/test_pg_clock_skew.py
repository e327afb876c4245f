"""A worker whose wall clock is two hours off (libfaketime), beside a worker
with the right time, on one PostgreSQL database: leases, run_at and staleness
come from the database clock, so nothing changes. PostgreSQL only: SQLite runs
on one machine, with one clock."""

from __future__ import annotations

import glob
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

import chit
from chit.jobs import AttemptOutcome, State
from support.jobs import get, lines, wait_terminal
from support.processes import E2E_APP, Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

LEASE = 2.0


@pytest.fixture
def db_url(pg_database_url: str) -> str:
    return pg_database_url


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        pytest.fail(
            "libfaketime is not installed: apt-get install faketime (`make test` does)",
            pytrace=False,
        )
    return found[0]


def database_now(url: str) -> float:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("offset", ["+2h", "-2h"])
def test_worker_with_a_skewed_clock_changes_nothing(
    offset: str, procs: Procs, queue: chit.Queue, tmp_path: Path, db_url: str
) -> None:
    skew = 7200.0 if offset == "+2h" else -7200.0
    log = tmp_path / "runs.log"
    # The right-time worker holds a long job under a short lease, kept by heartbeats;
    # on its own queue, so it takes nothing else however slowly the other starts.
    held_id = queue.enqueue("sleep", {"log": str(log), "seconds": 8}, queue="held").id
    right = procs.worker(
        "--lease", str(LEASE), "--concurrency", "1", "--queues", "held", name="right"
    )
    wait_until(lambda: lines(log), 15, what="the long job to start on the right-time worker")

    skewed = procs.start(
        ["-m", "chit", "worker", "--app", E2E_APP, "--lease", str(LEASE)],
        name="skewed",
        extra_env={
            "LD_PRELOAD": libfaketime(),
            "FAKETIME": offset,
            # Only the wall clock is off; timeouts and intervals keep real time, as on
            # a real machine (libfaketime's faked monotonic clock hangs Python's waits).
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        },
    )
    skewed.wait_started(20)
    # Everything enqueued from now on goes to the skewed worker.
    real_now = time.time()
    clock_id = queue.enqueue("clock", {}).id
    retried_id = queue.enqueue("clock", {"fail_first": True}).id
    holding_id = queue.enqueue("clock", {"seconds": 3}).id
    # run_at as a client with the right time sets it.
    far = chit.JobRequest("clock", {}, run_at=datetime.now(UTC) + timedelta(hours=1))
    soon = chit.JobRequest("clock", {}, run_at=datetime.now(UTC) + timedelta(seconds=3))
    far_id, soon_id = (e.id for e in queue.enqueue_many([far, soon]))

    # The skewed worker really is skewed: its handler reads its own clock.
    result = wait_terminal(queue, clock_id, 15).result
    assert result["pid"] == skewed.pid
    assert abs(result["time"] - real_now - skew) < 60

    # A lease it takes is measured from the database's now(), not from its clock.
    holding = wait_until(
        lambda: (job := get(queue, holding_id)).state is State.RUNNING and job,
        15,
        what="the skewed worker to claim a job",
    )
    db_now = database_now(db_url)
    assert holding.worker is not None and f":{skewed.pid}:" in holding.worker
    assert holding.lease_expires_at is not None
    expires = holding.lease_expires_at.timestamp()
    assert db_now - 1 < expires <= db_now + LEASE + 1, (expires - db_now, skew)
    assert not holding.stale

    # A retry's backoff is applied with the database clock: run again at once,
    # not two hours later (or earlier).
    retried = wait_terminal(queue, retried_id, 15)
    assert (retried.state, retried.attempts) == (State.SUCCEEDED, 2)
    assert [a.outcome for a in queue.store.attempts(retried_id)] == [
        AttemptOutcome.RETRIED,
        AttemptOutcome.SUCCEEDED,
    ]

    # A job due in 3 s does not start early, and one due in an hour not at all.
    soon_job = wait_terminal(queue, soon_id, 15)
    assert soon_job.result["pid"] == skewed.pid
    [attempt] = queue.store.attempts(soon_id)
    assert attempt.started_at >= soon_job.run_at

    # The long job was never taken from the right-time worker, whose heartbeats the
    # skewed worker's rescue would have found two hours stale (or fresh for hours).
    held = wait_terminal(queue, held_id, 20)
    assert held.state is State.SUCCEEDED
    assert (held.attempts, held.result) == (1, {"pid": right.pid, "attempt": 1})
    assert [a.outcome for a in queue.store.attempts(held_id)] == [AttemptOutcome.SUCCEEDED]
    assert lines(log) == [f"start {held_id} 1 {right.pid}", f"end {held_id} 1 {right.pid}"]

    far_job = get(queue, far_id)
    assert (far_job.state, far_job.attempts) == (State.QUEUED, 0)
    holding_done = wait_terminal(queue, holding_id, 15)
    assert (holding_done.state, holding_done.attempts) == (State.SUCCEEDED, 1)

    for w in (right, skewed):
        w.signal(signal.SIGTERM)
        assert w.wait(15) == 0, w.stderr()[-3000:]
    stderr = right.stderr() + skewed.stderr()
    assert skewed.stderr().count(" failed after ") == 1  # the retried job's first attempt
    for sign_of_trouble in ("rescued", "lease lost", "fenced out", "Traceback"):
        assert sign_of_trouble not in stderr
