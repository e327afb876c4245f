"""Core benchmark: enqueue (one by one, bulk) and processing no-op jobs with 1
and 2 worker processes, on SQLite (and PostgreSQL with --postgres URL).

Not a test: prints figures and the versions they were measured with.

    .venv/bin/python bench/core_bench.py [--jobs 10000] [--postgres postgresql://...]
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import chit  # noqa: E402
from chit.jobs import JobFilter, State  # noqa: E402
from chit.settings import Settings  # noqa: E402


def make_queue(url: str) -> chit.Queue:
    import noop_app

    queue = chit.Queue(settings=Settings(database_url=url))
    queue.tasks = noop_app.queue.tasks
    return queue


def reset(url: str, tmp: Path, name: str) -> str:
    if url.startswith("sqlite"):
        return f"sqlite:///{tmp / name}.db"
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS chit_results, chit_attempts, chit_jobs CASCADE")
        conn.execute("DROP TABLE IF EXISTS chit_schema_migrations CASCADE")
        conn.execute("DROP FUNCTION IF EXISTS chit_notify_queued, chit_delete_attempts")
    return url


def enqueue_one_by_one(url: str, n: int) -> float:
    queue = make_queue(url)
    started = time.perf_counter()
    for i in range(n):
        queue.enqueue("noop", {"i": i})
    elapsed = time.perf_counter() - started
    queue.close()
    return n / elapsed


def enqueue_bulk(url: str, n: int) -> tuple[float, float]:
    queue = make_queue(url)
    started = time.perf_counter()
    queue.enqueue_many([chit.JobRequest("noop", {"i": i}) for i in range(n)])
    elapsed = time.perf_counter() - started
    queue.close()
    return n / elapsed, elapsed


def process(url: str, n: int, workers: int, concurrency: int) -> float:
    queue = make_queue(url)
    queue.enqueue_many([chit.JobRequest("noop", {"i": i}) for i in range(n)])
    env = {
        **os.environ,
        "CHIT_DATABASE_URL": url,
        "PYTHONPATH": str(HERE),
    }
    cmd = [
        sys.executable, "-m", "chit", "worker", "--app", "noop_app:queue",
        "--concurrency", str(concurrency), "--log-level", "WARNING",
    ]  # fmt: skip
    procs = [subprocess.Popen(cmd, env=env) for _ in range(workers)]
    try:
        while queue.store.stats().by_state[State.SUCCEEDED.value] < n:
            time.sleep(0.05)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
    jobs = []
    cursor = None
    while True:
        page = queue.store.list(JobFilter(state=State.SUCCEEDED), 1000, cursor)
        jobs += page.jobs
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(jobs) == n, f"{len(jobs)} succeeded of {n}"
    first = min(j.started_at for j in jobs if j.started_at)
    last = max(j.finished_at for j in jobs if j.finished_at)
    queue.close()
    return n / (last - first).total_seconds()


def latency(url: str, n: int, spacing: float) -> tuple[float, float]:
    """Enqueue-to-start with an idle worker: (median, p99) in milliseconds, from the
    store's own timestamps (created_at to the claim's started_at)."""
    queue = make_queue(url)
    env = {**os.environ, "CHIT_DATABASE_URL": url, "PYTHONPATH": str(HERE)}
    cmd = [sys.executable, "-m", "chit", "worker", "--app", "noop_app:queue", "--log-level",
           "WARNING"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env)
    try:
        time.sleep(2.0)  # let it go idle
        ids = []
        for i in range(n):
            ids.append(queue.enqueue("noop", {"i": i}).id)
            time.sleep(spacing)
        while queue.store.stats().by_state[State.SUCCEEDED.value] < n:
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(30)
    waits = sorted(
        (job.started_at - job.created_at).total_seconds() * 1000
        for job in (queue.store.get(i) for i in ids)
        if job is not None and job.started_at is not None
    )
    queue.close()
    return waits[len(waits) // 2], waits[min(len(waits) - 1, int(len(waits) * 0.99))]


def versions() -> str:
    return (
        f"chit {metadata.version('chit')}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.machine()} x{os.cpu_count()} cores"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--postgres", help="also run on this PostgreSQL URL (tables dropped!)")
    args = parser.parse_args()
    print(versions())
    backends = ["sqlite"] + ([args.postgres] if args.postgres else [])
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for backend in backends:
            label = "SQLite" if backend == "sqlite" else "PostgreSQL"
            n = args.jobs
            one = enqueue_one_by_one(reset(backend, tmp, "one"), n // 2)
            bulk, bulk_seconds = enqueue_bulk(reset(backend, tmp, "bulk"), n)
            print(f"{label}: enqueue one by one     {one:10,.0f} jobs/s")
            print(f"{label}: enqueue_many ({n:,})  {bulk:10,.0f} jobs/s ({bulk_seconds:.2f} s)")
            for workers in (1, 2):
                rate = process(reset(backend, tmp, f"w{workers}"), n, workers, args.concurrency)
                print(
                    f"{label}: process, {workers} worker process(es) x {args.concurrency} slots "
                    f"{rate:10,.0f} jobs/s"
                )
            median, p99 = latency(reset(backend, tmp, "latency"), 200, 0.02)
            print(
                f"{label}: enqueue to start, idle worker: median {median:.1f} ms, p99 {p99:.1f} ms"
            )


if __name__ == "__main__":
    main()
