"""Waits and signals (issue 25), with a real `chit worker` process:

- signal-to-resume: a job waits for a signal (holding no slot); the time from
  `queue.signal` to its handler's wait returning in the worker, median and
  p90 of one at a time (issue 25's targets: SQLite under 50 ms, PostgreSQL
  under 100 ms);
- process1 with 10,000 jobs waiting for signals in the same queue against the
  same run without them: plain jobs per second through one worker, which the
  waiting jobs should not slow (within 10 %).

Not a test: prints figures; bounded in time. Also `make bench` step `waits`
(bench/run.py): one database a run (--database-url), the figures as a last
JSON line (--json).

    .venv/bin/python bench/waits_bench.py [--seconds 3] [--postgres URL]
        [--database-url URL] [--json]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import chit
from aenqueue_bench import run_script
from chit.jobs import JobFilter, State, Suspended
from chit.settings import Settings

HERE = Path(__file__).resolve().parent
WAITING = 10_000
PLAIN = 5_000


def make_queue(url: str) -> chit.Queue:
    queue = chit.Queue(settings=Settings(database_url=url))
    queue.task("approve", max_attempts=1)(lambda job, body: None)
    queue.task("noop")(lambda job, body: None)
    return queue


@contextmanager
def worker(url: str) -> Iterator[None]:
    env = os.environ | {"CHIT_DATABASE_URL": url, "PYTHONPATH": str(HERE)}
    cmd = [sys.executable, "-m", "chit", "worker", "--app", "waits_app:queue", "--concurrency", "4"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(30)


def until(check: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("the worker did not get there in time")
        time.sleep(0.001)


def resume_ms(queue: chit.Queue, seconds: float) -> list[float]:
    """One job at a time: wait for it to wait, signal it, read when its wait returned."""
    took: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or len(took) < 10:
        job_id = queue.enqueue("approve", {}).id
        until(lambda job_id=job_id: queue.get(job_id).state is State.WAITING)
        sent = time.time()
        queue.signal(job_id, "go", {"n": len(took)})
        until(lambda job_id=job_id: queue.get(job_id).state.terminal)
        took.append((queue.get(job_id).result["resumed_at"] - sent) * 1000)
    return took


def process_rate(queue: chit.Queue) -> float:
    """PLAIN no-op jobs through the running worker: jobs per second."""
    started = time.perf_counter()
    queue.enqueue_many([chit.JobRequest("noop", {}) for _ in range(PLAIN)])
    left = JobFilter(kind="noop", state=State.QUEUED)
    until(lambda: not queue.store.list(left, limit=1).jobs, 300)
    running = JobFilter(kind="noop", state=State.RUNNING)
    until(lambda: not queue.store.list(running, limit=1).jobs, 60)
    return PLAIN / (time.perf_counter() - started)


def seed_waiting(queue: chit.Queue) -> list[str]:
    """WAITING jobs waiting for a signal in the worker's queue, stored as a
    worker leaves them (claimed, then the Suspended outcome); their ids."""
    store = queue.store
    queue.enqueue_many([chit.JobRequest("approve", {"seed": True}) for _ in range(WAITING)])
    ids: list[str] = []
    while claimed := store.claim("seeder", ["default"], 500, 60):
        store.finish([Suspended(j.id, j.lease_token, signal="go") for j in claimed])
        ids += [j.id for j in claimed]
    return ids


def measure(name: str, url: str, seconds: float) -> dict[str, float]:
    queue = make_queue(url)
    try:
        queue.store.migrate()
        # Without, with, with, without (the waiting jobs cancelled: as many rows,
        # finished), the best of each: the order, the table's size and the
        # machine's load weigh on both alike.
        without = process_rate_with_worker(queue, url)
        seeded = seed_waiting(queue)
        with_waiting = max(process_rate_with_worker(queue, url) for _ in range(2))
        for job_id in seeded:
            queue.store.cancel(job_id)
        without = max(without, process_rate_with_worker(queue, url))
        with worker(url):
            took = resume_ms(queue, seconds)
    finally:
        queue.close()
    median = statistics.median(took)
    p90 = statistics.quantiles(took, n=10)[-1]
    print(
        f"{name:<10} signal to resume: median {median:6.1f} ms, p90 {p90:6.1f} ms "
        f"({len(took)} signals, {WAITING:,} jobs waiting)"
    )
    print(
        f"{name:<10} process1: {without:8,.0f} jobs/s without waiting jobs, "
        f"{with_waiting:8,.0f} jobs/s beside {WAITING:,} ({with_waiting / without:.2f}x)"
    )
    return {
        "median_ms": median,
        "p90_ms": p90,
        "signals": len(took),
        "jobs_per_s": without,
        "with_waiting_per_s": with_waiting,
        "ratio": with_waiting / without,
    }


def process_rate_with_worker(queue: chit.Queue, url: str) -> float:
    """PLAIN jobs through one worker, started before."""
    with worker(url):
        queue.enqueue("noop", {})  # the worker up and claiming before the clock starts
        queued = JobFilter(kind="noop", state=State.QUEUED)
        until(lambda: not queue.store.list(queued, limit=1).jobs)
        return process_rate(queue)


def main() -> int:
    title = "waits: signal-to-resume, and process1 beside 10,000 jobs waiting for signals"
    return run_script(__doc__, title, measure)


if __name__ == "__main__":
    raise SystemExit(main())
