"""SIGTERM with real processes: finish what runs and claim nothing more; after
the grace period hand unfinished jobs back uncounted; a second signal ends the
grace at once (the jobs handed back the same way); a signal before the worker
runs is a clean exit."""

from __future__ import annotations

import json
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
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_hands_the_running_job_back_and_exits_at_once(
    procs: Procs, queue: chit.Queue, tmp_path: Path, signum: signal.Signals
) -> None:
    log = tmp_path / "runs.log"
    job_id = queue.enqueue("sleep", {"log": str(log), "seconds": 60}).id
    w = procs.worker(name="w")  # default grace: 30 s
    wait_until(lambda: lines(log), 10, what="the job to start")

    w.signal(signum)
    wait_until(lambda: "finishing running jobs" in w.stderr(), 5, what="the first signal")
    started = time.monotonic()
    w.signal(signum)
    assert w.wait(10) == 0
    assert time.monotonic() - started < 5  # not the 30 s grace
    assert f"{signum.name} again: handing back running jobs" in w.stderr()

    # Queued again at once, uncounted, as after the grace: not left running
    # until its 30-second lease expires.
    job = get(queue, job_id)
    assert (job.state, job.attempts, job.lease_expires_at) == (State.QUEUED, 0, None)
    assert job.run_at <= datetime.now(UTC)
    assert [a.outcome for a in queue.store.attempts(job_id)] == [AttemptOutcome.RELEASED]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_worker_runs_is_a_clean_exit(
    procs: Procs, queue: chit.Queue, tmp_path: Path, signum: signal.Signals
) -> None:
    loading, go = tmp_path / "loading", tmp_path / "go"
    job_id = queue.enqueue("noop", {}).id
    env = {"CHIT_TEST_LOADING": str(loading), "CHIT_TEST_GO": str(go)}
    w = procs.start(
        ["-m", "chit", "worker", "--app", "support.slow_start_app:queue"], "w", extra_env=env
    )
    wait_until(loading.exists, 30, what="the worker to load its app")
    w.signal(signum)  # while the app's import waits
    go.touch()
    assert w.wait(30) == 0, w.stderr()
    assert f"{signum.name} before the worker started: exiting" in w.stderr()
    assert "started: queues" not in w.stderr()
    assert get(queue, job_id).state is State.QUEUED  # nothing claimed


@pytest.mark.timeout(60)
def test_a_thread_past_its_timeout_is_logged_and_not_waited_for_at_shutdown(
    procs: Procs, queue: chit.Queue
) -> None:
    job_id = queue.enqueue("overrun", {"seconds": 120}).id
    w = procs.worker("--log-format", "json", name="w")  # thread pool, grace 30 s
    wait_until(lambda: '"job.abandoned"' in w.stderr(), 20, what="the abandoned thread logged")
    [line] = [x for x in map(json.loads, w.stderr().splitlines()) if x["event"] == "job.abandoned"]
    assert (line["job_id"], line["kind"], line["level"]) == (job_id, "overrun", "warning")
    assert "passed its 0.5s timeout: its thread runs on" in line["message"]
    wait_until(lambda: get(queue, job_id).state is State.FAILED, 10, what="the timeout recorded")

    started = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0
    assert time.monotonic() - started < 10  # not the 30 s grace for a thread that runs on
    assert get(queue, job_id).state is State.FAILED
