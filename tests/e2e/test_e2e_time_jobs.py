"""Snooze, expiry and unique jobs with real `chit worker` processes, on both
backends (DESIGN.md "Time")."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import chit
from chit.jobs import AttemptOutcome, State
from support.jobs import app_queue, wait_terminal
from support.processes import Procs
from support.waiting import wait_until

pytestmark = pytest.mark.slow

TIME_APP = "support.time_app:queue"


@pytest.fixture
def time_queue(db_url: str) -> Iterator[chit.Queue]:
    """The time app's tasks on the test's database, to enqueue and read jobs."""
    from support import time_app

    with app_queue(db_url, time_app.queue) as q:
        yield q


@pytest.mark.timeout(90)
@pytest.mark.parametrize("pool", ["thread", "process"])
def test_snoozed_twice_then_succeeded_shows_one_attempt(
    procs: Procs, time_queue: chit.Queue, pool: str
) -> None:
    """max_attempts=1: a snooze that counted would fail the job."""
    sync = time_queue.enqueue("poll", {"times": 2}).id
    asynchronous = time_queue.enqueue("apoll", {"times": 2}).id
    procs.worker("--pool", pool, "--concurrency", "2", app=TIME_APP).wait_started()
    for job_id in (sync, asynchronous):
        job = wait_terminal(time_queue, job_id, 60)
        assert job.state is State.SUCCEEDED, job.error
        assert job.attempts == 1
        assert job.result == {"attempt": 1, "snoozed": 2}
        history = time_queue.store.attempts(job_id)
        assert [a.outcome for a in history] == [AttemptOutcome.SNOOZED] * 2 + [
            AttemptOutcome.SUCCEEDED
        ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seconds", [-1, True, "nan", 31 * 86400])
def test_a_bad_snooze_fails_the_attempt_with_a_clear_error(
    procs: Procs, time_queue: chit.Queue, seconds: object
) -> None:
    job_id = time_queue.enqueue("bad_snooze", {"seconds": seconds}).id
    procs.worker(app=TIME_APP).wait_started()
    job = wait_terminal(time_queue, job_id, 30)
    assert job.state is State.FAILED
    assert job.error is not None
    assert job.error.startswith("ValueError: chit.Snooze takes a number of seconds from 0 to")


@pytest.mark.timeout(60)
def test_an_expired_job_never_starts(procs: Procs, time_queue: chit.Queue) -> None:
    expiring = time_queue.enqueue("noop", expires_in=0.5).id
    stored = time_queue.store.get(expiring)
    assert stored is not None and stored.expires_at is not None
    deadline = stored.expires_at
    wait_until(lambda: datetime.now(UTC) > deadline, 10, what="the job's expiry to pass")
    fresh = time_queue.enqueue("noop", expires_in=600).id
    procs.worker(app=TIME_APP).wait_started()
    assert wait_terminal(time_queue, fresh, 30).state is State.SUCCEEDED
    job = wait_terminal(time_queue, expiring, 30)
    assert (job.state, job.error, job.attempts) == (
        State.CANCELLED,
        "expired before it started",
        0,
    )
    assert job.started_at is None
    assert time_queue.store.attempts(expiring) == []


@pytest.mark.timeout(60)
def test_a_unique_key_returns_the_active_job_and_frees_once_finished(
    procs: Procs, time_queue: chit.Queue, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    first = time_queue.enqueue("hold", {"go": str(go)}, unique_key="nightly")
    assert first.created
    procs.worker(app=TIME_APP).wait_started()
    wait_until(lambda: time_queue.get(first.id).state is State.RUNNING, 30, what="the job to start")
    again = time_queue.enqueue("hold", {"go": "elsewhere"}, unique_key="nightly")
    assert (again.id, again.created) == (first.id, False)
    go.touch()
    assert wait_terminal(time_queue, first.id, 30).state is State.SUCCEEDED
    after = time_queue.enqueue("hold", {"go": str(go)}, unique_key="nightly")
    assert after.created and after.id != first.id
    assert wait_terminal(time_queue, after.id, 30).state is State.SUCCEEDED
