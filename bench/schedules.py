"""What a table of schedules costs a worker's maintenance tick (issue 13: under
50 ms with 10,000 schedules).

    .venv/bin/python bench/schedules.py [--schedules 10000] [--ticks 50]
        [--backends sqlite,postgres]

Also `make bench` step `schedules` (bench/run.py). Each backend gets a fresh
database (a new SQLite file; a new PostgreSQL database, dropped after) holding
`--schedules` schedules, schedule i at minute i % 60 of each hour (`{i%60} * * * *`,
so about 1/60 of them are due each minute). Then, with the clock given
(`now=`), as `Maintenance.run_once` in a worker runs it (lease rescue and the
scheduler; no retention):

- idle: a tick when no schedule is due (the common case: one indexed look);
- busy: the ticks just after a minute starts, which enqueue that minute's
  schedules (about 167 of 10,000; at most DUE_BATCH a tick, the next tick
  following at once) and move each on; `burst` is their sum. Then idle ticks.

Printed: the median and p95 of each, the versions, and the figures as JSON on
the last line.
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import chit  # noqa: E402
from chit.jobs import JobFilter  # noqa: E402
from chit.store import FullStore  # noqa: E402
from chit.worker.maintenance import Maintenance  # noqa: E402
from chit.worker.scheduler import DUE_BATCH, Scheduler  # noqa: E402

T0 = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)


def app(store: FullStore) -> chit.Queue:
    queue = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    queue.use_store(store)

    @queue.task("report")
    def report(job: chit.JobContext, body: dict[str, Any]) -> None: ...

    return queue


def seed(queue: chit.Queue, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        schedule = queue.check_schedule(f"s{i:05d}", "report", {"i": i}, cron=f"{i % 60} * * * *")
        queue.store.declare_schedule(schedule, now=T0)
    return time.perf_counter() - started


def timed(tick: Callable[[], None]) -> float:
    started = time.perf_counter()
    tick()
    return (time.perf_counter() - started) * 1000


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 3),
        "max_ms": round(ordered[-1], 3),
    }


def measure(store: FullStore, count: int, ticks: int) -> dict[str, Any]:
    queue = app(store)
    seeded = seed(queue, count)
    maintenance = Maintenance(store, 1.0, scheduler=Scheduler(store, queue))
    idle_at = T0 + timedelta(seconds=10)  # nothing due between :00:30 and :01:00
    maintenance.run_once(idle_at)  # warm
    idle = [timed(lambda: maintenance.run_once(idle_at)) for _ in range(ticks)]
    busy, burst, after = [], [], []
    for minute in range(1, 11):
        at = T0.replace(second=1) + timedelta(minutes=minute)
        spent = []
        while True:  # the ticks that follow at once while schedules are due
            started = time.perf_counter()
            wait = maintenance.run_once(at)
            spent.append((time.perf_counter() - started) * 1000)
            if wait > 0:
                break
        busy += spent[:-1] or spent
        burst.append(sum(spent))
        after += [timed(lambda at=at: maintenance.run_once(at)) for _ in range(ticks // 10)]
    jobs = len(store.list(JobFilter(kind="report"), limit=100_000).jobs)
    return {
        "schedules": count,
        "seed_seconds": round(seeded, 2),
        "idle": figures(idle),
        "busy": figures(busy),
        "burst": figures(burst),
        "idle_after_busy": figures(after),
        "due_per_busy_tick": round(jobs / 10, 1),
        "jobs": jobs,
    }


def run(backends: list[str], count: int, ticks: int) -> dict[str, Any]:
    results: dict[str, Any] = {
        "versions": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "chit": metadata.version("chit"),
            "cronsim": metadata.version("cronsim"),
        }
    }
    if "sqlite" in backends:
        from chit.store.sqlite import SQLiteStore

        with tempfile.TemporaryDirectory() as tmp:
            sqlite_store = SQLiteStore(Path(tmp) / "schedules.db")
            try:
                results["sqlite"] = measure(sqlite_store, count, ticks)
            finally:
                sqlite_store.close()
    if "postgres" in backends:
        from chit.store.postgres import PostgresStore
        from services import Postgres

        pg = Postgres()
        results["versions"]["postgres"] = pg.version
        try:
            pg_store = PostgresStore(pg.fresh("chit_bench_schedules"), pool_size=2)
            try:
                results["postgres"] = measure(pg_store, count, ticks)
            finally:
                pg_store.close()
        finally:
            pg.drop_all()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=50)
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    results = run(args.backends.split(","), args.schedules, args.ticks)
    print("versions:", ", ".join(f"{k} {v}" for k, v in results["versions"].items()))
    for backend in ("sqlite", "postgres"):
        r = results.get(backend)
        if r is None:
            continue
        print(
            f"{backend}: {r['schedules']:,} schedules (seeded in {r['seed_seconds']} s); "
            f"idle tick median {r['idle']['median_ms']} ms, p95 {r['idle']['p95_ms']} ms; "
            f"busy tick (at most {DUE_BATCH} due) median {r['busy']['median_ms']} ms, "
            f"p95 {r['busy']['p95_ms']} ms, max {r['busy']['max_ms']} ms; "
            f"a minute's {r['due_per_busy_tick']:g} due in ticks back to back: median "
            f"{r['burst']['median_ms']} ms; "
            f"idle after median {r['idle_after_busy']['median_ms']} ms"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
