"""`await queue.aenqueue(...)` one at a time from one event loop: jobs per
second on SQLite (a temporary file) and on PostgreSQL, beside the sync
`queue.enqueue` on the same database for scale.

Not a test: prints figures and the versions they were measured with; the load
average printed says how busy the machine was. Bounded in time. Also `make
bench` step `aenqueue` (bench/run.py): one database a run (--database-url, a
fresh one each time), the figures as a last JSON line (--json).

    .venv/bin/python bench/aenqueue_bench.py [--seconds 3] [--postgres URL]
        [--database-url URL] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import psycopg

import chit
from chit.settings import Settings

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


def make_queue(url: str) -> chit.Queue:
    queue = chit.Queue(settings=Settings(database_url=url))
    queue.task("noop")(lambda job, body: None)
    return queue


async def async_rate(queue: chit.Queue, seconds: float) -> float:
    await queue.aenqueue("noop", {"n": 0})  # the store and the pool opened
    n, started = 0, time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        await queue.aenqueue("noop", {"n": n})
        n += 1
    return n / (time.perf_counter() - started)


def sync_rate(queue: chit.Queue, seconds: float) -> float:
    queue.enqueue("noop", {"n": 0})
    n, started = 0, time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        queue.enqueue("noop", {"n": n})
        n += 1
    return n / (time.perf_counter() - started)


def measure(name: str, url: str, seconds: float) -> dict[str, float]:
    queue = make_queue(url)
    try:
        rate = asyncio.run(async_rate(queue, seconds))
        asyncio.run(queue.aclose())
        sync = sync_rate(queue, seconds)
    finally:
        queue.close()
    print(f"{name:<10} aenqueue {rate:8,.0f} jobs/s   enqueue (sync) {sync:8,.0f} jobs/s")
    return {"jobs_per_s": rate, "sync_jobs_per_s": sync}


def versions(postgres: str | None) -> str:
    """The versions measured with; PostgreSQL's when `postgres` is measured."""
    names = ["chit", "psycopg", "psycopg-pool", "pydantic"]
    found = ", ".join(f"{n} {metadata.version(n)}" for n in names)
    server = ""
    if postgres:
        with psycopg.connect(postgres) as conn:
            number = conn.info.server_version
        server = f"PostgreSQL {number // 10000}.{number % 100}, "
    return (
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{server}{found}; {os.cpu_count()} CPUs, {platform.machine()}"
    )


def run_script(doc: str, title: str, measure: Callable[[str, str, float], dict[str, float]]) -> int:
    """A bench script's command line (this one's, debounce_bench.py's): one
    database with --database-url, else SQLite then --postgres; `measure(name,
    url, seconds)` prints and returns the figures, the last one printed as JSON."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per run (default 3)")
    parser.add_argument("--postgres", default=PG_DEFAULT, help="a PostgreSQL database URL")
    parser.add_argument(
        "--database-url", help="measure only this database (default: SQLite, then --postgres)"
    )
    parser.add_argument("--json", action="store_true", help="the figures as a last JSON line")
    args = parser.parse_args()
    only = args.database_url
    postgres = args.postgres if only is None else only if only.startswith("postgres") else None
    print(title)
    print(versions(postgres))
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    if only is not None:
        name = "PostgreSQL" if postgres else "SQLite"
        figures = measure(name, only, args.seconds)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            measure("SQLite", f"sqlite:///{Path(tmp) / 'bench.db'}", args.seconds)
        figures = measure("PostgreSQL", args.postgres, args.seconds)
    if args.json:
        print(json.dumps({"ok": True, **figures, "versions": versions(postgres)}))
    return 0


def main() -> int:
    title = "aenqueue one at a time from one event loop (each awaited before the next)"
    return run_script(__doc__, title, measure)


if __name__ == "__main__":
    raise SystemExit(main())
